//! The node's NodeResourceTopology (gate `NodeTopologyReport`): koordlet keeps the annotation
//! `node.koordinator.sh/cpu-basic-info` equal to the CPU facts it detects, which koord-manager
//! turns into the node's CPU normalization ratio.
//!
//! Every round (`--node-topology-report-interval`) detects the facts again (a few small files)
//! and reads the object: absent, it is created with `topologyPolicies: ["None"]` and no zones;
//! then, absent or holding another value, the annotation is applied (server-side apply, field
//! manager `koordlet`, the annotation alone), so other writers' annotations and policies stay
//! theirs. The NUMA zones (one per NUMA node, cpu and memory; see [`super::topology_zones`])
//! are written when they differ, by an update that keeps every entry koordlet does not own.
//! Nothing else upstream puts on the object (`cpu-topology`, `cpu-shared-pools`, the kubelet
//! CPU manager policy) is reported.
//!
//! [`plan`] decides (pure); [`sync`] talks to the API server; [`run`] is the task with its
//! retry pacing ([`next_delay`]) and one warning per failure streak ([`FailureStreak`]).

use std::collections::BTreeMap;
use std::time::Duration;

use koord_api::cpu_normalization::CpuBasicInfo;
use koord_api::names::ANNOTATION_CPU_BASIC_INFO;
use koord_api::topology::NodeResourceTopology;
use koord_runtime::{ApplyConflict, Edit, Endpoint};
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::{Api, Client, Resource};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tracing::{info, warn};

use super::FIELD_MANAGER;
use super::topology_zones::{self, ReportedZone, reported_zones};
use crate::system::SystemRoots;
use crate::system::cpu_info::read_cpu_basic_info;
use crate::system::numa::read_numa_nodes;

/// The CRD's name, as a warning names it when it is not installed.
pub const CRD_NAME: &str = "noderesourcetopologies.topology.node.k8s.io";

/// The longest wait between two attempts, whatever the interval.
const MAX_RETRY: Duration = Duration::from_secs(300);

/// What a round does to the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologyAction {
    /// The object does not exist: create it, then apply the annotation.
    Create,
    /// The annotation is missing or holds another value: apply it.
    Patch,
    /// The annotation already holds the value.
    Nothing,
}

/// Decides what a round does, from the object as read (`None`: absent) and the annotation
/// value the detected facts give.
pub fn plan(existing: Option<&NodeResourceTopology>, value: &str) -> TopologyAction {
    match existing {
        None => TopologyAction::Create,
        Some(nrt) if nrt.annotation(ANNOTATION_CPU_BASIC_INFO) == Some(value) => TopologyAction::Nothing,
        Some(_) => TopologyAction::Patch,
    }
}

/// What a successful round did (the `result` label of the metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncOutcome {
    /// The object was created.
    Created,
    /// The annotation was applied.
    Updated,
    /// Nothing to do.
    Unchanged,
}

impl SyncOutcome {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            SyncOutcome::Created => "created",
            SyncOutcome::Updated => "updated",
            SyncOutcome::Unchanged => "unchanged",
        }
    }
}

/// Why a round did not land.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The CPU facts could not be detected.
    #[error("detecting the CPU facts: {0}")]
    Detect(#[from] crate::system::SystemError),
    /// The API server does not serve NodeResourceTopology (the CRD is not installed).
    #[error("the CRD {CRD_NAME} is not installed: no NodeResourceTopology can be written")]
    CrdMissing,
    /// Any other API error.
    #[error("NodeResourceTopology {name}: {source}")]
    Api {
        /// The object (the node's name).
        name: String,
        /// The error.
        source: kube::Error,
    },
}

impl TopologyError {
    /// The metric label and the kind of a failure streak.
    pub fn label(&self) -> &'static str {
        match self {
            TopologyError::Detect(_) => "detect_error",
            TopologyError::CrdMissing => "crd_missing",
            TopologyError::Api { .. } => "error",
        }
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// What a successful [`sync`] did, and the conflict its apply met (fields another manager had
/// changed, taken back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synced {
    /// Created, updated or unchanged.
    pub outcome: SyncOutcome,
    /// The conflict, for the caller to count.
    pub conflict: Option<ApplyConflict>,
}

