//! `koordlet plan`: the live loop's decisions, offline, from a YAML description of a node.
//!
//! Input: multi-document YAML with the Node, its Pods, its NodeSLO and a NodeMetric whose status
//! stands for the current usage (documents of other kinds are an error). Output: JSON with the
//! cgroup writes, evictions and each strategy's key numbers, from the same decision code as the
//! live loop. With a cgroup root, each write also shows the value the file holds now. With a
//! resctrl root, the class groups' schemata lines are planned from that tree too.

pub mod command;
mod offline;
mod resctrl;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use koord_api::{NodeMetric, NodeSLO};
use serde::Serialize;
use serde_json::{Value, json};

use crate::states::PodMeta;
use crate::system::{CgroupDriver, CgroupValue, CgroupVersion, Cgroups, KubeCgroupPaths};
use koordlet_core::CgroupWrite;
use koordlet_core::features::FeatureGates;
use koordlet_core::strategies::cpu_qos::CpuQosKernel;
use koordlet_core::strategies::engine::{self, EngineInput, EngineOptions, EngineState, NodeFacts};

/// Bad plan input: names the document and the field.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A document is not valid YAML or does not match its kind.
    #[error("document {index} ({kind}): {message}")]
    Document {
        /// 1-based document number.
        index: usize,
        /// The document's kind.
        kind: String,
        /// What is wrong, with the field path.
        message: String,
    },
    /// Something required is missing.
    #[error("{0}")]
    Missing(String),
}

/// What the YAML describes.
#[derive(Debug, Default)]
pub struct PlanInput {
    /// The Node.
    pub node: Option<Node>,
    /// Its pods.
    pub pods: Vec<Pod>,
    /// Its NodeSLO.
    pub node_slo: Option<NodeSLO>,
    /// Its NodeMetric (status = current usage).
    pub node_metric: Option<NodeMetric>,
}

fn typed<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
    index: usize,
    kind: &str,
) -> Result<T, PlanError> {
    serde_path_to_error::deserialize(value).map_err(|e| PlanError::Document {
        index,
        kind: kind.to_string(),
        message: format!("field `{}`: {}", e.path(), e.inner()),
    })
}

/// Parses the multi-document YAML.
pub fn parse_input(text: &str) -> Result<PlanInput, PlanError> {
    use serde::Deserialize;
    let mut input = PlanInput::default();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let index = i + 1;
        let value = serde_yaml::Value::deserialize(doc).map_err(|e| PlanError::Document {
            index,
            kind: "?".into(),
            message: e.to_string(),
        })?;
        if value.is_null() {
            continue;
        }
        let value: serde_json::Value = serde_json::to_value(&value).map_err(|e| PlanError::Document {
            index,
            kind: "?".into(),
            message: e.to_string(),
        })?;
        let kind = value
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("")
            .to_string();
        match kind.as_str() {
            "Node" => input.node = Some(typed(value, index, &kind)?),
            "Pod" => input.pods.push(typed(value, index, &kind)?),
            "NodeSLO" => input.node_slo = Some(typed(value, index, &kind)?),
            "NodeMetric" => input.node_metric = Some(typed(value, index, &kind)?),
            other => {
                return Err(PlanError::Document {
                    index,
                    kind: other.to_string(),
                    message: "field `kind`: expected Node, Pod, NodeSLO or NodeMetric".into(),
                });
            }
        }
    }
    if input.node.is_none() {
        return Err(PlanError::Missing("no Node document".into()));
    }
    Ok(input)
}

/// How `plan` renders cgroup files.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// v1 or v2 file names and values.
    pub version: CgroupVersion,
    /// The kubelet's cgroup driver.
    pub driver: CgroupDriver,
    /// A tree to read current values from.
    pub cgroups: Option<Arc<Cgroups>>,
    /// Feature gates (upstream defaults unless `--feature-gates` says otherwise).
    pub gates: FeatureGates,
    /// The collect interval the NodeMetric status is taken to be sampled at, seconds.
    pub collect_interval_seconds: f64,
}

/// One write as printed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PrintedWrite {
    /// Directory relative to the controller root.
    pub cgroup: String,
    /// File name for the chosen version.
    pub file: String,
    /// Value as it would be written.
    pub value: String,
    /// Strategy.
    pub strategy: String,
    /// The file's content now (only with `--cgroup-root`; absent if unreadable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
}

