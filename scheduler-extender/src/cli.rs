//! Command-line flags; each is also an environment variable (`KOORD_SCHEDULER_EXTENDER_*`; the
//! unprefixed names of earlier releases still work, see [`upstream`]).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use koord_runtime::LogFormat;

pub mod upstream;
pub use upstream::parse;

/// koord-scheduler-extender: a kube-scheduler extender that places BE pods by batch headroom
/// and real load, and spreads other pods by real load (upstream LoadAware's rules).
#[derive(Parser, Debug, Clone)]
#[command(name = "koord-scheduler-extender", version, about, long_about = None)]
pub struct Cli {
    /// Kubeconfig file; default: in-cluster config, else the default kubeconfig.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// HTTPS port of the extender API (`/filter`, `/prioritize`).
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_PORT", default_value_t = 9443)]
    pub port: u16,
    /// Address the HTTPS listener binds.
    #[arg(
        long,
        env = "KOORD_SCHEDULER_EXTENDER_BIND_ADDRESS",
        default_value = "0.0.0.0"
    )]
    pub bind_address: IpAddr,
    /// Directory with the serving certificate (`tls.crt`, `tls.key`), re-read on change.
    #[arg(
        long,
        env = "KOORD_SCHEDULER_EXTENDER_CERT_DIR",
        default_value = "/etc/koordinator/scheduler-extender-certs"
    )]
    pub cert_dir: PathBuf,
    /// How often the certificate directory is re-read (Go duration, e.g. `60s`).
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_CERT_SYNC_INTERVAL", value_parser = koord_runtime::parse_interval, default_value = "60s")]
    pub cert_sync_interval: Duration,
    /// `/healthz` and `/readyz` (plain HTTP); `:PORT` is every interface.
    #[arg(
        long,
        visible_alias = "health-probe-addr",
        env = "KOORD_SCHEDULER_EXTENDER_HEALTH_ADDR",
        default_value = "0.0.0.0:8000",
        value_parser = koord_runtime::parse_listen_addr
    )]
    pub health_addr: SocketAddr,
    /// Prometheus `/metrics` (plain HTTP; may equal `--health-addr`); `:PORT` is every interface.
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_METRICS_ADDR", default_value = "0.0.0.0:8080", value_parser = koord_runtime::parse_listen_addr)]
    pub metrics_addr: SocketAddr,
    /// Namespace of the slo-controller-config ConfigMap (each node's `degradeTimeMinutes`).
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_CONFIG_NAMESPACE", default_value = koord_api::names::DEFAULT_CONFIG_NAMESPACE)]
    pub config_namespace: String,
    /// Name of the SLO ConfigMap.
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_SLO_CONFIG_NAME", default_value = koord_api::names::DEFAULT_SLO_CONFIG_NAME)]
    pub slo_config_name: String,
    /// Non-BE pods avoid nodes whose CPU usage is above this percent of allocatable (upstream
    /// LoadAware `usageThresholds.cpu`; 0 turns the check off).
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_CPU_USAGE_THRESHOLD_PERCENT", default_value_t = 65, value_parser = clap::value_parser!(i64).range(0..=100))]
    pub cpu_usage_threshold_percent: i64,
    /// Same for memory (upstream: 95).
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_MEMORY_USAGE_THRESHOLD_PERCENT", default_value_t = 95, value_parser = clap::value_parser!(i64).range(0..=100))]
    pub memory_usage_threshold_percent: i64,
    /// A NodeMetric older than this is not used to judge load (upstream
    /// `nodeMetricExpirationSeconds`: 180 s).
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_NODE_METRIC_EXPIRATION", value_parser = koord_runtime::parse_interval, default_value = "180s")]
    pub node_metric_expiration: Duration,
    /// Weight of CPU in every score (upstream `resourceWeights.cpu`).
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_CPU_WEIGHT", default_value_t = 1, value_parser = clap::value_parser!(i64).range(0..=100))]
    pub cpu_weight: i64,
    /// Weight of memory in every score.
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_MEMORY_WEIGHT", default_value_t = 1, value_parser = clap::value_parser!(i64).range(0..=100))]
    pub memory_weight: i64,
    /// Weight of remaining batch capacity in a BE pod's score.
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_BATCH_HEADROOM_WEIGHT", default_value_t = 2, value_parser = clap::value_parser!(i64).range(0..=100))]
    pub batch_headroom_weight: i64,
    /// Weight of real node load in a BE pod's score.
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_LOAD_WEIGHT", default_value_t = 1, value_parser = clap::value_parser!(i64).range(0..=100))]
    pub load_weight: i64,
    /// Share of its CPU request a new pod is expected to use until it shows in the NodeMetric
    /// (upstream `estimatedScalingFactors.cpu`).
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_CPU_ESTIMATE_PERCENT", default_value_t = 85, value_parser = clap::value_parser!(i64).range(0..=100))]
    pub cpu_estimate_percent: i64,
    /// Same for memory (upstream: 70).
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_MEMORY_ESTIMATE_PERCENT", default_value_t = 70, value_parser = clap::value_parser!(i64).range(0..=100))]
    pub memory_estimate_percent: i64,
    /// Log line format.
    #[arg(long, env = "KOORD_SCHEDULER_EXTENDER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// klog verbosity (`--v=4`); see `koord_runtime::verbosity_filter`.
    #[arg(long = "v", value_name = "N", help = koord_runtime::VERBOSITY_HELP)]
    pub verbosity: Option<u8>,
}

impl Cli {
    /// The decision policy the flags describe.
    pub fn policy(&self) -> crate::decide::Policy {
        crate::decide::Policy {
            usage_thresholds: crate::decide::Percentages {
                cpu: self.cpu_usage_threshold_percent,
                memory: self.memory_usage_threshold_percent,
            },
            resource_weights: crate::decide::Percentages {
                cpu: self.cpu_weight,
                memory: self.memory_weight,
            },
            metric_expiration: jiff::SignedDuration::try_from(self.node_metric_expiration)
                .unwrap_or(jiff::SignedDuration::MAX),
            headroom_weight: self.batch_headroom_weight,
            load_weight: self.load_weight,
        }
    }

    /// The usage estimation the flags describe.
    pub fn scaling_factors(&self) -> crate::facts::ScalingFactors {
        crate::facts::ScalingFactors {
            cpu: self.cpu_estimate_percent,
            memory: self.memory_estimate_percent,
        }
    }
}