impl From<SyncOutcome> for Synced {
    fn from(outcome: SyncOutcome) -> Self {
        Synced {
            outcome,
            conflict: None,
        }
    }
}

/// Brings the node's NodeResourceTopology in line with `info` and `zones`: creates it when
/// absent, applies the one annotation when it differs, writes the zones when they differ
/// ([`topology_zones`]), else does nothing. No zones (no NUMA information) leaves the object's
/// zones as they are.
pub async fn sync(
    client: &Client,
    node: &str,
    info: &CpuBasicInfo,
    zones: &[ReportedZone],
) -> Result<Synced, TopologyError> {
    let api_err = |source| TopologyError::Api {
        name: node.to_owned(),
        source,
    };
    let api: Api<NodeResourceTopology> = Api::all(client.clone());
    let value = info.to_annotation();
    // A missing CRD answers 404 here too, which get_opt reads as "no object": create tells.
    let existing = api.get_opt(node).await.map_err(api_err)?;
    let outcome = match plan(existing.as_ref(), &value) {
        TopologyAction::Nothing => SyncOutcome::Unchanged,
        TopologyAction::Patch => SyncOutcome::Updated,
        TopologyAction::Create => match create(&api, node).await {
            Ok(()) => SyncOutcome::Created,
            Err(e) if is_not_found(&e) => return Err(TopologyError::CrdMissing),
            // Someone created it between the read and the create: apply to theirs.
            Err(e) if is_conflict(&e) => SyncOutcome::Updated,
            Err(e) => return Err(api_err(e)),
        },
    };
    let conflict = match outcome {
        SyncOutcome::Unchanged => None,
        SyncOutcome::Created | SyncOutcome::Updated => {
            apply_annotation(&api, node, &value).await.map_err(api_err)?
        }
    };
    // The object as read already has the zones: nothing to read again or write.
    let existing_zones = existing.as_ref().map(|nrt| nrt.zones.as_slice()).unwrap_or(&[]);
    let zones_due = existing.is_none() || topology_zones::merge_zones(existing_zones, zones).is_some();
    let zones_written = zones_due && write_zones(client, node, zones).await.map_err(api_err)?;
    let outcome = match outcome {
        SyncOutcome::Unchanged if zones_written => SyncOutcome::Updated,
        other => other,
    };
    Ok(Synced { outcome, conflict })
}

/// Reads and updates before giving up on an object that keeps changing under us.
const ZONE_WRITE_ATTEMPTS: usize = 5;

/// Writes the reported zones with the `resourceVersion` read (a 409 Conflict reads again), the
/// object kept as untyped JSON so that every field koordlet does not own goes back as read.
/// Returns whether it wrote.
async fn write_zones(client: &Client, node: &str, zones: &[ReportedZone]) -> Result<bool, kube::Error> {
    if zones.is_empty() {
        return Ok(false);
    }
    let resource = ApiResource::erase::<NodeResourceTopology>(&());
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let written =
        koord_runtime::read_modify_replace(&api, node, FIELD_MANAGER, ZONE_WRITE_ATTEMPTS, |object| {
            let existing = match object.data.get("zones") {
                Some(serde_json::Value::Array(existing)) => existing.as_slice(),
                _ => &[],
            };
            let Some(merged) = topology_zones::merge_zones(existing, zones) else {
                return Edit::Keep(false);
            };
            match object.data.as_object_mut() {
                Some(data) => {
                    data.insert("zones".to_owned(), serde_json::Value::Array(merged));
                    Edit::Replace(true)
                }
                None => Edit::Keep(false),
            }
        })
        .await?;
    Ok(written.unwrap_or(false))
}