fn print_write(w: &CgroupWrite, options: &PlanOptions) -> PrintedWrite {
    let current = options.cgroups.as_ref().and_then(|c| {
        c.read_text(w.resource, &w.cgroup)
            .ok()
            .map(|t| t.trim().to_string())
    });
    let v1_value = w.value.to_string();
    let (file, value) = match options.version {
        CgroupVersion::V2 => {
            let file = w
                .resource
                .file_name(CgroupVersion::V2)
                .unwrap_or(w.file())
                .to_string();
            // Integers are converted to v2 units; CPU lists read the same in both versions.
            let value = match &w.value {
                CgroupValue::Int(_) => crate::system::resource::encode(
                    w.resource,
                    CgroupVersion::V2,
                    &w.value,
                    current.as_deref(),
                )
                .ok()
                .unwrap_or(v1_value),
                CgroupValue::Cpus(_) => v1_value,
            };
            (file, value)
        }
        CgroupVersion::V1 => (w.file().to_string(), v1_value),
    };
    PrintedWrite {
        cgroup: w.cgroup.to_string(),
        file,
        value,
        strategy: w.strategy.to_string(),
        current,
    }
}

/// Runs every decision on the input and returns the JSON document `plan` prints (resctrl
/// skipped: no tree).
pub fn plan(input: &PlanInput, options: &PlanOptions) -> Value {
    plan_with_resctrl(input, options, None)
}

/// [`plan`], with resctrl schemata planned from the tree at `resctrl_root` (real or fake).
pub fn plan_with_resctrl(input: &PlanInput, options: &PlanOptions, resctrl_root: Option<&Path>) -> Value {
    let paths = KubeCgroupPaths::new(options.driver);
    let mut rejected = Vec::new();
    let pods: Vec<PodMeta> = input
        .pods
        .iter()
        .filter_map(|p| match PodMeta::new(Arc::new(p.clone())) {
            Ok(m) => Some(m),
            Err(e) => {
                rejected.push(e.to_string());
                None
            }
        })
        .collect();
    let node = input.node.as_ref().map(NodeFacts::from_node).unwrap_or_default();
    let slo = input.node_slo.as_ref().map(|s| &s.spec);
    let interval = options.collect_interval_seconds;
    let usage = offline::usage(
        input.node_metric.as_ref(),
        &pods,
        slo.and_then(|s| s.host_applications.as_deref()).unwrap_or(&[]),
        offline::be_window_seconds(slo, interval),
        interval,
    );
    let reads = engine::cgroup_reads(
        &pods,
        &paths,
        engine::ReadScope::all(slo.and_then(|s| s.cpu_burst_strategy.as_ref())),
    );
    let mut cgroups = match &options.cgroups {
        Some(c) => crate::gather::read_cgroup_facts(c, &reads, None),
        None => offline::assumed_cgroups(&pods, &paths, &node, &reads),
    };
    // A tree says which CPU QoS files its kernel has; without one, a mainline kernel (5.15+).
    cgroups.cpu_qos_kernel = match &options.cgroups {
        Some(c) => crate::system::cpu_qos::probe_cpu_qos(c, &paths).unwrap_or_default(),
        None => CpuQosKernel {
            idle: true,
            bvt: false,
        },
    };
    let in_flight = BTreeSet::new();
    let state = EngineState::default();
    let out = engine::run(&EngineInput {
        node: &node,
        pods: &pods,
        paths: &paths,
        node_slo: slo,
        gates: &options.gates,
        usage: &usage,
        cgroups: &cgroups,
        topology: &[],
        in_flight: &in_flight,
        state: &state,
        now_seconds: 0.0,
        options: EngineOptions {
            collect_interval_seconds: interval,
            ..EngineOptions::default()
        },
    });
    let mut writes: Vec<PrintedWrite> = out.writes.iter().map(|w| print_write(w, options)).collect();
    let mut strategies = serde_json::to_value(&out.strategies).unwrap_or(Value::Null);
    let (resctrl_report, resctrl_writes) = resctrl::plan(slo, &pods, &options.gates, resctrl_root);
    writes.extend(resctrl_writes);
    if let Value::Object(map) = &mut strategies {
        map.insert("resctrl".into(), resctrl_report);
    }
    json!({
        "writes": writes,
        "evictions": out.evictions,
        "strategies": strategies,
        "rejectedPods": rejected,
    })
}
