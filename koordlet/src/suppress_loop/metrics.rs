//! The fast suppress loop's Prometheus metrics.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::telemetry::Telemetry;

/// The loop's Prometheus metrics (`koordlet_` prefix), plus the agent's shared ones.
#[derive(Debug, Clone)]
pub struct SuppressMetrics {
    /// `cpu_suppress_writes{direction}`: besteffort quota changes (`decrease`, `increase`,
    /// `restore`).
    pub writes: Family<Vec<(String, String)>, Counter>,
    /// The agent's metrics (`cgroup_writes{strategy="cpu_suppress"}`, and the BE budget and
    /// usage under upstream's names).
    pub telemetry: Telemetry,
}

impl SuppressMetrics {
    /// Creates and registers the loop's metrics.
    pub fn register(registry: &mut Registry, telemetry: Telemetry) -> Self {
        let m = SuppressMetrics {
            writes: Family::default(),
            telemetry,
        };
        registry.register(
            "cpu_suppress_writes",
            "Besteffort CPU quota changes made by the fast suppress loop, by direction",
            m.writes.clone(),
        );
        m
    }
}
