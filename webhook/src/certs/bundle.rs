//! The certificate material the webhook serves with, and the pure decision whether it must be
//! renewed.
//!
//! A long-lived self-signed CA signs a shorter-lived serving certificate. Rotating only the
//! serving certificate leaves the CA (and so every webhook configuration's `caBundle`)
//! unchanged, so API servers never see a window in which they distrust the served certificate.
//! The CA itself is renewed well before it expires; the new `caBundle` is injected right after.

use jiff::{SignedDuration, Timestamp};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose,
};

/// Common name of the self-signed CA, as upstream Koordinator names it.
pub const CA_COMMON_NAME: &str = "webhook-cert-ca";

/// Why generating or loading certificates failed.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// rcgen refused the parameters or failed to sign.
    #[error("generating certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// A timestamp fell outside what X.509 can express.
    #[error("certificate validity out of range: {0}")]
    Validity(String),
    /// Stored material is incomplete or unreadable.
    #[error("stored certificate material is unusable: {0}")]
    Stored(String),
}

/// Lifetimes and renewal margins. Renewal happens when less than `renew_before` is left, so a
/// certificate is always replaced long before it expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CertPolicy {
    /// Lifetime of a newly generated CA.
    pub ca_validity: SignedDuration,
    /// Lifetime of a newly generated serving certificate.
    pub serving_validity: SignedDuration,
    /// Renew the serving certificate when it has less than this left.
    pub serving_renew_before: SignedDuration,
    /// Renew the CA when it has less than this left (must exceed the serving lifetime so a
    /// serving certificate never outlives its CA).
    pub ca_renew_before: SignedDuration,
}

impl Default for CertPolicy {
    fn default() -> Self {
        let day = SignedDuration::from_hours(24);
        Self {
            ca_validity: day * 3650,
            serving_validity: day * 365,
            serving_renew_before: day * 90,
            ca_renew_before: day * 400,
        }
    }
}

/// PEM material for the CA and the serving certificate, plus the facts needed to decide about
/// renewal without parsing X.509.
#[derive(Clone, PartialEq, Eq)]
pub struct CertBundle {
    /// CA certificate (PEM); this is the `caBundle`.
    pub ca_cert_pem: String,
    /// CA private key (PEM, PKCS#8).
    pub ca_key_pem: String,
    /// Serving certificate (PEM).
    pub cert_pem: String,
    /// Serving private key (PEM, PKCS#8).
    pub key_pem: String,
    /// When the CA expires.
    pub ca_not_after: Timestamp,
    /// When the serving certificate expires.
    pub not_after: Timestamp,
    /// Subject alternative names of the serving certificate.
    pub dns_names: Vec<String>,
}

impl std::fmt::Debug for CertBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertBundle")
            .field("ca_not_after", &self.ca_not_after)
            .field("not_after", &self.not_after)
            .field("dns_names", &self.dns_names)
            .finish_non_exhaustive()
    }
}

/// What a renewal check decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// Keep serving the stored material.
    Keep,
    /// Sign a new serving certificate with the existing CA (caBundle unchanged).
    ServingCert(String),
    /// Generate a new CA and serving certificate (caBundle changes).
    Everything(String),
}

/// The DNS names a serving certificate needs for Service `service` in `namespace`.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        "localhost".to_string(),
    ]
}

/// Decides whether `bundle` can keep serving `dns_names` at `now`.
pub fn renewal(bundle: &CertBundle, dns_names: &[String], now: Timestamp, policy: &CertPolicy) -> Renewal {
    if bundle.ca_not_after.duration_since(now) < policy.ca_renew_before {
        return Renewal::Everything(format!("CA expires at {}", bundle.ca_not_after));
    }
    if KeyPair::from_pem(&bundle.ca_key_pem).is_err() {
        return Renewal::Everything("CA key does not parse".to_string());
    }
    if bundle.dns_names != dns_names {
        return Renewal::ServingCert(format!(
            "serving certificate names {:?}, want {:?}",
            bundle.dns_names, dns_names
        ));
    }
    if bundle.not_after.duration_since(now) < policy.serving_renew_before {
        return Renewal::ServingCert(format!("serving certificate expires at {}", bundle.not_after));
    }
    if KeyPair::from_pem(&bundle.key_pem).is_err() {
        return Renewal::ServingCert("serving key does not parse".to_string());
    }
    Renewal::Keep
}

/// Applies a renewal decision: returns the bundle to serve from now on.
pub fn renew(
    current: Option<&CertBundle>,
    dns_names: &[String],
    now: Timestamp,
    policy: &CertPolicy,
) -> Result<(CertBundle, Renewal), CertError> {
    let decision = match current {
        None => Renewal::Everything("no certificate stored".to_string()),
        Some(bundle) => renewal(bundle, dns_names, now, policy),
    };
    let bundle = match (&decision, current) {
        (Renewal::Keep, Some(bundle)) => bundle.clone(),
        (Renewal::ServingCert(_), Some(bundle)) => sign_serving(bundle, dns_names, now, policy)?,
        _ => generate(dns_names, now, policy)?,
    };
    Ok((bundle, decision))
}

