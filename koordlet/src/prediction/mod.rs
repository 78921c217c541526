//! Peak prediction: per pod, per priority class (koord-prod and none, their pods' usage summed)
//! and for the system (non-pod) usage, a decaying histogram of CPU and one of memory, trained
//! from the metric stores every `--prediction-training-interval`; the prod-reclaimable
//! prediction of `koordlet_core::prediction` computed from their p95 CPU / p98 memory after
//! every training and reported as the NodeMetric's `prodReclaimableMetric`, with the prod pods'
//! predicted peak (the koord-prod and none class peaks with the safety margin) as its
//! `prodPeakMetric`.
//!
//! - Training adds each item's newest sample once (a sample older than two training intervals,
//!   at least 10 s, is stale and skipped); the class items get the sum of their pods' fresh
//!   samples every round, 0 when the class has no pod, so they exist from the first round.
//! - A model not trained for `--prediction-model-expiration-duration` (its pod is gone) is
//!   dropped.
//! - Models are saved to `--prediction-checkpoint-filepath` (one JSON file, written to a
//!   temporary file and renamed over the old one) every `--prediction-model-checkpoint-interval`
//!   and loaded at start ([`checkpoint`]).

pub mod checkpoint;
mod run;

pub use run::{PredictedMetrics, PredictionTelemetry, run};

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use koord_api::PriorityClass;
use koordlet_core::prediction::histogram::RestoreError;
use koordlet_core::prediction::predictor::{Peak, PredictPod};
use koordlet_core::prediction::{
    Amounts, BucketScheme, DecayingHistogram, MissingModel, PredictInput, PredictSettings, ProdReclaimable,
    predict_prod_reclaimable,
};

use crate::metrics::{MetricKind, MetricStore, MetricTime, SeriesKey};
use crate::states::PodMeta;

/// Key of the system usage model.
pub const SYS_ITEM: &str = "node/sys";
/// Key of the koord-prod class model.
pub const PROD_ITEM: &str = "node/priority-koord-prod";
/// Key of the none class model.
pub const NONE_ITEM: &str = "node/priority-none";

/// CPU percentile read from the models.
pub const CPU_PERCENTILE: f64 = 0.95;
/// Memory percentile read from the models.
pub const MEMORY_PERCENTILE: f64 = 0.98;

/// The prediction's flags, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictionSettings {
    /// Cold start and safety margin.
    pub predict: PredictSettings,
    /// Half-life of the CPU histograms.
    pub cpu_half_life: Duration,
    /// Half-life of the memory histograms.
    pub memory_half_life: Duration,
    /// Time between two trainings (and predictions).
    pub training_interval: Duration,
    /// A model without a sample for this long is dropped.
    pub model_expiration: Duration,
    /// The checkpoint file.
    pub checkpoint_path: PathBuf,
    /// Time between two checkpoints.
    pub checkpoint_interval: Duration,
}

impl Default for PredictionSettings {
    /// Upstream's defaults.
    fn default() -> Self {
        PredictionSettings {
            predict: PredictSettings::default(),
            cpu_half_life: Duration::from_secs(12 * 3600),
            memory_half_life: Duration::from_secs(24 * 3600),
            training_interval: Duration::from_secs(60),
            model_expiration: Duration::from_secs(30 * 60),
            checkpoint_path: PathBuf::from("/prediction-checkpoints"),
            checkpoint_interval: Duration::from_secs(600),
        }
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// One item's models.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// CPU usage, cores.
    pub cpu: DecayingHistogram,
    /// Memory usage, bytes.
    pub memory: DecayingHistogram,
    /// Metric time of the newest sample added (ms).
    pub last_sample_ms: i64,
}

impl Model {
    /// p95 CPU and p98 memory; `None` until both histograms have a sample.
    pub fn peak(&self) -> Option<Peak> {
        Some(Amounts::new(
            self.cpu.percentile(CPU_PERCENTILE)?,
            self.memory.percentile(MEMORY_PERCENTILE)?,
        ))
    }
}

/// What one training round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TrainReport {
    /// Items that got a sample.
    pub trained: usize,
    /// Models dropped as expired.
    pub expired: usize,
}

