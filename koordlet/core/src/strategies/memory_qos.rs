//! Memory QoS (gate CgroupReconcile, `resourceQOSStrategy.<class>.memoryQOS`): protect LS
//! memory from reclaim and throttle a container before its limit, with the mainline cgroup v2
//! files `memory.min`, `memory.low` and `memory.high` (upstream's formulas).
//!
//! Per running pod, the class config (LSE uses LSR's, LS, BE, SYSTEM), unless the pod's
//! `koordinator.sh/memoryQOS` annotation says `{"policy":"none"}` or `"auto"` (both: no
//! protection, as upstream's recommendation for these files is 0):
//! - request `req` = the memory request (BE pods: `kubernetes.io/batch-memory`);
//! - `memory.min = req × minLimitPercent / 100`, `memory.low = req × lowLimitPercent / 100`,
//!   low raised to min when `0 < low < min`; at pod and container level; both rounded down to
//!   whole pages as the kernel stores them;
//! - container `memory.high = floor((req + (limit − req) × throttlingPercent / 100) / 4096) × 4096`
//!   with `limit` the container's memory limit (the node's allocatable memory when unlimited),
//!   `max` when throttlingPercent is 0, and never below `memory.min`;
//! - the kubepods QoS directories get the sum of their pods' min and low (the kernel caps a
//!   child's protection by its parent's), and `kubepods` the sum of all pods.
//!
//! A class whose `memoryQOS.enable` is not true gets min 0, low 0, high max, as upstream
//! resets a disabled class. On cgroup v1 the files exist only on Anolis kernels: elsewhere the
//! strategy skips with a reason instead of writing files the kernel does not have.

use koord_api::nodeslo::{MemoryQosCfg, ResourceQosStrategy};
use koord_api::resources::container_amounts;
use koord_api::{KubeQoSClass, QoSClass, names};
use serde::Serialize;

use super::{CgroupWrite, clamp_percent};
use crate::pod::PodMeta;
use crate::resource::CgroupResource;
use crate::{CgroupDir, KubeCgroupPaths};

/// Strategy name in plans and audit lines.
pub const STRATEGY: &str = "memory_qos";
/// The gate it runs under (upstream's gate for memory QoS reconciliation).
pub const GATE: &str = "CgroupReconcile";
/// The memory files are kept in pages: values are rounded down to whole pages.
pub const PAGE_SIZE: i64 = 4096;

/// Whether this node's kernel has the memory QoS files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum MemoryQosKernel {
    /// Not known or absent (cgroup v1 without the Anolis extras).
    #[default]
    Absent,
    /// cgroup v2: `memory.min`, `memory.low`, `memory.high`.
    CgroupV2,
    /// cgroup v1 with the Anolis kernel's `memory.min`/`low`/`high`.
    AnolisV1,
}

/// Everything memory QoS looks at.
#[derive(Debug, Clone)]
pub struct MemoryQosInput<'a> {
    /// `resourceQOSStrategy` of the NodeSLO.
    pub strategy: &'a ResourceQosStrategy,
    /// The node's pods (finished ones are left out).
    pub pods: &'a [PodMeta],
    /// Where the kubelet puts pod cgroups.
    pub paths: &'a KubeCgroupPaths,
    /// Allocatable memory of the node, bytes: the limit of a container without one.
    pub allocatable_memory_bytes: i64,
}

/// Protection of one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerMemoryQos {
    /// Container name.
    pub name: String,
    /// `memory.min`, bytes.
    pub min: i64,
    /// `memory.low`, bytes.
    pub low: i64,
    /// `memory.high`, bytes, -1 for `max`.
    pub high: i64,
}

/// Protection of one pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodMemoryQos {
    /// `namespace/name`.
    pub pod: String,
    /// Where its config came from: `class LS`, `class LS (disabled)`, `annotation none`.
    pub source: String,
    /// Memory request the percentages apply to, bytes.
    pub request_bytes: i64,
    /// Pod `memory.min`, bytes.
    pub min: i64,
    /// Pod `memory.low`, bytes.
    pub low: i64,
    /// Per container (those with a known ID).
    pub containers: Vec<ContainerMemoryQos>,
}

/// The decision (the `strategies.memory_qos` object of `koordlet plan`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryQosPlan {
    /// Per pod.
    pub pods: Vec<PodMemoryQos>,
    /// Writes, QoS directories first, then pods and their containers.
    #[serde(skip)]
    pub writes: Vec<CgroupWrite>,
}