/// Applies the annotation, koordlet's only field on the object.
async fn apply_annotation(
    api: &Api<NodeResourceTopology>,
    node: &str,
    value: &str,
) -> Result<Option<ApplyConflict>, kube::Error> {
    let body = serde_json::json!({
        "apiVersion": NodeResourceTopology::api_version(&()),
        "kind": NodeResourceTopology::kind(&()),
        "metadata": { "name": node, "annotations": { ANNOTATION_CPU_BASIC_INFO: value } },
    });
    let owned: [&[&str]; 1] = [&["metadata", "annotations", ANNOTATION_CPU_BASIC_INFO]];
    let applied = koord_runtime::apply(api, FIELD_MANAGER, Endpoint::Main, node, &body, &owned).await?;
    Ok(applied.conflict)
}

/// Creates the object, without the annotation: the create's fields (the policies) belong to an
/// Update entry, the annotation to the apply that follows, so a later change of the annotation
/// meets no conflict with koordlet's own create.
async fn create(api: &Api<NodeResourceTopology>, node: &str) -> Result<(), kube::Error> {
    let nrt = NodeResourceTopology::for_node(node, BTreeMap::new());
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    api.create(&params, &nrt).await.map(|_| ())
}

/// The wait before the next round after `failures` failed rounds in a row (0: the last round
/// succeeded) of the kind `last`: the interval after a success; a missing CRD is retried every
/// five intervals; other failures back off from one second, doubling, up to the interval. Never
/// more than five minutes, never less than the interval allows.
pub fn next_delay(interval: Duration, failures: u32, last: Option<&str>) -> Duration {
    let delay = match (failures, last) {
        (0, _) => interval,
        (_, Some("crd_missing")) => interval.saturating_mul(5),
        (n, _) => Duration::from_secs(1u64 << (n - 1).min(16)).min(interval),
    };
    delay.min(MAX_RETRY.max(interval))
}

/// Logs a failure streak once: a warning when failures start or change kind, one line when
/// the rounds succeed again.
#[derive(Debug, Default)]
pub struct FailureStreak {
    kind: Option<&'static str>,
    failures: u32,
}

impl FailureStreak {
    /// Records a failure; true when it should be logged (first of its streak).
    pub fn fail(&mut self, kind: &'static str) -> bool {
        self.failures = self.failures.saturating_add(1);
        let new = self.kind != Some(kind);
        self.kind = Some(kind);
        new
    }

    /// Records a success; the number of failures it ends (0: there was no streak).
    pub fn succeed(&mut self) -> u32 {
        self.kind = None;
        std::mem::take(&mut self.failures)
    }

    /// Failed rounds in a row.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The kind of the current streak.
    pub fn kind(&self) -> Option<&'static str> {
        self.kind
    }
}

/// The counters [`run`] keeps.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// Rounds by `result`.
    pub rounds: Family<Vec<(String, String)>, Counter>,
    /// Applies that met a field manager conflict, by `resource`.
    pub apply_conflicts: Family<Vec<(String, String)>, Counter>,
}

