//! The prediction task: train, predict, publish the result to the NodeMetric report,
//! checkpoint; and its metrics.

use std::sync::Arc;
use std::time::Instant;

use koord_api::nodemetric::ReclaimableMetric;
use koordlet_core::prediction::{Amounts, ProdReclaimable};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{Mutex, watch};
use tracing::{debug, info, warn};

use super::{PredictServer, checkpoint};
use crate::metrics::clock::MetricClock;
use crate::metrics::collector::Stores;
use crate::states::Snapshot;
use crate::upstream_metrics::UpstreamMetrics;

type Labels = Vec<(String, String)>;

/// The prediction's metrics; cheap to clone.
#[derive(Debug, Clone)]
pub struct PredictionTelemetry {
    /// Rounds by result (`ok`, `no_capacity`, `no_sys_model`, `no_class_model`).
    pub rounds: Family<Labels, Counter>,
    /// Models held.
    pub models: Gauge,
    /// Prod/none pods past cold start counted at their request for want of a model.
    pub pods_without_model: Gauge,
    /// Checkpoint saves and loads by result.
    pub checkpoints: Family<Labels, Counter>,
    /// `koordlet_node_predicted_resource_reclaimable`.
    pub upstream: UpstreamMetrics,
}

impl PredictionTelemetry {
    /// Registers the series in `registry` (the `koordlet` prefixed one).
    pub fn register(registry: &mut Registry, upstream: UpstreamMetrics) -> Self {
        let t = PredictionTelemetry {
            rounds: Family::default(),
            models: Gauge::default(),
            pods_without_model: Gauge::default(),
            checkpoints: Family::default(),
            upstream,
        };
        registry.register(
            "prediction_rounds",
            "Prod-reclaimable prediction rounds by result (ok, or why no prediction was reported)",
            t.rounds.clone(),
        );
        registry.register(
            "prediction_models",
            "Usage models (pods, priority classes, system) held by the peak predictor",
            t.models.clone(),
        );
        registry.register(
            "prediction_pods_without_model",
            "Prod and none pods past cold start without a usage model yet (counted at their request)",
            t.pods_without_model.clone(),
        );
        registry.register(
            "prediction_checkpoints",
            "Prediction checkpoint saves and loads by operation and result",
            t.checkpoints.clone(),
        );
        t
    }

    fn count(family: &Family<Labels, Counter>, labels: &[(&str, &str)]) {
        family
            .get_or_create(
                &labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
            .inc();
    }
}

/// The NodeMetric fields one prediction fills.
#[derive(Debug, Clone, PartialEq)]
pub struct PredictedMetrics {
    /// `prodReclaimableMetric`: what prod pods requested but will not use.
    pub prod_reclaimable: ReclaimableMetric,
    /// `prodPeakMetric`: the prod pods' predicted peak usage, safety margin included.
    pub prod_peak: ReclaimableMetric,
}

fn metric(amounts: Amounts) -> ReclaimableMetric {
    ReclaimableMetric {
        resource: crate::report::resource_map(Some(amounts.cpu_cores), Some(amounts.memory_bytes)),
    }
}

/// The NodeMetric `prodReclaimableMetric` of a prediction: CPU in milli-cores, memory in bytes.
pub fn reclaimable_metric(prediction: &ProdReclaimable) -> ReclaimableMetric {
    metric(prediction.result)
}

/// Both NodeMetric fields of a prediction.
pub fn predicted_metrics(prediction: &ProdReclaimable) -> PredictedMetrics {
    PredictedMetrics {
        prod_reclaimable: reclaimable_metric(prediction),
        prod_peak: metric(prediction.prod_pods_peak()),
    }
}

/// Loads the checkpoint, then every training interval trains the models, predicts and sends
/// the results (`None` while unavailable) to the report; saves a checkpoint every checkpoint
/// interval.
pub async fn run(
    mut server: PredictServer,
    clock: Arc<std::sync::Mutex<MetricClock>>,
    stores: Arc<Mutex<Stores>>,
    snapshots: watch::Receiver<Snapshot>,
    result: watch::Sender<Option<Arc<PredictedMetrics>>>,
    telemetry: PredictionTelemetry,
) {
    let settings = server.settings().clone();
    let path = settings.checkpoint_path.clone();
    match checkpoint::restore_into(&mut server, &path) {
        Ok(n) => {
            info!(models = n, path = %path.display(), "prediction models loaded from checkpoint");
            PredictionTelemetry::count(&telemetry.checkpoints, &[("op", "load"), ("result", "ok")]);
        }
        Err(e) => {
            warn!(error = %e, "prediction checkpoint ignored; models start empty");
            PredictionTelemetry::count(&telemetry.checkpoints, &[("op", "load"), ("result", "error")]);
        }
    }
    let mut ticker = tokio::time::interval(settings.training_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_checkpoint = Instant::now();
    let mut unavailable_streak: Option<&'static str> = None;
    loop {
        ticker.tick().await;
        let snapshot = snapshots.borrow().clone();
        let (now, wall) = crate::agent::read_clock(&clock);
        let trained = {
            let stores = stores.lock().await;
            server.train(&snapshot.pods, &stores.node, &stores.pods, now)
        };
        telemetry.models.set(server.model_count() as i64);
        debug!(
            trained = trained.trained,
            expired = trained.expired,
            "prediction models trained"
        );
        match server.predict(&snapshot.pods, snapshot.node.as_deref(), wall.as_millis()) {
            Ok(prediction) => {
                if let Some(reason) = unavailable_streak.take() {
                    info!(after = reason, "prod-reclaimable prediction available again");
                }
                if !prediction.pod.without_model.is_empty() {
                    debug!(pods = ?prediction.pod.without_model,
                           "prediction: pods without a model yet counted at their request");
                }
                telemetry
                    .pods_without_model
                    .set(prediction.pod.without_model.len() as i64);
                telemetry.upstream.record_predicted_reclaimable(&prediction);
                PredictionTelemetry::count(&telemetry.rounds, &[("result", "ok")]);
                debug!(result = ?prediction.result, pod = ?prediction.pod.result,
                       priority = ?prediction.priority.result, peak = ?prediction.prod_pods_peak(),
                       "prod-reclaimable predicted");
                result.send_replace(Some(Arc::new(predicted_metrics(&prediction))));
            }
            Err(e) => {
                if unavailable_streak != Some(e.label()) {
                    info!(reason = %e, "no prod-reclaimable prediction reported until this resolves");
                    unavailable_streak = Some(e.label());
                }
                telemetry.upstream.clear_predicted_reclaimable();
                PredictionTelemetry::count(&telemetry.rounds, &[("result", e.label())]);
                result.send_replace(None);
            }
        }
        if last_checkpoint.elapsed() >= settings.checkpoint_interval {
            last_checkpoint = Instant::now();
            let saved = server.checkpoint();
            let models = saved.models.len();
            let target = path.clone();
            let written = tokio::task::spawn_blocking(move || checkpoint::save(&target, &saved)).await;
            let outcome = match written {
                Ok(Ok(())) => {
                    debug!(models, path = %path.display(), "prediction checkpoint saved");
                    "ok"
                }
                Ok(Err(e)) => {
                    warn!(error = %e, "prediction checkpoint not saved");
                    "error"
                }
                Err(e) => {
                    warn!(error = %e, "prediction checkpoint task failed");
                    "error"
                }
            };
            PredictionTelemetry::count(&telemetry.checkpoints, &[("op", "save"), ("result", outcome)]);
        }
    }
}