/// The memory QoS parameters of one pod after the annotation and the class, percents clamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Params {
    min_percent: i64,
    low_percent: i64,
    throttling_percent: i64,
}

const NONE: Params = Params {
    min_percent: 0,
    low_percent: 0,
    throttling_percent: 0,
};

fn class_cfg(strategy: &ResourceQosStrategy, qos: QoSClass) -> (&'static str, Option<&MemoryQosCfg>) {
    let (name, class) = match qos {
        QoSClass::Lse | QoSClass::Lsr => ("LSR", strategy.lsr_class.as_ref()),
        QoSClass::Ls | QoSClass::None => ("LS", strategy.ls_class.as_ref()),
        QoSClass::Be => ("BE", strategy.be_class.as_ref()),
        QoSClass::System => ("SYSTEM", strategy.system_class.as_ref()),
    };
    (name, class.and_then(|c| c.memory_qos.as_ref()))
}

/// The pod's parameters and where they came from.
fn params(strategy: &ResourceQosStrategy, pod: &PodMeta) -> (Params, String) {
    let policy = pod
        .pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::ANNOTATION_MEMORY_QOS))
        .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
        .and_then(|v| v.get("policy").and_then(|p| p.as_str()).map(str::to_owned));
    if let Some(p @ ("none" | "auto")) = policy.as_deref() {
        return (NONE, format!("annotation {p}"));
    }
    let (name, cfg) = class_cfg(strategy, pod.qos);
    match cfg.filter(|c| c.enable == Some(true)) {
        Some(c) => (
            Params {
                min_percent: clamp_percent(c.min_limit_percent.unwrap_or(0)),
                low_percent: clamp_percent(c.low_limit_percent.unwrap_or(0)),
                throttling_percent: clamp_percent(c.throttling_percent.unwrap_or(0)),
            },
            format!("class {name}"),
        ),
        None => (NONE, format!("class {name} (disabled)")),
    }
}

/// `(min, low)` for a request: `req × percent / 100` in whole pages (the kernel keeps these
/// files in pages and reads back the value rounded down; an unrounded value would never read
/// back equal and be rewritten every round), low raised to min when `0 < low < min`.
pub fn min_low(request: i64, min_percent: i64, low_percent: i64) -> (i64, i64) {
    let request = i128::from(request.max(0));
    let page = i128::from(PAGE_SIZE);
    let part = |p: i64| (request * i128::from(clamp_percent(p)) / 100 / page * page) as i64;
    let min = part(min_percent);
    let mut low = part(low_percent);
    if low > 0 && low < min {
        low = min;
    }
    (min, low)
}

/// Container `memory.high`: `req + (limit − req) × throttling%`, whole pages, at least `min`;
/// -1 (`max`) when throttling is 0 or the limit is unknown.
pub fn high(request: i64, limit: i64, throttling_percent: i64, min: i64) -> i64 {
    let throttling = clamp_percent(throttling_percent);
    if throttling == 0 || limit <= 0 {
        return -1;
    }
    let request = i128::from(request.max(0).min(limit));
    let limit = i128::from(limit);
    let raw = request + (limit - request) * i128::from(throttling) / 100;
    let paged = (raw / i128::from(PAGE_SIZE) * i128::from(PAGE_SIZE)) as i64;
    paged.max(min)
}

/// Memory request and limit of a container, bytes (BE: batch-memory); limit 0 when unset.
fn container_memory(pod: &PodMeta, name: &str) -> (i64, i64) {
    let Some(amounts) = pod
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == name))
        .and_then(|c| container_amounts(c).ok())
    else {
        return (0, 0);
    };
    if pod.qos == QoSClass::Be {
        (
            amounts.batch_memory_request().unwrap_or(0),
            amounts.batch_memory_limit().unwrap_or(0),
        )
    } else {
        let get = |a: &koord_api::quantity::ResourceAmounts| a.get("memory").copied().unwrap_or(0);
        (get(&amounts.requests), get(&amounts.limits))
    }
}

fn pod_request(pod: &PodMeta) -> i64 {
    let requests = if pod.qos == QoSClass::Be {
        koord_api::resources::pod_batch_requests(&pod.pod)
    } else {
        koord_api::resources::pod_cpu_memory_requests(&pod.pod)
    };
    requests.map(|r| r.memory_bytes).unwrap_or(0)
}

