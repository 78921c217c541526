//! Admission metrics: how many reviews each path answered and how, and how long they took.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of one admission.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    /// Webhook path, e.g. `/mutate-pod`.
    pub path: String,
    /// CREATE, UPDATE, DELETE, CONNECT, or `unknown` for unreadable reviews.
    pub operation: String,
    /// allowed, patched, denied, invalid.
    pub result: String,
}

/// Labels of the latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabels {
    /// Webhook path.
    pub path: String,
}

/// The webhook's metrics, registered once and shared by all handlers.
#[derive(Clone, Debug)]
pub struct AdmissionMetrics {
    admissions: Family<AdmissionLabels, Counter>,
    latency: Family<PathLabels, Histogram, fn() -> Histogram>,
}

fn latency_histogram() -> Histogram {
    // 50 µs .. ~3 s: the decisions take microseconds, the timeout is seconds.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.00005, 2.0, 16,
    ))
}

impl AdmissionMetrics {
    /// Creates the metrics and registers them under `koord_webhook_*`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            admissions: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
        };
        registry.register(
            "koord_webhook_admissions",
            "Admission reviews answered, by path, operation and result",
            metrics.admissions.clone(),
        );
        registry.register(
            "koord_webhook_admission_duration_seconds",
            "Time to answer one admission review, by path",
            metrics.latency.clone(),
        );
        metrics
    }

    /// Records one answered review.
    pub fn observe(&self, path: &str, operation: &str, result: &str, seconds: f64) {
        self.admissions
            .get_or_create(&AdmissionLabels {
                path: path.to_string(),
                operation: operation.to_string(),
                result: result.to_string(),
            })
            .inc();
        self.latency
            .get_or_create(&PathLabels {
                path: path.to_string(),
            })
            .observe(seconds);
    }
}
