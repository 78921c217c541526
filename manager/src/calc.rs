//! `koord-manager calc`: batch resources for a set of objects, offline.
//!
//! Input: multi-document YAML (or a `kind: List`) with Nodes, Pods, NodeMetrics, optionally
//! NodeResourceTopologies (their `cpu-basic-info` decides CPU normalization; their zones get
//! NUMA-level batch resources) and the
//! `slo-controller-config` ConfigMap (built-in defaults when absent). Output: JSON, one
//! entry per Node, computed by the same [`crate::plan::plan_node_batch`] the controller runs.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use koord_api::{
    NodeMetric, config::ConfigKey, cpu_normalization::RatioDecision, names, topology::NodeResourceTopology,
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::{
    batch::{BatchOutcome, Explain, PodFacts, TopologyZones, UsageReport, ZoneOutcome, zone_entries_of},
    config_state::ConfigState,
    desired,
    plan::{NodeBatchPlan, plan_node_batch},
    snapshot::{self, FieldError},
};

/// Why `calc` could not compute; each names the document and field at fault.
#[derive(Debug, thiserror::Error)]
pub enum CalcError {
    /// A document is not YAML.
    #[error("document {document}: not valid YAML: {source}")]
    Yaml {
        /// 1-based document number.
        document: String,
        /// The parser's error (with line and column).
        source: serde_yaml::Error,
    },
    /// A document is YAML but not a valid object of its kind.
    #[error("document {document} ({kind} {name}): {field}: {reason}")]
    Object {
        /// 1-based document number (and List item).
        document: String,
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// JSON path of the bad field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A `slo-controller-config` key is broken (there is no last good value offline).
    #[error("document {document} (ConfigMap {name}): {error}")]
    Config {
        /// 1-based document number.
        document: String,
        /// The ConfigMap name.
        name: String,
        /// Every problem of the key, with key and field path.
        error: koord_api::config::KeyError,
    },
}

/// One node's result.
#[derive(Debug, Serialize, PartialEq)]
pub struct CalcNode {
    /// Node name.
    pub name: String,
    /// Batch resources are withdrawn because usage data is missing or stale.
    pub degraded: bool,
    /// Why there are no batch resources (degraded or disabled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `kubernetes.io/batch-cpu` (milli-cores) and `kubernetes.io/batch-memory` (bytes) as the
    /// Node would carry them (after third-party allocations); empty when withdrawn.
    pub resources: BTreeMap<String, String>,
    /// The formula's terms, when computed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<Explain>,
    /// `node.koordinator.sh/cpu-normalization-ratio` as the manager would write it (batch-cpu
    /// above is already multiplied by it); absent when colocation is off or no ratio can be
    /// decided.
    #[serde(rename = "cpuNormalizationRatio", skip_serializing_if = "Option::is_none")]
    pub cpu_normalization_ratio: Option<String>,
    /// Why normalization is on but no ratio could be decided.
    #[serde(rename = "cpuNormalizationProblem", skip_serializing_if = "Option::is_none")]
    pub cpu_normalization_problem: Option<String>,
    /// `kubernetes.io/mid-cpu` (milli-cores) and `mid-memory` (bytes) as the Node would carry
    /// them, or why there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mid: Option<CalcMid>,
    /// Batch entries of each NUMA zone of the node's NodeResourceTopology as the manager would
    /// write them; empty without zones, or when the node's batch resources are withdrawn (the
    /// object is then left as it is).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<CalcZone>,
    /// What the NUMA-level calculation read in a way worth saying (zones left out, pod
    /// placements that name no zone or cannot be read).
    #[serde(rename = "zoneNotes", skip_serializing_if = "Vec::is_empty")]
    pub zone_notes: Vec<String>,
}

/// One NUMA zone's batch entries.
#[derive(Debug, Serialize, PartialEq)]
pub struct CalcZone {
    /// Zone name.
    pub name: String,
    /// `kubernetes.io/batch-cpu` (milli-cores, after CPU normalization) and
    /// `kubernetes.io/batch-memory` (bytes).
    pub resources: BTreeMap<String, String>,
    /// The formula's terms (`capacity` is the zone's allocatable).
    pub explain: Explain,
}

/// One node's mid resources.
#[derive(Debug, Serialize, PartialEq)]
pub struct CalcMid {
    /// Resource name → value; empty when removed.
    pub resources: BTreeMap<String, String>,
    /// The formula with its terms, or why they are removed.
    pub explain: String,
}

/// The whole output.
#[derive(Debug, Serialize, PartialEq)]
pub struct CalcOutput {
    /// One entry per Node, sorted by name.
    pub nodes: Vec<CalcNode>,
}

struct Located<T> {
    document: String,
    object: T,
}

#[derive(Default)]
struct Inputs {
    nodes: Vec<Located<Node>>,
    pods: Vec<Located<Pod>>,
    metrics: Vec<Located<NodeMetric>>,
    topologies: Vec<Located<NodeResourceTopology>>,
    config: Option<Located<ConfigMap>>,
}

fn typed<T: DeserializeOwned>(document: &str, value: Value) -> Result<T, CalcError> {
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("").to_owned();
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>")
        .to_owned();
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        CalcError::Object {
            document: document.to_owned(),
            kind,
            name,
            field,
            reason: e.inner().to_string(),
        }
    })
}

