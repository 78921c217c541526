//! The prod-reclaimable prediction: how much of what Prod pods requested they will not use at
//! their peak, the base of the manager's mid resources. Pure: peaks, pods, capacity and now
//! come in; the result and every term it was computed from go out.
//!
//! Two predictors, the smaller result wins (per resource):
//! 1. **pod**: over pods whose priority class (with default) is koord-prod or none, past their
//!    cold start and not terminating or terminated: `peak = p95 cpu | p98 memory × (1 +
//!    margin/100)`, `unreclaimable += peak`, `reclaimable += max(request − peak, 0)`. A pod
//!    without a model yet counts its whole request as unreclaimable (upstream fails the round).
//! 2. **priority**: `unreclaimable = (sys peak + prod class peak + none class peak) × (1 +
//!    margin/100)`, `reclaimable = max(Σ requests of active prod/none pods − unreclaimable, 0)`.
//!
//! Each result is `min(max(capacity − unreclaimable, 0), reclaimable)`. A missing sys or class
//! model makes the whole prediction unavailable ([`MissingModel`]).
//!
//! The prod peak (`prodPeakMetric`) is the priority predictor's prod part: `(prod class peak +
//! none class peak) × (1 + margin/100)`, the predicted peak of the aggregated usage of the pods
//! whose requests prod reclaiming is about, safety margin included, system usage left out.

use std::collections::HashMap;
use std::time::Duration;

use koord_api::PriorityClass;

/// CPU (cores) and memory (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Amounts {
    /// Cores.
    pub cpu_cores: f64,
    /// Bytes.
    pub memory_bytes: f64,
}

impl Amounts {
    /// Zero of both.
    pub const ZERO: Amounts = Amounts {
        cpu_cores: 0.0,
        memory_bytes: 0.0,
    };

    /// From cores and bytes.
    pub fn new(cpu_cores: f64, memory_bytes: f64) -> Self {
        Amounts {
            cpu_cores,
            memory_bytes,
        }
    }

    fn zip(self, other: Amounts, f: impl Fn(f64, f64) -> f64) -> Amounts {
        Amounts::new(
            f(self.cpu_cores, other.cpu_cores),
            f(self.memory_bytes, other.memory_bytes),
        )
    }

    fn map(self, f: impl Fn(f64) -> f64) -> Amounts {
        Amounts::new(f(self.cpu_cores), f(self.memory_bytes))
    }

    /// Sum per resource.
    pub fn plus(self, other: Amounts) -> Amounts {
        self.zip(other, |a, b| a + b)
    }

    /// Difference per resource (may be negative).
    pub fn minus(self, other: Amounts) -> Amounts {
        self.zip(other, |a, b| a - b)
    }

    /// Smaller per resource.
    pub fn min(self, other: Amounts) -> Amounts {
        self.zip(other, f64::min)
    }

    /// Negative parts raised to 0.
    pub fn floor_zero(self) -> Amounts {
        self.map(|v| v.max(0.0))
    }

    /// Both scaled by `factor`.
    pub fn scaled(self, factor: f64) -> Amounts {
        self.map(|v| v * factor)
    }
}

/// A model's peak: p95 CPU and p98 memory.
pub type Peak = Amounts;

/// The facts about one pod the predictors read.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictPod {
    /// `metadata.uid`: the key of its model.
    pub uid: String,
    /// `namespace/name`, for logs.
    pub name: String,
    /// Priority class with default (`priority_class_with_default`).
    pub priority: PriorityClass,
    /// `metadata.creationTimestamp` in ms since the epoch (`None`: unknown, not in cold start).
    pub created_ms: Option<i64>,
    /// Deletion requested, or phase Succeeded / Failed.
    pub terminating: bool,
    /// CPU and memory requests as Kubernetes counts them.
    pub request: Amounts,
}

/// The knobs of the prediction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PredictSettings {
    /// A pod younger than this adds nothing to the pod predictor.
    pub cold_start: Duration,
    /// Peaks are raised by this percentage.
    pub safety_margin_percent: u32,
}

impl Default for PredictSettings {
    /// Upstream's defaults: 24 h cold start, 10 % margin.
    fn default() -> Self {
        PredictSettings {
            cold_start: Duration::from_secs(24 * 3600),
            safety_margin_percent: 10,
        }
    }
}

impl PredictSettings {
    /// `1 + margin / 100`.
    pub fn margin_factor(&self) -> f64 {
        (100.0 + f64::from(self.safety_margin_percent)) / 100.0
    }
}

/// Everything one prediction reads.
#[derive(Debug, Clone, Copy)]
pub struct PredictInput<'a> {
    /// The node's pods.
    pub pods: &'a [PredictPod],
    /// Peaks of the pods that have a model, by UID.
    pub pod_peaks: &'a HashMap<String, Peak>,
    /// Peak of the system (non-pod) usage.
    pub sys_peak: Option<Peak>,
    /// Peak of the koord-prod class's aggregated usage.
    pub prod_peak: Option<Peak>,
    /// Peak of the none class's aggregated usage.
    pub none_peak: Option<Peak>,
    /// The node's capacity.
    pub capacity: Amounts,
    /// Now, ms since the epoch.
    pub now_ms: i64,
    /// Knobs.
    pub settings: PredictSettings,
}

