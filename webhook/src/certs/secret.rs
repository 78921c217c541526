//! Keeping the certificate bundle in a Secret so that every replica serves the same CA.
//!
//! Several replicas may start at once. Each reads the Secret; when it is missing, each tries to
//! create it and exactly one wins: the losers get 409 AlreadyExists, re-read and use the
//! winner's material. Renewals replace the Secret with the resourceVersion that was read, so a
//! concurrent renewal loses with 409 and re-reads too. All replicas converge on one CA.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use super::bundle::{CertBundle, CertError, CertPolicy, Renewal, renew};

/// Secret key of the CA certificate (upstream name).
pub const KEY_CA_CERT: &str = "ca-cert.pem";
/// Secret key of the CA private key (upstream name).
pub const KEY_CA_KEY: &str = "ca-key.pem";
/// Secret key of the serving certificate (kubernetes.io/tls name).
pub const KEY_TLS_CERT: &str = "tls.crt";
/// Secret key of the serving key (kubernetes.io/tls name).
pub const KEY_TLS_KEY: &str = "tls.key";
/// Upstream's duplicate of `tls.crt`.
pub const KEY_CERT: &str = "cert.pem";
/// Upstream's duplicate of `tls.key`.
pub const KEY_KEY: &str = "key.pem";
/// Annotation with the serving certificate's expiry (RFC 3339), read instead of parsing X.509.
pub const ANNOTATION_NOT_AFTER: &str = "koordinator.sh/webhook-cert-not-after";
/// Annotation with the CA's expiry (RFC 3339).
pub const ANNOTATION_CA_NOT_AFTER: &str = "koordinator.sh/webhook-ca-not-after";
/// Annotation with the serving certificate's DNS names, comma separated.
pub const ANNOTATION_DNS_NAMES: &str = "koordinator.sh/webhook-cert-dns-names";

/// Why keeping the Secret in shape failed.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The API server refused or was unreachable.
    #[error("secret {name}: {source}")]
    Api {
        /// Secret name.
        name: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// Generating certificates failed.
    #[error(transparent)]
    Cert(#[from] CertError),
    /// Every attempt lost a race against another writer.
    #[error("secret {0}: still conflicting after several attempts")]
    Conflict(String),
}

/// Reads a bundle out of a Secret; `None` when anything is missing or unreadable, which makes
/// the caller regenerate (e.g. a Secret written by upstream Koordinator, which lacks the expiry
/// annotations).
pub fn bundle_from_secret(secret: &Secret) -> Option<CertBundle> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| {
        data.get(key)
            .and_then(|value| String::from_utf8(value.0.clone()).ok())
    };
    let annotations = secret.metadata.annotations.as_ref()?;
    let time = |key: &str| {
        annotations
            .get(key)
            .and_then(|value| value.parse::<Timestamp>().ok())
    };
    Some(CertBundle {
        ca_cert_pem: text(KEY_CA_CERT)?,
        ca_key_pem: text(KEY_CA_KEY)?,
        cert_pem: text(KEY_TLS_CERT)?,
        key_pem: text(KEY_TLS_KEY)?,
        ca_not_after: time(ANNOTATION_CA_NOT_AFTER)?,
        not_after: time(ANNOTATION_NOT_AFTER)?,
        dns_names: annotations
            .get(ANNOTATION_DNS_NAMES)?
            .split(',')
            .filter(|name| !name.is_empty())
            .map(str::to_string)
            .collect(),
    })
}

/// Writes a bundle into Secret data and annotations (keeping the rest of `base`).
pub fn secret_with_bundle(mut base: Secret, bundle: &CertBundle) -> Secret {
    let bytes = |text: &str| ByteString(text.as_bytes().to_vec());
    let data = BTreeMap::from([
        (KEY_CA_CERT.to_string(), bytes(&bundle.ca_cert_pem)),
        (KEY_CA_KEY.to_string(), bytes(&bundle.ca_key_pem)),
        (KEY_TLS_CERT.to_string(), bytes(&bundle.cert_pem)),
        (KEY_TLS_KEY.to_string(), bytes(&bundle.key_pem)),
        (KEY_CERT.to_string(), bytes(&bundle.cert_pem)),
        (KEY_KEY.to_string(), bytes(&bundle.key_pem)),
    ]);
    base.data = Some(data);
    base.string_data = None;
    let annotations = base.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(ANNOTATION_NOT_AFTER.to_string(), bundle.not_after.to_string());
    annotations.insert(
        ANNOTATION_CA_NOT_AFTER.to_string(),
        bundle.ca_not_after.to_string(),
    );
    annotations.insert(ANNOTATION_DNS_NAMES.to_string(), bundle.dns_names.join(","));
    base
}

