//! Admission metrics: how many reviews each path answered and how, and how long they took.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::review::Endpoint;

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
    /// Creates the metrics and registers them under `koord_webhook_*`, every endpoint's series at 0.
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
        for endpoint in Endpoint::ALL {
            let results: Vec<&str> = endpoint.outcomes().iter().map(|o| o.label()).collect();
            metrics.init_path(endpoint.path(), endpoint.operations(), &results);
        }
        metrics
    }

    /// Creates `path`'s series at 0 (each operation and result it can answer with, and its
    /// latency histogram), so a scrape lists them before the first review and Prometheus'
    /// `increase()` does not miss the first one.
    pub fn init_path(&self, path: &str, operations: &[&str], results: &[&str]) {
        for operation in operations {
            for result in results {
                drop(self.admissions.get_or_create(&AdmissionLabels {
                    path: path.to_string(),
                    operation: (*operation).to_string(),
                    result: (*result).to_string(),
                }));
            }
        }
        drop(self.latency.get_or_create(&PathLabels {
            path: path.to_string(),
        }));
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_endpoint_is_served_at_zero_before_the_first_review() {
        let mut registry = Registry::default();
        let metrics = AdmissionMetrics::register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"koord_webhook_admissions_total{path="/mutate-pod",operation="CREATE",result="patched"} 0"#,
            r#"koord_webhook_admissions_total{path="/validate-configmap",operation="UPDATE",result="denied"} 0"#,
            r#"koord_webhook_admission_duration_seconds_count{path="/validate-pod"} 0"#,
            r#"koord_webhook_admission_duration_seconds_count{path="/validate-clustercolocationprofile"} 0"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        metrics.observe("/mutate-pod", "CREATE", "patched", 0.001);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains(
            r#"koord_webhook_admissions_total{path="/mutate-pod",operation="CREATE",result="patched"} 1"#
        ));
    }
}