/// Generates a fresh CA and a serving certificate for `dns_names`.
pub fn generate(dns_names: &[String], now: Timestamp, policy: &CertPolicy) -> Result<CertBundle, CertError> {
    let ca_key = KeyPair::generate()?;
    let ca_not_after = now + policy.ca_validity;
    let ca_params = ca_params(now, ca_not_after)?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let partial = CertBundle {
        ca_cert_pem: ca_cert.pem(),
        ca_key_pem: ca_key.serialize_pem(),
        cert_pem: String::new(),
        key_pem: String::new(),
        ca_not_after,
        not_after: now,
        dns_names: Vec::new(),
    };
    sign_serving(&partial, dns_names, now, policy)
}

/// Signs a new serving certificate with the bundle's CA, keeping the CA.
pub fn sign_serving(
    bundle: &CertBundle,
    dns_names: &[String],
    now: Timestamp,
    policy: &CertPolicy,
) -> Result<CertBundle, CertError> {
    let ca_key = KeyPair::from_pem(&bundle.ca_key_pem)?;
    // The issuer is rebuilt from the same distinguished name and key: the signature, the issuer
    // name and the authority key identifier then match the stored CA certificate exactly.
    let issuer = Issuer::new(ca_params(now, bundle.ca_not_after)?, ca_key);
    let not_after = std::cmp::min(now + policy.serving_validity, bundle.ca_not_after);
    let mut params = CertificateParams::new(dns_names.to_vec())?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, dns_names.first().cloned().unwrap_or_default());
    params.distinguished_name = name;
    set_validity(&mut params, now - SignedDuration::from_mins(5), not_after)?;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok(CertBundle {
        ca_cert_pem: bundle.ca_cert_pem.clone(),
        ca_key_pem: bundle.ca_key_pem.clone(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        ca_not_after: bundle.ca_not_after,
        not_after,
        dns_names: dns_names.to_vec(),
    })
}

fn ca_params(now: Timestamp, not_after: Timestamp) -> Result<CertificateParams, CertError> {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, CA_COMMON_NAME);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, now - SignedDuration::from_mins(5), not_after)?;
    Ok(params)
}

/// rcgen takes `time::OffsetDateTime`; both ends are built from the Unix epoch so the crate
/// needs no direct `time` dependency.
fn set_validity(params: &mut CertificateParams, from: Timestamp, to: Timestamp) -> Result<(), CertError> {
    let seconds =
        |at: Timestamp| u64::try_from(at.as_second()).map_err(|_| CertError::Validity(at.to_string()));
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(seconds(from)?);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(seconds(to)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use jiff::{SignedDuration, Timestamp};

    use super::{CertPolicy, Renewal, generate, renew, renewal, service_dns_names};

    fn day() -> SignedDuration {
        SignedDuration::from_hours(24)
    }

    #[test]
    fn fresh_material_is_kept_and_renewed_well_before_expiry() {
        let policy = CertPolicy::default();
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let names = service_dns_names("svc", "ns");
        let bundle = generate(&names, now, &policy).unwrap();
        assert_eq!(bundle.not_after, now + policy.serving_validity);
        assert_eq!(renewal(&bundle, &names, now, &policy), Renewal::Keep);
        assert_eq!(
            renewal(&bundle, &names, now + day() * 270, &policy),
            Renewal::Keep
        );
        // 91 days before expiry: still fine; 89: renew the serving certificate only.
        assert!(matches!(
            renewal(&bundle, &names, now + day() * 276, &policy),
            Renewal::ServingCert(_)
        ));
        let (renewed, decision) = renew(Some(&bundle), &names, now + day() * 276, &policy).unwrap();
        assert!(matches!(decision, Renewal::ServingCert(_)));
        assert_eq!(renewed.ca_cert_pem, bundle.ca_cert_pem);
        assert_ne!(renewed.cert_pem, bundle.cert_pem);
        // The CA is replaced long before it expires.
        assert!(matches!(
            renewal(&bundle, &names, now + day() * (3650 - 399), &policy),
            Renewal::Everything(_)
        ));
    }

    #[test]
    fn changed_names_or_missing_material_regenerate() {
        let policy = CertPolicy::default();
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let names = service_dns_names("svc", "ns");
        let bundle = generate(&names, now, &policy).unwrap();
        assert!(matches!(
            renewal(&bundle, &service_dns_names("other", "ns"), now, &policy),
            Renewal::ServingCert(_)
        ));
        let mut broken = bundle.clone();
        broken.ca_key_pem = "nope".into();
        assert!(matches!(
            renewal(&broken, &names, now, &policy),
            Renewal::Everything(_)
        ));
        let (_, decision) = renew(None, &names, now, &policy).unwrap();
        assert_eq!(decision, Renewal::Everything("no certificate stored".into()));
    }
}
