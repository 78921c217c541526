//! What a Koordinator installation puts into a cluster before the components start: the CRDs,
//! the `koordinator-system` namespace, the `koord-*` PriorityClasses and (for demos) the seed-001
//! `slo-controller-config` ConfigMap. Shared by the playground and the scenario tests.

use std::path::{Path, PathBuf};

use koord_api::names::{
    DEFAULT_CONFIG_NAMESPACE, DEFAULT_SLO_CONFIG_NAME, KEY_COLOCATION_CONFIG, KEY_RESOURCE_THRESHOLD_CONFIG,
};
use koord_testcluster::TestCluster;
use serde_json::json;

/// The seed-001 ConfigMap: colocation on, memory eviction above 70 %.
const SEED_001_COLOCATION: &str = "{\n  \"enable\": true\n}\n";
const SEED_001_RESOURCE_THRESHOLD: &str =
    "{\n  \"clusterStrategy\": {\n    \"enable\": true,\n    \"memoryEvictThresholdPercent\": 70\n  }\n}\n";

/// Koordinator's priority classes (name, value): prod, mid, batch, free bands.
pub const PRIORITY_CLASSES: [(&str, i32); 4] = [
    ("koord-prod", 9000),
    ("koord-mid", 7000),
    ("koord-batch", 5000),
    ("koord-free", 3000),
];

/// Why the base objects could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {message}")]
pub struct SetupError {
    /// What was being installed.
    pub what: String,
    /// Why it failed.
    pub message: String,
}

fn setup_err(what: impl Into<String>) -> impl FnOnce(koord_testcluster::ClusterError) -> SetupError {
    let what = what.into();
    move |e| SetupError {
        what,
        message: e.to_string(),
    }
}

/// The repository's `charts/koordinator/crds` directory (from this crate's source location).
pub fn crds_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/koordinator/crds")
}

/// Installs the CRDs from `crds` (skipped with a log line when the directory is absent), the
/// `koordinator-system` namespace and the PriorityClasses.
pub async fn install_base(cluster: &TestCluster, crds: &Path) -> Result<(), SetupError> {
    if crds.is_dir() {
        let names = cluster
            .install_crds_from_dir(crds)
            .await
            .map_err(setup_err(format!("CRDs from {}", crds.display())))?;
        tracing::info!(count = names.len(), ?names, "CRDs installed");
    } else {
        tracing::info!(dir = %crds.display(), "no CRD directory; skipping CRD installation");
    }
    cluster
        .apply_object(json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": DEFAULT_CONFIG_NAMESPACE } }))
        .await
        .map_err(setup_err("namespace koordinator-system"))?;
    for (name, value) in PRIORITY_CLASSES {
        cluster
            .apply_object(json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": { "name": name }, "value": value,
                "description": "Koordinator priority band",
            }))
            .await
            .map_err(setup_err(format!("PriorityClass {name}")))?;
    }
    Ok(())
}

/// Applies the seed-001 `koordinator-system/slo-controller-config` (colocation on).
pub async fn apply_seed_config(cluster: &TestCluster) -> Result<(), SetupError> {
    let data: std::collections::BTreeMap<&str, &str> = [
        (KEY_COLOCATION_CONFIG, SEED_001_COLOCATION),
        (KEY_RESOURCE_THRESHOLD_CONFIG, SEED_001_RESOURCE_THRESHOLD),
    ]
    .into();
    cluster
        .apply_object(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": DEFAULT_SLO_CONFIG_NAME, "namespace": DEFAULT_CONFIG_NAMESPACE },
            "data": data,
        }))
        .await
        .map_err(setup_err("the seed-001 slo-controller-config"))?;
    Ok(())
}
