//! Injecting the CA into the webhook configurations the chart ships, so API servers trust the
//! served certificate. The configurations are found by name; only `clientConfig.caBundle` is
//! touched, and only when it differs, so repeated syncs cause no writes.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use kube::api::PostParams;
use kube::{Api, Client};

/// Why injecting the caBundle failed.
#[derive(Debug, thiserror::Error)]
#[error("webhook configuration {name}: {source}")]
pub struct InjectError {
    /// The configuration's name.
    pub name: String,
    /// The client error.
    #[source]
    pub source: kube::Error,
}

/// Sets `caBundle` on every client config; returns whether anything changed.
pub fn set_ca_bundle<'a>(
    configs: impl IntoIterator<Item = &'a mut WebhookClientConfig>,
    ca_pem: &[u8],
) -> bool {
    let mut changed = false;
    for config in configs {
        let wanted = Some(ByteString(ca_pem.to_vec()));
        if config.ca_bundle != wanted {
            config.ca_bundle = wanted;
            changed = true;
        }
    }
    changed
}

/// What an injection pass did with each configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InjectOutcome {
    /// The caBundle was written.
    Updated(String),
    /// Already up to date.
    Unchanged(String),
    /// No configuration by that name exists (yet); the next sync retries.
    Missing(String),
}

/// Injects `ca_pem` into the named mutating and validating configurations. Empty names are
/// skipped (the operator manages the caBundle another way).
pub async fn inject_ca_bundle(
    client: Client,
    mutating: &str,
    validating: &str,
    ca_pem: &[u8],
) -> Result<Vec<InjectOutcome>, InjectError> {
    let mut outcomes = Vec::new();
    if !mutating.is_empty() {
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        outcomes.push(
            update_with_retry(&api, mutating, |cfg| {
                set_ca_bundle(
                    cfg.webhooks
                        .iter_mut()
                        .flatten()
                        .map(|hook| &mut hook.client_config),
                    ca_pem,
                )
            })
            .await?,
        );
    }
    if !validating.is_empty() {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
        outcomes.push(
            update_with_retry(&api, validating, |cfg| {
                set_ca_bundle(
                    cfg.webhooks
                        .iter_mut()
                        .flatten()
                        .map(|hook| &mut hook.client_config),
                    ca_pem,
                )
            })
            .await?,
        );
    }
    Ok(outcomes)
}

async fn update_with_retry<K>(
    api: &Api<K>,
    name: &str,
    mut mutate: impl FnMut(&mut K) -> bool,
) -> Result<InjectOutcome, InjectError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let error = |source| InjectError {
        name: name.to_string(),
        source,
    };
    let mut last_error = None;
    for _attempt in 0..5 {
        let Some(mut object) = api.get_opt(name).await.map_err(error)? else {
            return Ok(InjectOutcome::Missing(name.to_string()));
        };
        if !mutate(&mut object) {
            return Ok(InjectOutcome::Unchanged(name.to_string()));
        }
        match api.replace(name, &PostParams::default(), &object).await {
            Ok(_) => return Ok(InjectOutcome::Updated(name.to_string())),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                last_error = Some(kube::Error::Api(status))
            }
            Err(other) => return Err(error(other)),
        }
    }
    Err(error(last_error.unwrap_or_else(|| {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("conflict", "Conflict").with_code(409),
        ))
    })))
}
