//! The documents the story applies: the seed examples verbatim (the slo-controller-config of
//! the v0.2.0 release notes, the pod-level CPU burst strategies, the ClusterColocationProfile
//! and a namespace it selects), then the two settings a live demo needs on top.
//!
//! Everything goes through the API server with the kube client, so the validating webhook
//! checks the ConfigMap as it would on a real cluster.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use koord_api::ClusterColocationProfile;
use koord_api::names::{
    DEFAULT_CONFIG_NAMESPACE, DEFAULT_SLO_CONFIG_NAME, KEY_COLOCATION_CONFIG, KEY_RESOURCE_THRESHOLD_CONFIG,
};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::StoryError;

/// Seed 001: colocation on, memory eviction above 70 %.
pub const SLO_CONTROLLER_CONFIG: &str = include_str!("seeds/seed-001-slo-controller-config.yaml");
/// Seed 000: CPU burst strategies, among them one for the `payment` app in `frontend`.
pub const CPU_BURST_CONFIG: &str = include_str!("seeds/seed-000-cpu-burst-config.yaml");
/// Seed 001: the ClusterColocationProfile that makes Spark pods BE with batch priority.
pub const COLOCATION_PROFILE: &str = include_str!("seeds/seed-001-clustercolocationprofile.yaml");
/// The namespace the profile selects (`koordinator.sh/enable-colocation: "true"`).
pub const COLOCATION_NAMESPACE: &str = include_str!("seeds/colocation-namespace.yaml");

/// The namespace of the LS `payment` app, which seed 000's pod strategy names.
pub const LS_NAMESPACE: &str = "frontend";
/// How often koordlet reports in the story: its shortest interval (the default minute is long
/// for a demo). Batch resources also move on pod and Node events in between.
pub const REPORT_INTERVAL_SECONDS: u64 = 30;
/// The settings the story adds to the seeds, key by key, with why.
pub fn story_overlay() -> Vec<(&'static str, String, &'static str)> {
    vec![
        (
            KEY_COLOCATION_CONFIG,
            format!("{{\"enable\": true, \"metricReportIntervalSeconds\": {REPORT_INTERVAL_SECONDS}}}"),
            "koordlet reports every 30 s (its shortest interval) instead of every minute",
        ),
        (
            KEY_RESOURCE_THRESHOLD_CONFIG,
            "{\"clusterStrategy\": {\"enable\": true, \"memoryEvictThresholdPercent\": 70, \"cpuSuppressPolicy\": \"cfsQuota\"}}"
                .to_string(),
            "BE CPU is suppressed by CFS quota (the default, cpuset, cannot go below one of this host's few CPUs)",
        ),
    ]
}

fn parse<T: DeserializeOwned>(what: &'static str, text: &str) -> Result<T, StoryError> {
    serde_yaml::from_str(text).map_err(|source| StoryError::Seed { what, source })
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> StoryError {
    let what = what.into();
    move |source| StoryError::Api { what, source }
}

/// Applies the seed documents verbatim; returns one log line per document.
pub async fn apply_seeds(client: &kube::Client) -> Result<Vec<String>, StoryError> {
    let mut applied = Vec::new();
    let config: ConfigMap = parse("seed-001 slo-controller-config", SLO_CONTROLLER_CONFIG)?;
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), DEFAULT_CONFIG_NAMESPACE);
    let exists = configs
        .get_opt(DEFAULT_SLO_CONFIG_NAME)
        .await
        .map_err(api_err("slo-controller-config"))?
        .is_some();
    let applied_config = if exists {
        configs
            .patch(
                DEFAULT_SLO_CONFIG_NAME,
                &PatchParams::default(),
                &Patch::Merge(&config),
            )
            .await
    } else {
        configs.create(&PostParams::default(), &config).await
    };
    applied_config.map_err(api_err("seed-001 slo-controller-config"))?;
    applied
        .push("seed 001 slo-controller-config applied: colocation on, memory eviction at 70 %".to_string());
    // Seed 000 is a ConfigMap with one key: applied as the patch its documentation uses.
    let burst: ConfigMap = parse("seed-000 cpu-burst-config", CPU_BURST_CONFIG)?;
    configs
        .patch(
            DEFAULT_SLO_CONFIG_NAME,
            &PatchParams::default(),
            &Patch::Merge(&burst),
        )
        .await
        .map_err(api_err("seed-000 cpu-burst-config"))?;
    applied.push("seed 000 cpu-burst-config applied: payment pods in frontend get CPU burst".to_string());

    let namespace: Namespace = parse("colocation namespace", COLOCATION_NAMESPACE)?;
    let name = namespace.metadata.name.clone().unwrap_or_default();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces
        .get_opt(&name)
        .await
        .map_err(api_err("namespace"))?
        .is_none()
    {
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .map_err(api_err(format!("namespace {name}")))?;
    }
    let ls: Namespace =
        serde_json::from_value(json!({"metadata": {"name": LS_NAMESPACE}})).map_err(|source| {
            StoryError::Object {
                what: "namespace",
                source,
            }
        })?;
    if namespaces
        .get_opt(LS_NAMESPACE)
        .await
        .map_err(api_err("namespace"))?
        .is_none()
    {
        namespaces
            .create(&PostParams::default(), &ls)
            .await
            .map_err(api_err(format!("namespace {LS_NAMESPACE}")))?;
    }
    applied.push(format!(
        "namespace {name} (koordinator.sh/enable-colocation=true) and {LS_NAMESPACE} created"
    ));

    let profile: ClusterColocationProfile = parse("seed-001 ClusterColocationProfile", COLOCATION_PROFILE)?;
    let profile_name = profile.metadata.name.clone().unwrap_or_default();
    let profiles: Api<ClusterColocationProfile> = Api::all(client.clone());
    if profiles
        .get_opt(&profile_name)
        .await
        .map_err(api_err("profile"))?
        .is_none()
    {
        profiles
            .create(&PostParams::default(), &profile)
            .await
            .map_err(api_err(format!("ClusterColocationProfile {profile_name}")))?;
    }
    applied.push(format!(
        "seed 001 ClusterColocationProfile {profile_name} applied: Spark pods in {name} become BE on batch resources"
    ));
    Ok(applied)
}

/// Applies [`story_overlay`]; returns one log line per key.
pub async fn apply_overlay(client: &kube::Client) -> Result<Vec<String>, StoryError> {
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), DEFAULT_CONFIG_NAMESPACE);
    let mut applied = Vec::new();
    for (key, value, why) in story_overlay() {
        configs
            .patch(
                DEFAULT_SLO_CONFIG_NAME,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {key: value}})),
            )
            .await
            .map_err(api_err(format!("slo-controller-config {key}")))?;
        applied.push(format!("story setting {key}: {why}"));
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_parse_as_their_kinds() {
        let config: ConfigMap = parse("c", SLO_CONTROLLER_CONFIG).unwrap_or_default();
        assert!(
            config
                .data
                .is_some_and(|d| d.contains_key(KEY_RESOURCE_THRESHOLD_CONFIG))
        );
        let profile: Result<ClusterColocationProfile, _> = parse("p", COLOCATION_PROFILE);
        assert!(profile.is_ok_and(|p| p.spec.qos_class.is_some()));
        let ns: Result<Namespace, _> = parse("n", COLOCATION_NAMESPACE);
        assert!(ns.is_ok());
    }
}
