//! Command-line flags; each is also an environment variable.

use std::{net::SocketAddr, path::PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};
use koord_runtime::LogFormat;

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
    /// Namespace of the slo-controller-config ConfigMap and of the leader Lease.
    #[arg(long, env = "KOORD_CONFIG_NAMESPACE", default_value = koord_api::names::DEFAULT_CONFIG_NAMESPACE)]
    pub config_namespace: String,
    /// Name of the SLO ConfigMap.
    #[arg(long, env = "KOORD_SLO_CONFIG_NAME", default_value = koord_api::names::DEFAULT_SLO_CONFIG_NAME)]
    pub slo_config_name: String,
    /// Controllers to run, comma-separated.
    #[arg(
        long,
        env = "KOORD_CONTROLLERS",
        value_enum,
        value_delimiter = ',',
        default_value = "nodeslo,nodemetric,noderesource"
    )]
    pub controllers: Vec<ControllerName>,
    /// Elect a leader through Lease `koordinator-manager`; only the leader writes.
    #[arg(long, env = "KOORD_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Lease duration in seconds (a stopped leader is replaced within this time).
    #[arg(long, env = "KOORD_LEASE_DURATION_SECONDS", default_value_t = 30)]
    pub lease_duration_seconds: u64,
    /// Identity in the Lease; default: the hostname (the pod name in a cluster).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Address of /metrics (also serves /healthz and /readyz).
    #[arg(long, env = "KOORD_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Address of /healthz and /readyz (also serves /metrics).
    #[arg(long, env = "KOORD_HEALTH_ADDR", default_value = "0.0.0.0:8000")]
    pub health_addr: SocketAddr,
    /// Log format.
    #[arg(
        long,
        env = "KOORD_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,
    /// Seconds between re-checks of a node's batch resources without events (staleness).
    #[arg(long, env = "KOORD_RESYNC_SECONDS", default_value_t = 60)]
    pub resync_seconds: u64,
}