fn push(writes: &mut Vec<CgroupWrite>, dir: &CgroupDir, min: i64, low: i64, high: Option<i64>) {
    writes.push(CgroupWrite::int(dir, CgroupResource::MemoryMin, min, STRATEGY));
    writes.push(CgroupWrite::int(dir, CgroupResource::MemoryLow, low, STRATEGY));
    if let Some(h) = high {
        writes.push(CgroupWrite::int(dir, CgroupResource::MemoryHigh, h, STRATEGY));
    }
}

/// Decides the memory QoS files of every running pod.
pub fn decide(input: &MemoryQosInput<'_>) -> MemoryQosPlan {
    let mut pods = Vec::new();
    let mut pod_writes = Vec::new();
    // Σ (min, low) per kube QoS directory: Guaranteed, Burstable, BestEffort.
    let mut sums = [(0i64, 0i64); 3];
    for pod in input.pods.iter().filter(|p| p.is_running()) {
        let (p, source) = params(input.strategy, pod);
        let request_bytes = pod_request(pod);
        let (min, low) = min_low(request_bytes, p.min_percent, p.low_percent);
        let slot = match pod.kube_qos {
            KubeQoSClass::Guaranteed => 0,
            KubeQoSClass::Burstable => 1,
            KubeQoSClass::BestEffort => 2,
        };
        sums[slot].0 = sums[slot].0.saturating_add(min);
        sums[slot].1 = sums[slot].1.saturating_add(low);
        push(&mut pod_writes, &pod.cgroup_dir(input.paths), min, low, None);
        let mut containers = Vec::new();
        for c in &pod.containers {
            let Some(dir) = pod.container_dir(input.paths, c) else {
                continue;
            };
            let (req, limit) = container_memory(pod, &c.name);
            let limit = if limit > 0 {
                limit
            } else {
                input.allocatable_memory_bytes
            };
            let (cmin, clow) = min_low(req, p.min_percent, p.low_percent);
            let chigh = high(req, limit, p.throttling_percent, cmin);
            push(&mut pod_writes, &dir, cmin, clow, Some(chigh));
            containers.push(ContainerMemoryQos {
                name: c.name.clone(),
                min: cmin,
                low: clow,
                high: chigh,
            });
        }
        pods.push(PodMemoryQos {
            pod: format!("{}/{}", pod.namespace, pod.name),
            source,
            request_bytes,
            min,
            low,
            containers,
        });
    }
    let mut writes = Vec::with_capacity(pod_writes.len() + 9);
    let total = sums.iter().fold((0i64, 0i64), |a, s| {
        (a.0.saturating_add(s.0), a.1.saturating_add(s.1))
    });
    push(&mut writes, &input.paths.kubepods_dir(), total.0, total.1, None);
    for (qos, slot) in [(KubeQoSClass::Burstable, 1), (KubeQoSClass::BestEffort, 2)] {
        push(
            &mut writes,
            &input.paths.qos_dir(qos),
            sums[slot].0,
            sums[slot].1,
            None,
        );
    }
    writes.extend(pod_writes);
    MemoryQosPlan { pods, writes }
}

/// The engine's call: gate, NodeSLO and kernel checks, then [`decide`]; the writes join the
/// round's, and a check that fails is the strategy's skip reason.
pub fn from_engine(
    input: &super::engine::EngineInput<'_>,
    writes: &mut Vec<CgroupWrite>,
) -> super::engine::Report<MemoryQosPlan> {
    let skipped = |reason: String| super::engine::Report::Skipped { skipped: reason };
    if !input.gates.enabled(GATE) {
        return skipped(format!("feature gate {GATE} is off"));
    }
    let Some(strategy) = input.node_slo.and_then(|s| s.resource_qos_strategy.as_ref()) else {
        return skipped("no resourceQOSStrategy in the NodeSLO".into());
    };
    if input.node.memory_qos_kernel == MemoryQosKernel::Absent {
        return skipped(
            "unsupported: memory.min/memory.low/memory.high need cgroup v2 (or an Anolis kernel on v1)"
                .into(),
        );
    }
    let plan = decide(&MemoryQosInput {
        strategy,
        pods: input.pods,
        paths: input.paths,
        allocatable_memory_bytes: i64::try_from(input.node.memory_allocatable_bytes).unwrap_or(i64::MAX),
    });
    writes.extend(plan.writes.iter().cloned());
    super::engine::Report::Ran(plan)
}

#[cfg(test)]
#[path = "memory_qos_tests.rs"]
mod tests;
