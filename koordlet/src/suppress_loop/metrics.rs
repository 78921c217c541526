//! The fast suppress loop's Prometheus metrics.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::telemetry::Telemetry;

/// The loop's Prometheus metrics (`koordlet_` prefix), plus the agent's shared ones.
#[derive(Debug, Clone)]
pub struct SuppressMetrics {
    /// `cpu_suppress_writes{direction}`: besteffort quota changes (`decrease`, `increase`,
    /// `restore`).
    pub writes: Family<Vec<(String, String)>, Counter>,
    /// `be_cpu_suppress_budget_milli`: the BE budget of the last tick, −1 when suppress is off.
    pub budget_milli: Gauge,
    /// The agent's metrics (`cgroup_writes{strategy="cpu_suppress"}`).
    pub telemetry: Telemetry,
}

impl SuppressMetrics {
    /// Creates and registers the loop's metrics.
    pub fn register(registry: &mut Registry, telemetry: Telemetry) -> Self {
        let m = SuppressMetrics {
            writes: Family::default(),
            budget_milli: Gauge::default(),
            telemetry,
        };
        registry.register(
            "cpu_suppress_writes",
            "Besteffort CPU quota changes made by the fast suppress loop, by direction",
            m.writes.clone(),
        );
        registry.register(
            "be_cpu_suppress_budget_milli",
            "BE CPU budget of the fast suppress loop's last tick in milli-cores (-1: suppress off)",
            m.budget_milli.clone(),
        );
        m
    }
}
