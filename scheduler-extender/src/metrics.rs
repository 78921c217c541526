//! Extender metrics: calls and their latency per verb, nodes filtered out per reason.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// `filter` or `prioritize`.
    pub verb: String,
    /// `ok` or `bad_request`.
    pub outcome: String,
}

/// Labels of the latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    /// `filter` or `prioritize`.
    pub verb: String,
}

/// Labels of a filtered-out node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The filter reason, e.g. `nodemetric_stale`.
    pub reason: String,
}

/// The extender's metrics, registered once and shared by all handlers.
#[derive(Clone, Debug)]
pub struct ExtenderMetrics {
    calls: Family<CallLabels, Counter>,
    latency: Family<VerbLabels, Histogram, fn() -> Histogram>,
    filtered: Family<ReasonLabels, Counter>,
}

fn latency_histogram() -> Histogram {
    // 50 µs .. ~1.6 s: a call takes micro- to milliseconds; kube-scheduler's timeout is seconds.
    Histogram::new(exponential_buckets(0.00005, 2.0, 16))
}

impl Default for ExtenderMetrics {
    fn default() -> Self {
        ExtenderMetrics {
            calls: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            filtered: Family::default(),
        }
    }
}

impl ExtenderMetrics {
    /// Creates the metrics and registers them under `koord_scheduler_extender_*`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = ExtenderMetrics::default();
        registry.register(
            "koord_scheduler_extender_calls",
            "Extender calls answered, by verb and outcome",
            metrics.calls.clone(),
        );
        registry.register(
            "koord_scheduler_extender_call_duration_seconds",
            "Time to answer one extender call, by verb",
            metrics.latency.clone(),
        );
        registry.register(
            "koord_scheduler_extender_filtered_nodes",
            "Candidate nodes the filter call removed, by reason",
            metrics.filtered.clone(),
        );
        metrics
    }

    /// Records one answered call.
    pub fn observe_call(&self, verb: &str, outcome: &str, seconds: f64) {
        self.calls
            .get_or_create(&CallLabels {
                verb: verb.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
        self.latency
            .get_or_create(&VerbLabels {
                verb: verb.to_owned(),
            })
            .observe(seconds);
    }

    /// Records a node the filter removed.
    pub fn filtered(&self, reason: &str) {
        self.filtered
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }
}