/// The pod predictor's terms.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodPredictor {
    /// Σ peaks (and requests of pods without a model).
    pub unreclaimable: Amounts,
    /// Σ positive `request − peak`.
    pub reclaimable: Amounts,
    /// `min(max(capacity − unreclaimable, 0), reclaimable)`.
    pub result: Amounts,
    /// Pods with a model that were counted.
    pub counted: usize,
    /// Pods skipped in their cold start.
    pub cold: usize,
    /// Pods skipped as terminating or terminated.
    pub terminating: usize,
    /// `namespace/name` of pods past cold start without a model (counted at their request).
    pub without_model: Vec<String>,
}

/// The priority predictor's terms.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PriorityPredictor {
    /// Σ requests of active prod/none pods.
    pub reclaim_request: Amounts,
    /// `(sys + prod + none peaks) × margin`.
    pub unreclaimable: Amounts,
    /// `(prod + none peaks) × margin`: the prod pods' peak (`prodPeakMetric`).
    pub prod_pods_peak: Amounts,
    /// `max(reclaim_request − unreclaimable, 0)`.
    pub reclaimable: Amounts,
    /// `min(max(capacity − unreclaimable, 0), reclaimable)`.
    pub result: Amounts,
}

/// A prediction and its terms.
#[derive(Debug, Clone, PartialEq)]
pub struct ProdReclaimable {
    /// The pod predictor.
    pub pod: PodPredictor,
    /// The priority predictor.
    pub priority: PriorityPredictor,
    /// The smaller of the two, per resource: `prodReclaimableMetric`.
    pub result: Amounts,
}

impl ProdReclaimable {
    /// The predicted peak usage of prod (koord-prod and none) pods, safety margin included:
    /// `prodPeakMetric`.
    pub fn prod_pods_peak(&self) -> Amounts {
        self.priority.prod_pods_peak
    }
}

/// A node-level model the priority predictor needs and does not have yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MissingModel {
    /// The system usage model.
    #[error("no model of the system usage yet")]
    System,
    /// A priority class's aggregated usage model.
    #[error("no model of the {0} priority class usage yet")]
    Class(&'static str),
}

impl MissingModel {
    /// A short label for metrics (`sys`, `koord-prod`, `none`).
    pub fn label(&self) -> &'static str {
        match self {
            MissingModel::System => "sys",
            MissingModel::Class(name) => name,
        }
    }
}

/// Whether a pod's class is one whose requests Prod reclaiming is about.
pub fn reclaimable_for_prod(class: PriorityClass) -> bool {
    matches!(class, PriorityClass::Prod | PriorityClass::None)
}

fn bounded(capacity: Amounts, unreclaimable: Amounts, reclaimable: Amounts) -> Amounts {
    capacity.minus(unreclaimable).floor_zero().min(reclaimable)
}

/// The pod predictor (see the module docs).
pub fn pod_predictor(input: &PredictInput<'_>) -> PodPredictor {
    let mut out = PodPredictor::default();
    let factor = input.settings.margin_factor();
    let cold_ms = i64::try_from(input.settings.cold_start.as_millis()).unwrap_or(i64::MAX);
    for pod in input.pods.iter().filter(|p| reclaimable_for_prod(p.priority)) {
        if pod
            .created_ms
            .is_some_and(|created| input.now_ms.saturating_sub(created) < cold_ms)
        {
            out.cold += 1;
            continue;
        }
        if pod.terminating {
            out.terminating += 1;
            continue;
        }
        match input.pod_peaks.get(&pod.uid) {
            Some(peak) => {
                let peak = peak.scaled(factor);
                out.unreclaimable = out.unreclaimable.plus(peak);
                out.reclaimable = out.reclaimable.plus(pod.request.minus(peak).floor_zero());
                out.counted += 1;
            }
            None => {
                out.unreclaimable = out.unreclaimable.plus(pod.request);
                out.without_model.push(pod.name.clone());
            }
        }
    }
    out.result = bounded(input.capacity, out.unreclaimable, out.reclaimable);
    out
}

/// The priority predictor (see the module docs).
pub fn priority_predictor(input: &PredictInput<'_>) -> Result<PriorityPredictor, MissingModel> {
    let sys = input.sys_peak.ok_or(MissingModel::System)?;
    let prod = input
        .prod_peak
        .ok_or(MissingModel::Class(PriorityClass::Prod.name()))?;
    let none = input.none_peak.ok_or(MissingModel::Class("none"))?;
    let factor = input.settings.margin_factor();
    let unreclaimable = sys.plus(prod).plus(none).scaled(factor);
    let prod_pods_peak = prod.plus(none).scaled(factor);
    let reclaim_request = input
        .pods
        .iter()
        .filter(|p| reclaimable_for_prod(p.priority) && !p.terminating)
        .fold(Amounts::ZERO, |sum, p| sum.plus(p.request));
    let reclaimable = reclaim_request.minus(unreclaimable).floor_zero();
    Ok(PriorityPredictor {
        reclaim_request,
        unreclaimable,
        prod_pods_peak,
        reclaimable,
        result: bounded(input.capacity, unreclaimable, reclaimable),
    })
}

/// Both predictors and their minimum: the node's prod-reclaimable resources.
pub fn predict_prod_reclaimable(input: &PredictInput<'_>) -> Result<ProdReclaimable, MissingModel> {
    let priority = priority_predictor(input)?;
    let pod = pod_predictor(input);
    let result = pod.result.min(priority.result);
    Ok(ProdReclaimable {
        pod,
        priority,
        result,
    })
}

#[cfg(test)]
mod tests;