fn collect(inputs: &mut Inputs, document: String, value: Value, config_name: &str) -> Result<(), CalcError> {
    match value.get("kind").and_then(Value::as_str) {
        Some("List")
        | Some("NodeList")
        | Some("PodList")
        | Some("NodeMetricList")
        | Some("NodeResourceTopologyList") => {
            let items = value
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for (index, item) in items.into_iter().enumerate() {
                collect(
                    inputs,
                    format!("{document} item {}", index + 1),
                    item,
                    config_name,
                )?;
            }
        }
        Some("Node") => inputs.nodes.push(Located {
            object: typed(&document, value)?,
            document,
        }),
        Some("Pod") => inputs.pods.push(Located {
            object: typed(&document, value)?,
            document,
        }),
        Some("NodeMetric") => {
            let mut value = value;
            // `kubectl get` omits an empty spec; the type needs one.
            if let Some(object) = value.as_object_mut() {
                object
                    .entry("spec")
                    .or_insert_with(|| Value::Object(Default::default()));
            }
            inputs.metrics.push(Located {
                object: typed(&document, value)?,
                document,
            });
        }
        Some("NodeResourceTopology") => inputs.topologies.push(Located {
            object: typed(&document, value)?,
            document,
        }),
        Some("ConfigMap") if value.pointer("/metadata/name").and_then(Value::as_str) == Some(config_name) => {
            inputs.config = Some(Located {
                object: typed(&document, value)?,
                document,
            });
        }
        // Other kinds (and other ConfigMaps) do not take part in the calculation.
        Some(_) => {}
        None if value.is_null() => {}
        None => {
            return Err(CalcError::Object {
                document,
                kind: String::new(),
                name: String::new(),
                field: "kind".to_owned(),
                reason: "missing: every document needs a kind (Node, Pod, NodeMetric, NodeResourceTopology, ConfigMap or List)"
                    .to_owned(),
            });
        }
    }
    Ok(())
}

fn field_error<T: kube::Resource>(located: &Located<T>, kind: &str, error: FieldError) -> CalcError {
    CalcError::Object {
        document: located.document.clone(),
        kind: kind.to_owned(),
        name: located.object.meta().name.clone().unwrap_or_default(),
        field: error.field,
        reason: error.reason,
    }
}

