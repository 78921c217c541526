//! Command-line flags; each is also an environment variable (`KOORD_MANAGER_*`). Upstream
//! koord-manager's spellings are accepted too: see [`upstream`].

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use koord_runtime::LogFormat;

pub mod upstream;
pub use upstream::parse;

/// koord-manager: NodeSLO, NodeMetric and batch-resource controllers.
#[derive(Parser, Debug)]
#[command(name = "koord-manager", version, about, long_about = None)]
pub struct Cli {
    /// An offline command; without one, the manager runs.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Flags of the running manager.
    #[command(flatten)]
    pub run: RunArgs,
}

/// Offline commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Compute batch resources from Nodes, Pods, NodeMetrics and the ConfigMap in a YAML file,
    /// without a cluster; prints JSON.
    Calc(CalcArgs),
}

/// `calc` flags.
#[derive(Args, Debug)]
pub struct CalcArgs {
    /// Multi-document YAML (or a `kind: List`); `-` reads stdin.
    #[arg(short = 'f', long = "file")]
    pub file: String,
    /// The time NodeMetric staleness is judged at (RFC 3339); default: now.
    #[arg(long)]
    pub now: Option<String>,
}

/// A controller that `--controllers` can enable.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControllerName {
    /// One NodeSLO per Node.
    Nodeslo,
    /// One NodeMetric per Node.
    Nodemetric,
    /// Batch resources in Node status.
    Noderesource,
}

/// Flags of the running manager.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Kubeconfig file; default: in-cluster config, else the default kubeconfig.
    #[arg(long, env = "KUBECONFIG", global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the slo-controller-config ConfigMap (and of the leader Lease unless
    /// --leader-election-namespace says otherwise).
    #[arg(long, env = "KOORD_MANAGER_CONFIG_NAMESPACE", default_value = koord_api::names::DEFAULT_CONFIG_NAMESPACE)]
    pub config_namespace: String,
    /// Name of the SLO ConfigMap.
    #[arg(long, env = "KOORD_MANAGER_SLO_CONFIG_NAME", default_value = koord_api::names::DEFAULT_SLO_CONFIG_NAME)]
    pub slo_config_name: String,
    /// Controllers to run, comma-separated.
    #[arg(
        long,
        env = "KOORD_MANAGER_CONTROLLERS",
        value_enum,
        value_delimiter = ',',
        default_value = "nodeslo,nodemetric,noderesource"
    )]
    pub controllers: Vec<ControllerName>,
    /// Elect a leader through Lease `koordinator-manager`; only the leader writes. Alone means
    /// true.
    #[arg(
        long,
        visible_alias = "enable-leader-election",
        env = "KOORD_MANAGER_LEADER_ELECT",
        default_value = "true",
        num_args = 0..=1,
        default_missing_value = "true",
        action = ArgAction::Set,
        value_parser = koord_runtime::parse_go_bool
    )]
    pub leader_elect: bool,
    /// Namespace of the leader Lease; default: --config-namespace.
    #[arg(long, env = "KOORD_MANAGER_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Lease duration: a stopped leader is replaced within this time. Whole seconds (`30`) or a
    /// Go duration (`30s`, `1m`); the Lease holds whole seconds.
    #[arg(
        long = "lease-duration-seconds",
        env = "KOORD_MANAGER_LEASE_DURATION_SECONDS",
        value_parser = koord_runtime::parse_interval,
        default_value = "30"
    )]
    pub lease_duration: Duration,
    /// Identity in the Lease; default: the hostname (the pod name in a cluster).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Address of /metrics (also serves /healthz and /readyz); `:PORT` is every interface.
    #[arg(long, env = "KOORD_MANAGER_METRICS_ADDR", default_value = "0.0.0.0:8080", value_parser = koord_runtime::parse_listen_addr)]
    pub metrics_addr: SocketAddr,
    /// Address of /healthz and /readyz (also serves /metrics); `:PORT` is every interface.
    #[arg(
        long,
        visible_alias = "health-probe-addr",
        env = "KOORD_MANAGER_HEALTH_ADDR",
        default_value = "0.0.0.0:8000",
        value_parser = koord_runtime::parse_listen_addr
    )]
    pub health_addr: SocketAddr,
    /// Log format.
    #[arg(
        long,
        env = "KOORD_MANAGER_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,
    #[arg(long = "v", value_name = "N", global = true, help = koord_runtime::VERBOSITY_HELP)]
    /// klog verbosity (`--v=4`); see `koord_runtime::verbosity_filter`.
    pub verbosity: Option<u8>,
    /// Time between re-checks of a node's batch resources without events (staleness). Whole
    /// seconds (`60`) or a Go duration (`1m`, `1m30s`).
    #[arg(
        long = "resync-seconds",
        env = "KOORD_MANAGER_RESYNC_SECONDS",
        value_parser = koord_runtime::parse_interval,
        default_value = "60"
    )]
    pub resync: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_flags_take_seconds_or_go_durations() {
        let cli = Cli::try_parse_from([
            "koord-manager",
            "--resync-seconds=1m30s",
            "--lease-duration-seconds=15",
        ])
        .unwrap();
        assert_eq!(cli.run.resync, Duration::from_secs(90));
        assert_eq!(cli.run.lease_duration, Duration::from_secs(15));
        let defaults = Cli::try_parse_from(["koord-manager"]).unwrap();
        assert_eq!(defaults.run.resync, Duration::from_secs(60));
        assert_eq!(defaults.run.lease_duration, Duration::from_secs(30));
        let err = Cli::try_parse_from(["koord-manager", "--resync-seconds=1x"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown unit \"x\""), "{err}");
    }
}