/// Makes sure Secret `namespace/name` holds a bundle valid for `dns_names` well past `now`,
/// creating or renewing it as needed, and returns the bundle every replica agrees on.
///
/// `served` is the bundle this process serves, if any. When the Secret is gone or holds no
/// readable bundle, it is restored from `served` (renewed if due) rather than from a new CA:
/// the API server keeps trusting the caBundle it has, so no admission call meets a certificate
/// it cannot verify while the configurations are re-injected. Without `served` (start-up) a
/// missing Secret gets a new CA.
pub async fn ensure_secret(
    client: Client,
    namespace: &str,
    name: &str,
    dns_names: &[String],
    now: Timestamp,
    policy: &CertPolicy,
    served: Option<&CertBundle>,
) -> Result<CertBundle, SecretError> {
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let api_error = |source| SecretError::Api {
        name: format!("{namespace}/{name}"),
        source,
    };
    for _attempt in 0..5 {
        let existing = api.get_opt(name).await.map_err(api_error)?;
        let stored = existing.as_ref().and_then(bundle_from_secret);
        let restoring = stored.is_none() && served.is_some();
        let current = stored.or_else(|| served.cloned());
        let (bundle, decision) = renew(current.as_ref(), dns_names, now, policy)?;
        if decision == Renewal::Keep && !restoring {
            return Ok(bundle);
        }
        if restoring {
            tracing::warn!(secret = %format!("{namespace}/{name}"), ?decision, "certificate Secret missing or unreadable; restoring the certificates this replica serves");
        } else {
            tracing::info!(secret = %format!("{namespace}/{name}"), ?decision, "writing webhook certificates");
        }
        let result = match existing {
            None => {
                let secret = secret_with_bundle(
                    Secret {
                        metadata: ObjectMeta {
                            name: Some(name.to_string()),
                            namespace: Some(namespace.to_string()),
                            ..ObjectMeta::default()
                        },
                        type_: Some("Opaque".to_string()),
                        ..Secret::default()
                    },
                    &bundle,
                );
                api.create(&PostParams::default(), &secret).await
            }
            // `replace` carries the resourceVersion we read: a concurrent writer makes it 409.
            Some(existing) => {
                api.replace(
                    name,
                    &PostParams::default(),
                    &secret_with_bundle(existing, &bundle),
                )
                .await
            }
        };
        match result {
            Ok(_) => return Ok(bundle),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::info!(secret = %format!("{namespace}/{name}"), "another replica wrote the certificates first; re-reading");
            }
            Err(error) => return Err(api_error(error)),
        }
    }
    Err(SecretError::Conflict(format!("{namespace}/{name}")))
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use k8s_openapi::api::core::v1::Secret;

    use super::{KEY_CERT, KEY_TLS_CERT, bundle_from_secret, secret_with_bundle};
    use crate::certs::bundle::{CertPolicy, generate, service_dns_names};

    #[test]
    fn bundle_round_trips_through_a_secret_with_upstream_keys() {
        let bundle = generate(
            &service_dns_names("svc", "ns"),
            Timestamp::from_second(1_800_000_000).unwrap(),
            &CertPolicy::default(),
        )
        .unwrap();
        let secret = secret_with_bundle(Secret::default(), &bundle);
        let data = secret.data.as_ref().unwrap();
        assert_eq!(data[KEY_CERT], data[KEY_TLS_CERT]);
        for key in [
            "ca-cert.pem",
            "ca-key.pem",
            "tls.crt",
            "tls.key",
            "cert.pem",
            "key.pem",
        ] {
            assert!(data.contains_key(key), "{key}");
        }
        assert_eq!(bundle_from_secret(&secret), Some(bundle));
        // A Secret written by upstream (no expiry annotations) is regenerated, not trusted blindly.
        let mut upstream = secret.clone();
        upstream.metadata.annotations = None;
        assert_eq!(bundle_from_secret(&upstream), None);
    }
}
