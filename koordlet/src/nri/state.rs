//! The NRI connection's state and metrics.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// Where the NRI connection stands (metric `koordlet_nri_connection_state` and the `nri`
/// readiness check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionState {
    /// NRI hooks are switched off.
    Disabled,
    /// The socket does not exist (NRI not enabled in the runtime, or the runtime is down).
    SocketMissing,
    /// Connected, registering.
    Connecting,
    /// Registered: hooks are live.
    Registered,
    /// Lost; reconnecting with backoff.
    Disconnected,
}

impl ConnectionState {
    /// Every state, for the one-hot metric.
    pub const ALL: [ConnectionState; 5] = [
        ConnectionState::Disabled,
        ConnectionState::SocketMissing,
        ConnectionState::Connecting,
        ConnectionState::Registered,
        ConnectionState::Disconnected,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionState::Disabled => "disabled",
            ConnectionState::SocketMissing => "socket_missing",
            ConnectionState::Connecting => "connecting",
            ConnectionState::Registered => "registered",
            ConnectionState::Disconnected => "disconnected",
        }
    }
}

type Labels = Vec<(String, String)>;

/// The NRI metrics.
#[derive(Debug, Clone)]
pub struct NriTelemetry {
    /// 1 while registered with the runtime.
    pub connected: Gauge,
    /// One-hot connection state by `state`.
    pub state: Family<Labels, Gauge>,
    /// Runtime requests by `event` and `result` (`adjusted`, `unchanged`, `timeout`, `error`).
    pub requests: Family<Labels, Counter>,
    /// Time to decide one request.
    pub decide_seconds: Histogram,
    /// Connection attempts after the first.
    pub reconnects: Counter,
}

impl NriTelemetry {
    /// Creates the metrics and registers them under `nri_*`.
    pub fn register(registry: &mut Registry) -> Self {
        let t = NriTelemetry::unregistered();
        registry.register(
            "nri_connected",
            "1 while registered with the runtime over NRI",
            t.connected.clone(),
        );
        registry.register(
            "nri_connection_state",
            "NRI connection state (one-hot)",
            t.state.clone(),
        );
        registry.register(
            "nri_requests",
            "NRI runtime requests by event and result (adjusted, unchanged, timeout, error)",
            t.requests.clone(),
        );
        registry.register(
            "nri_decide_seconds",
            "Time to decide one NRI request",
            t.decide_seconds.clone(),
        );
        registry.register(
            "nri_reconnects",
            "NRI connection attempts after the first",
            t.reconnects.clone(),
        );
        t
    }

    /// Metrics not exported anywhere (tests, embedders without a registry).
    pub fn unregistered() -> Self {
        NriTelemetry {
            connected: Gauge::default(),
            state: Family::default(),
            requests: Family::default(),
            decide_seconds: Histogram::new(exponential_buckets(0.00001, 4.0, 10)),
            reconnects: Counter::default(),
        }
    }

    pub(super) fn set_state(&self, state: ConnectionState, publish: &watch::Sender<ConnectionState>) {
        for s in ConnectionState::ALL {
            self.state
                .get_or_create(&vec![("state".to_string(), s.as_str().to_string())])
                .set(i64::from(s == state));
        }
        self.connected
            .set(i64::from(state == ConnectionState::Registered));
        publish.send_replace(state);
    }

    pub(super) fn count(&self, event: &str, result: &str) {
        self.requests
            .get_or_create(&vec![
                ("event".to_string(), event.to_string()),
                ("result".to_string(), result.to_string()),
            ])
            .inc();
    }
}