/// Keeps the node's NodeResourceTopology annotation current, every `interval` (sooner after an
/// API error, later while the CRD is missing). Counts each round by result, and conflicts.
/// Runs until aborted; never fails.
pub async fn run(client: Client, node: String, roots: SystemRoots, interval: Duration, counters: Counters) {
    let mut streak = FailureStreak::default();
    let mut numa_unreadable = false;
    loop {
        // Zones are reported when sysfs describes the NUMA nodes; an unreadable description
        // leaves the object's zones as they are (one warning until it reads again).
        let zones = match read_numa_nodes(&roots) {
            Ok(nodes) => {
                numa_unreadable = false;
                reported_zones(&nodes)
            }
            Err(error) => {
                if !std::mem::replace(&mut numa_unreadable, true) {
                    warn!(node, %error, "NUMA nodes unreadable: NodeResourceTopology zones are not reported until they read again");
                }
                Vec::new()
            }
        };
        let result = match read_cpu_basic_info(&roots) {
            Ok(info) => sync(&client, &node, &info, &zones).await.map(|o| (o, info)),
            Err(e) => Err(TopologyError::Detect(e)),
        };
        let label = match &result {
            Ok((Synced { outcome, conflict }, info)) => {
                if conflict.is_some() {
                    counters
                        .apply_conflicts
                        .get_or_create(&vec![(
                            "resource".to_owned(),
                            "noderesourcetopologies".to_owned(),
                        )])
                        .inc();
                }
                let ended = streak.succeed();
                if ended > 0 {
                    info!(node, failures = ended, "NodeResourceTopology report works again");
                }
                if *outcome != SyncOutcome::Unchanged {
                    info!(node, result = outcome.label(), cpu_basic_info = %info.to_annotation(),
                          zones = zones.len(), "NodeResourceTopology written");
                }
                outcome.label()
            }
            Err(e) => {
                let label = e.label();
                if streak.fail(label) {
                    match e {
                        TopologyError::CrdMissing => warn!(
                            node,
                            crd = CRD_NAME,
                            "NodeResourceTopology CRD not installed: cpu-basic-info is not reported (CPU normalization cannot see this node); retrying slowly"
                        ),
                        e => {
                            warn!(node, error = %e, "NodeResourceTopology report failed; retrying (logged once until it works)")
                        }
                    }
                }
                label
            }
        };
        counters
            .rounds
            .get_or_create(&vec![("result".to_owned(), label.to_owned())])
            .inc();
        tokio::time::sleep(next_delay(interval, streak.failures(), streak.kind())).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn nrt(annotations: &[(&str, &str)]) -> NodeResourceTopology {
        NodeResourceTopology::for_node(
            "n",
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn plan_creates_patches_or_leaves_alone() {
        let value = r#"{"cpuModel":"X","hyperThreadEnabled":true,"turboEnabled":false}"#;
        assert_eq!(plan(None, value), TopologyAction::Create);
        assert_eq!(plan(Some(&nrt(&[])), value), TopologyAction::Patch);
        let other = nrt(&[("other", "1"), (ANNOTATION_CPU_BASIC_INFO, "{}")]);
        assert_eq!(plan(Some(&other), value), TopologyAction::Patch);
        let same = nrt(&[("other", "1"), (ANNOTATION_CPU_BASIC_INFO, value)]);
        assert_eq!(plan(Some(&same), value), TopologyAction::Nothing);
        let mut bare = nrt(&[]);
        bare.metadata.annotations = None;
        assert_eq!(plan(Some(&bare), value), TopologyAction::Patch);
    }

    #[test]
    fn retry_pacing() {
        let minute = Duration::from_secs(60);
        assert_eq!(next_delay(minute, 0, None), minute);
        assert_eq!(next_delay(minute, 1, Some("error")), Duration::from_secs(1));
        assert_eq!(next_delay(minute, 3, Some("error")), Duration::from_secs(4));
        assert_eq!(next_delay(minute, 30, Some("error")), minute);
        assert_eq!(
            next_delay(minute, 1, Some("crd_missing")),
            Duration::from_secs(300)
        );
        assert_eq!(
            next_delay(Duration::from_secs(1), 4, Some("crd_missing")),
            Duration::from_secs(5)
        );
        // An interval beyond the cap is still honoured.
        let hour = Duration::from_secs(3600);
        assert_eq!(next_delay(hour, 0, None), hour);
        assert_eq!(next_delay(hour, 2, Some("crd_missing")), hour);
        assert_eq!(
            next_delay(hour, 100, Some("error")),
            Duration::from_secs(1 << 16).min(hour)
        );
    }

    #[test]
    fn one_warning_per_streak() {
        let mut s = FailureStreak::default();
        assert_eq!(s.succeed(), 0);
        assert!(s.fail("error"));
        assert!(!s.fail("error"));
        assert!(!s.fail("error"));
        assert!(s.fail("crd_missing"), "a new kind of failure is worth a line");
        assert_eq!(s.failures(), 4);
        assert_eq!(s.kind(), Some("crd_missing"));
        assert_eq!(s.succeed(), 4);
        assert_eq!((s.failures(), s.kind()), (0, None));
        assert!(s.fail("error"), "a new streak warns again");
    }
}