/// Parses `input` and computes every node's batch resources at `now`.
pub fn calc(input: &str, now: Timestamp) -> Result<CalcOutput, CalcError> {
    let mut inputs = Inputs::default();
    for (index, document) in serde_yaml::Deserializer::from_str(input).enumerate() {
        let number = (index + 1).to_string();
        let value = Value::deserialize(document).map_err(|source| CalcError::Yaml {
            document: number.clone(),
            source,
        })?;
        collect(&mut inputs, number, value, names::DEFAULT_SLO_CONFIG_NAME)?;
    }

    let mut state = ConfigState::new();
    let data = inputs
        .config
        .as_ref()
        .map(|c| c.object.data.clone().unwrap_or_default());
    let change = state.apply(data.as_ref());
    if let (Some(error), Some(config)) = (change.errors.into_iter().next(), inputs.config.as_ref()) {
        return Err(CalcError::Config {
            document: config.document.clone(),
            name: config.object.metadata.name.clone().unwrap_or_default(),
            error,
        });
    }
    debug_assert!(state.is_known(ConfigKey::Colocation));

    let mut pods_by_node: HashMap<String, Vec<PodFacts>> = HashMap::new();
    for pod in &inputs.pods {
        let Some(node) = pod.object.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let facts = snapshot::pod_facts(&pod.object).map_err(|e| field_error(pod, "Pod", e))?;
        pods_by_node.entry(node).or_default().push(facts);
    }
    let mut reports: HashMap<String, UsageReport> = HashMap::new();
    for metric in &inputs.metrics {
        let report =
            snapshot::usage_report(&metric.object).map_err(|e| field_error(metric, "NodeMetric", e))?;
        reports.insert(metric.object.metadata.name.clone().unwrap_or_default(), report);
    }

    // Each node's NodeResourceTopology (the first document of a name counts).
    let mut topologies: HashMap<&str, (Option<&str>, TopologyZones)> = HashMap::new();
    for topology in &inputs.topologies {
        if let Some(name) = topology.object.metadata.name.as_deref() {
            topologies.entry(name).or_insert_with(|| {
                (
                    topology.object.annotation(names::ANNOTATION_CPU_BASIC_INFO),
                    zone_entries_of(&topology.object.zones),
                )
            });
        }
    }

    let mut nodes = Vec::new();
    for node in &inputs.nodes {
        let name = node.object.metadata.name.clone().unwrap_or_default();
        let effective = desired::effective(&state, &node.object);
        let pods = pods_by_node.get(&name).map(Vec::as_slice).unwrap_or(&[]);
        let topology = topologies.get(name.as_str());
        let plan = plan_node_batch(
            &state,
            &effective,
            &node.object,
            pods,
            reports.get(&name),
            topology.and_then(|t| t.0),
            topology.map(|t| &t.1),
            now,
        )
        .map_err(|e| field_error(node, "Node", e))?;
        nodes.push(calc_node(name, plan));
    }
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(CalcOutput { nodes })
}

fn calc_node(name: String, plan: NodeBatchPlan) -> CalcNode {
    let mut out = CalcNode {
        name,
        degraded: false,
        reason: None,
        resources: BTreeMap::new(),
        explain: None,
        cpu_normalization_ratio: None,
        cpu_normalization_problem: None,
        mid: None,
        zones: Vec::new(),
        zone_notes: Vec::new(),
    };
    let NodeBatchPlan::Decided {
        outcome,
        status,
        normalization,
        mid,
        zones,
        ..
    } = plan
    else {
        return out;
    };
    if let ZoneOutcome::Allocatable {
        zones: results,
        notes,
    } = zones.outcome
    {
        out.zones = results
            .into_iter()
            .map(|zone| {
                let target = zones.targets.get(&zone.name).copied().unwrap_or_default();
                CalcZone {
                    resources: [
                        (names::RESOURCE_BATCH_CPU.to_owned(), target.cpu.to_string()),
                        (names::RESOURCE_BATCH_MEMORY.to_owned(), target.memory.to_string()),
                    ]
                    .into(),
                    name: zone.name,
                    explain: zone.explain,
                }
            })
            .collect();
        out.zone_notes = notes;
    }
    out.zone_notes
        .extend(zones.skipped.iter().map(|skipped| format!("{skipped}: left out")));
    out.mid = Some(CalcMid {
        resources: mid
            .amounts()
            .map(|a| {
                [
                    (names::RESOURCE_MID_CPU.to_owned(), a.cpu.to_string()),
                    (names::RESOURCE_MID_MEMORY.to_owned(), a.memory.to_string()),
                ]
                .into()
            })
            .unwrap_or_default(),
        explain: mid.to_string(),
    });
    if let Some(n) = normalization {
        out.cpu_normalization_ratio = Some(n.applied.to_string());
        if let RatioDecision::Unknown(problem) = &n.decision {
            out.cpu_normalization_problem = Some(problem.to_string());
        }
    }
    match *outcome {
        BatchOutcome::Disabled => out.reason = Some("colocation is disabled for this node".to_owned()),
        BatchOutcome::Degraded(reason) => {
            out.degraded = true;
            out.reason = Some(reason.to_string());
        }
        BatchOutcome::Allocatable { explain, .. } => {
            if let Some(published) = status.published {
                out.resources
                    .insert(names::RESOURCE_BATCH_CPU.to_owned(), published.cpu.to_string());
                out.resources.insert(
                    names::RESOURCE_BATCH_MEMORY.to_owned(),
                    published.memory.to_string(),
                );
            }
            out.explain = Some(*explain);
        }
    }
    out
}