/// Why no prediction was made this round.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Unavailable {
    /// The Node has not been seen, or states no CPU or memory capacity.
    #[error("the Node's cpu and memory capacity are not known")]
    NoCapacity,
    /// A node-level model is missing.
    #[error(transparent)]
    Missing(#[from] MissingModel),
}

impl Unavailable {
    /// A short label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Unavailable::NoCapacity => "no_capacity",
            Unavailable::Missing(MissingModel::System) => "no_sys_model",
            Unavailable::Missing(MissingModel::Class(_)) => "no_class_model",
        }
    }
}

/// The models of this node.
#[derive(Debug, Clone)]
pub struct PredictServer {
    settings: PredictionSettings,
    models: HashMap<String, Model>,
}

impl PredictServer {
    /// No models yet.
    pub fn new(settings: PredictionSettings) -> Self {
        PredictServer {
            settings,
            models: HashMap::new(),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> &PredictionSettings {
        &self.settings
    }

    /// Number of models held.
    pub fn model_count(&self) -> usize {
        self.models.len()
    }

    /// The model of an item (a pod UID or one of the `node/` keys).
    pub fn model(&self, key: &str) -> Option<&Model> {
        self.models.get(key)
    }

    fn empty_model(&self) -> Model {
        Model {
            cpu: DecayingHistogram::new(BucketScheme::cpu(), millis(self.settings.cpu_half_life)),
            memory: DecayingHistogram::new(BucketScheme::memory(), millis(self.settings.memory_half_life)),
            last_sample_ms: i64::MIN,
        }
    }

    /// Adds one sample of an item at `time_ms` unless the item already has it.
    fn add(&mut self, key: &str, cpu: f64, memory: f64, time_ms: i64) -> bool {
        if !self.models.contains_key(key) {
            let model = self.empty_model();
            self.models.insert(key.to_string(), model);
        }
        let Some(model) = self.models.get_mut(key) else {
            return false;
        };
        if time_ms <= model.last_sample_ms {
            return false;
        }
        model.cpu.add_sample(cpu, time_ms);
        model.memory.add_sample(memory, time_ms);
        model.last_sample_ms = time_ms;
        true
    }

    /// One training round at metric time `now`: every pod's, the classes' and the system's
    /// newest samples; then drops expired models.
    pub fn train(
        &mut self,
        pods: &[PodMeta],
        node_store: &MetricStore,
        pod_store: &MetricStore,
        now: MetricTime,
    ) -> TrainReport {
        let stale_before = now
            .minus((self.settings.training_interval * 2).max(Duration::from_secs(10)))
            .as_millis();
        let fresh = |store: &MetricStore, kind, object: &str| {
            store
                .latest(&SeriesKey::of(kind, object))
                .filter(|(t, v)| t.as_millis() >= stale_before && v.is_finite())
        };
        let mut report = TrainReport::default();
        let (mut prod, mut none) = (Amounts::ZERO, Amounts::ZERO);
        for pod in pods {
            let uid = pod.uid.as_str();
            let (Some((t, cpu)), Some((_, memory))) = (
                fresh(pod_store, MetricKind::PodCpuUsage, uid),
                fresh(pod_store, MetricKind::PodMemoryUsage, uid),
            ) else {
                continue;
            };
            match pod.priority {
                PriorityClass::Prod => prod = prod.plus(Amounts::new(cpu, memory)),
                PriorityClass::None => none = none.plus(Amounts::new(cpu, memory)),
                _ => {}
            }
            report.trained += usize::from(self.add(uid, cpu, memory, t.as_millis()));
        }
        for (key, sum) in [(PROD_ITEM, prod), (NONE_ITEM, none)] {
            report.trained += usize::from(self.add(key, sum.cpu_cores, sum.memory_bytes, now.as_millis()));
        }
        if let (Some((t, cpu)), Some((_, memory))) = (
            fresh(node_store, MetricKind::SysCpuUsage, ""),
            fresh(node_store, MetricKind::SysMemoryUsage, ""),
        ) {
            report.trained += usize::from(self.add(SYS_ITEM, cpu.max(0.0), memory.max(0.0), t.as_millis()));
        }
        let expire_before = now.minus(self.settings.model_expiration).as_millis();
        let before = self.models.len();
        self.models.retain(|_, m| m.last_sample_ms >= expire_before);
        report.expired = before - self.models.len();
        report
    }

    /// The prod-reclaimable prediction for `pods` on `node` at wall time `now_ms`.
    pub fn predict(
        &self,
        pods: &[PodMeta],
        node: Option<&Node>,
        now_ms: i64,
    ) -> Result<ProdReclaimable, Unavailable> {
        let capacity = node.and_then(node_capacity).ok_or(Unavailable::NoCapacity)?;
        let predict_pods: Vec<PredictPod> = pods.iter().map(predict_pod).collect();
        let pod_peaks: HashMap<String, Peak> = pods
            .iter()
            .filter_map(|p| {
                Some((
                    p.uid.as_str().to_string(),
                    self.models.get(p.uid.as_str())?.peak()?,
                ))
            })
            .collect();
        let peak = |key: &str| self.models.get(key).and_then(Model::peak);
        Ok(predict_prod_reclaimable(&PredictInput {
            pods: &predict_pods,
            pod_peaks: &pod_peaks,
            sys_peak: peak(SYS_ITEM),
            prod_peak: peak(PROD_ITEM),
            none_peak: peak(NONE_ITEM),
            capacity,
            now_ms,
            settings: self.settings.predict,
        })?)
    }

    /// Replaces the models with those of a checkpoint; returns how many were taken.
    pub fn restore(&mut self, checkpoint: &checkpoint::Checkpoint) -> Result<usize, RestoreError> {
        let cpu_half_life = millis(self.settings.cpu_half_life);
        let memory_half_life = millis(self.settings.memory_half_life);
        let mut models = HashMap::new();
        for (key, saved) in &checkpoint.models {
            models.insert(
                key.clone(),
                Model {
                    cpu: DecayingHistogram::restore(BucketScheme::cpu(), cpu_half_life, &saved.cpu)?,
                    memory: DecayingHistogram::restore(
                        BucketScheme::memory(),
                        memory_half_life,
                        &saved.memory,
                    )?,
                    last_sample_ms: saved.last_sample_ms,
                },
            );
        }
        self.models = models;
        Ok(self.models.len())
    }

    /// All models with a sample, for a checkpoint.
    pub fn checkpoint(&self) -> checkpoint::Checkpoint {
        let models = self
            .models
            .iter()
            .filter_map(|(key, m)| {
                Some((
                    key.clone(),
                    checkpoint::SavedModel {
                        cpu: m.cpu.checkpoint()?,
                        memory: m.memory.checkpoint()?,
                        last_sample_ms: m.last_sample_ms,
                    },
                ))
            })
            .collect();
        checkpoint::Checkpoint {
            version: checkpoint::VERSION,
            models,
        }
    }
}

/// The Node's `status.capacity` cpu and memory.
fn node_capacity(node: &Node) -> Option<Amounts> {
    let capacity = node.status.as_ref()?.capacity.as_ref()?;
    let amount = |name: &str| {
        capacity
            .get(name)
            .and_then(|q| koord_api::quantity::ExactQuantity::from_k8s(q).ok())
            .and_then(|q| koord_api::quantity::amount_of(name, q).ok())
    };
    Some(Amounts::new(
        amount("cpu")? as f64 / 1000.0,
        amount("memory")? as f64,
    ))
}

/// Deletion requested, or the pod ran to completion.
fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        || matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

fn predict_pod(meta: &PodMeta) -> PredictPod {
    let request = match koord_api::resources::pod_cpu_memory_requests(&meta.pod) {
        Ok(r) => Amounts::new(r.cpu_milli as f64 / 1000.0, r.memory_bytes as f64),
        Err(e) => {
            // The API server admitted the pod, so this does not happen in practice; a pod
            // whose requests cannot be read adds no request (nothing reclaimable from it).
            tracing::debug!(pod = %format!("{}/{}", meta.namespace, meta.name), error = %e,
                "prediction: pod requests unreadable, counted as 0");
            Amounts::ZERO
        }
    };
    PredictPod {
        uid: meta.uid.as_str().to_string(),
        name: format!("{}/{}", meta.namespace, meta.name),
        priority: meta.priority,
        created_ms: meta
            .pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond()),
        terminating: is_terminating(&meta.pod),
        request,
    }
}

#[cfg(test)]
mod tests;
