//! Command line: the agent's flags (each also an environment variable, `KOORDLET_*`) and the
//! `plan` command. Upstream koordlet's spellings are accepted too: see [`upstream`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser, Subcommand, ValueEnum};
use koord_runtime::LogFormat;

pub mod upstream;
pub use upstream::parse;

/// koordlet: the Koordinator node agent (metrics, NodeMetric reporting, BE cgroup limits).
#[derive(Debug, Parser)]
#[command(name = "koordlet", version)]
pub struct Args {
    /// Offline commands; without one, the agent runs.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Agent flags.
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Which cgroup driver the kubelet uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DriverArg {
    /// Detect from the tree (`kubepods.slice` means systemd).
    Auto,
    /// `kubepods/burstable/pod<uid>`.
    Cgroupfs,
    /// `kubepods.slice/kubepods-burstable.slice/...`.
    Systemd,
}

/// Where pods come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PodsSource {
    /// The kubelet's `/pods` (the node's own view, as upstream).
    Kubelet,
    /// An API server watch with `spec.nodeName=<node>`.
    Apiserver,
}

/// Cgroup version for `plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VersionArg {
    /// cgroup v1 file names and values.
    V1,
    /// cgroup v2 file names and values.
    V2,
}

/// Offline commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the decisions for a node described in YAML (Node, Pods, NodeSLO, NodeMetric) as JSON.
    Plan(PlanArgs),
}

/// The `plan` command's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct PlanArgs {
    /// Input file, `-` for stdin.
    #[arg(short = 'f', long = "file")]
    pub file: String,
    /// cgroup version to print file names and values for.
    #[arg(long, value_enum, default_value = "v1")]
    pub cgroup_version: VersionArg,
    /// The kubelet's cgroup driver.
    #[arg(long, value_enum, default_value = "cgroupfs")]
    pub cgroup_driver: DriverArg,
    /// Read current values from this cgroup tree (real or fake).
    #[arg(long)]
    pub cgroup_root: Option<PathBuf>,
    /// Feature gates, as for the agent (`BEMemoryEvict=true,BECPUEvict=true`).
    #[arg(long, default_value = "")]
    pub feature_gates: String,
    /// Plan resctrl schemata from this resctrl tree (real or fake); without it resctrl is skipped.
    #[arg(long)]
    pub resctrl_root: Option<PathBuf>,
    /// Read current sysctl values from this `/proc/sys` tree (real or fake); without it a
    /// mainline kernel's defaults are assumed.
    #[arg(long)]
    pub proc_sys_root: Option<PathBuf>,
    /// With `--proc-sys-root`: the `/sys` tree (for `memcg_reaper`).
    #[arg(long)]
    pub sys_root: Option<PathBuf>,
}

/// The agent's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// This node's name.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// kubeconfig file (default: in-cluster config, then ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// cgroup mount root.
    #[arg(
        long,
        visible_alias = "cgroup-root-dir",
        env = "KOORDLET_CGROUP_ROOT",
        default_value = "/sys/fs/cgroup"
    )]
    pub cgroup_root: PathBuf,
    /// procfs root.
    #[arg(
        long,
        visible_alias = "proc-root-dir",
        env = "KOORDLET_PROC_ROOT",
        default_value = "/proc"
    )]
    pub proc_root: PathBuf,
    /// sysfs root.
    #[arg(
        long,
        visible_alias = "sys-root-dir",
        env = "KOORDLET_SYS_ROOT",
        default_value = "/sys"
    )]
    pub sys_root: PathBuf,
    /// The `/proc/sys` root system_config writes sysctls below.
    #[arg(long, env = "KOORDLET_PROC_SYS_ROOT", default_value = "/proc/sys")]
    pub proc_sys_root: PathBuf,
    /// Node-local state directory (the sysctl values the node had before system_config changed
    /// them, so a restart can still restore them).
    #[arg(long, env = "KOORDLET_STATE_DIR", default_value = "/var/lib/koordlet")]
    pub state_dir: PathBuf,
    /// resctrl mount (gate RdtResctrl: per-class cache and memory bandwidth groups). Upstream's
    /// `--sys-fs-root-dir=DIR` sets it to `DIR/resctrl`.
    #[arg(long, env = "KOORDLET_RESCTRL_ROOT", default_value = "/sys/fs/resctrl")]
    pub resctrl_root: PathBuf,
    /// Mount resctrl at `--resctrl-root` when the CPU supports it and it is not mounted
    /// (otherwise an unmounted resctrl turns the feature off).
    #[arg(long, env = "KOORDLET_MOUNT_RESCTRL", num_args = 0..=1, default_value = "false", default_missing_value = "true", action = ArgAction::Set, value_parser = koord_runtime::parse_go_bool)]
    pub mount_resctrl: bool,
    /// The kubelet's root dir, read-only: its `cpu_manager_state` tells whether the kubelet runs
    /// the static CPU manager (then CPU set policies are refused and cpu suppress narrows BE
    /// containers only).
    #[arg(
        long,
        visible_alias = "var-lib-kubelet-dir",
        env = "KOORDLET_KUBELET_ROOT_DIR",
        default_value = "/var/lib/kubelet"
    )]
    pub kubelet_root_dir: PathBuf,
    /// Where the CPU set policy allocations are kept, so a restart keeps every pinned container
    /// on its CPUs (node-local; created on the first allocation).
    #[arg(
        long,
        env = "KOORDLET_CPUSET_STATE_FILE",
        default_value = "/var/lib/koordlet/cpuset-policy-state.json"
    )]
    pub cpuset_state_file: PathBuf,
    /// The container runtime's NRI socket. When it exists, koordlet registers there and sets a
    /// BE container's batch CPU and memory limits before the container starts.
    #[arg(long, env = "KOORDLET_NRI_SOCKET", default_value = crate::nri::DEFAULT_SOCKET)]
    pub nri_socket: PathBuf,
    /// Runtime hooks over NRI (upstream's `RuntimeHooksNRI`); with `false` only the reconcile
    /// loop applies BE limits.
    #[arg(long, env = "KOORDLET_ENABLE_NRI_RUNTIME_HOOK", default_value = "true", num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set, value_parser = koord_runtime::parse_go_bool)]
    pub enable_nri_runtime_hook: bool,
    /// The kubelet's cgroup driver.
    #[arg(long, env = "KOORDLET_CGROUP_DRIVER", value_enum, default_value = "auto")]
    pub cgroup_driver: DriverArg,
    /// Where pods come from.
    #[arg(long, env = "KOORDLET_PODS_SOURCE", value_enum, default_value = "kubelet")]
    pub pods_source: PodsSource,
    /// Kubelet base URL (https with the service-account token, or http).
    #[arg(long, env = "KOORDLET_KUBELET_URL", default_value = crate::states::sources::DEFAULT_KUBELET_URL)]
    pub kubelet_url: String,
    /// Time between two collection rounds (and BE limit reconciliations).
    #[arg(long, visible_alias = "collect-res-used-interval", env = "KOORDLET_COLLECT_INTERVAL", default_value = "1s", value_parser = parse_interval)]
    pub collect_interval: Duration,
    /// Tick of the fast CPU suppress loop (gate BECPUSuppress, policy cfsQuota): how often the
    /// node, kubepods and besteffort CPU counters are read and the besteffort quota adjusted.
    /// An LS spike lowers the BE quota within about two ticks.
    #[arg(long, env = "KOORDLET_SUPPRESS_INTERVAL", default_value = "50ms", value_parser = parse_suppress_interval)]
    pub suppress_interval: Duration,
    /// How often the node's CPU facts are detected again and compared with its
    /// NodeResourceTopology's `node.koordinator.sh/cpu-basic-info` (gate NodeTopologyReport):
    /// one small GET per round, a write only when the value differs.
    #[arg(long, env = "KOORDLET_NODE_TOPOLOGY_REPORT_INTERVAL", default_value = "60s", value_parser = parse_interval)]
    pub node_topology_report_interval: Duration,
    /// Peak prediction: a pod created less than this ago adds nothing to the pod predictor of
    /// `prodReclaimableMetric` (its usage is not known well enough yet).
    #[arg(long, env = "KOORDLET_PREDICTION_COLD_START_DURATION", default_value = "24h", value_parser = parse_any_duration)]
    pub prediction_cold_start_duration: Duration,
    /// Peak prediction: predicted peaks (p95 CPU, p98 memory) are raised by this percentage
    /// before what is left of the requests counts as reclaimable.
    #[arg(long, env = "KOORDLET_PREDICTION_SAFETY_MARGIN_PERCENT", default_value = "10")]
    pub prediction_safety_margin_percent: u32,
    /// Peak prediction: half-life of the CPU usage histograms (a sample this much older counts
    /// half).
    #[arg(long, env = "KOORDLET_PREDICTION_CPU_HISTOGRAM_DECAY_HALFLIFE", default_value = "12h", value_parser = parse_positive_duration)]
    pub prediction_cpu_histogram_decay_halflife: Duration,
    /// Peak prediction: half-life of the memory usage histograms.
    #[arg(long, env = "KOORDLET_PREDICTION_MEMORY_HISTOGRAM_DECAY_HALFLIFE", default_value = "24h", value_parser = parse_positive_duration)]
    pub prediction_memory_histogram_decay_halflife: Duration,
    /// Peak prediction: time between two trainings (each model gets its newest usage sample)
    /// and predictions.
    #[arg(long, env = "KOORDLET_PREDICTION_TRAINING_INTERVAL", default_value = "1m", value_parser = parse_interval)]
    pub prediction_training_interval: Duration,
    /// Peak prediction: a model without a new sample for this long (its pod is gone) is dropped.
    #[arg(long, env = "KOORDLET_PREDICTION_MODEL_EXPIRATION_DURATION", default_value = "30m", value_parser = parse_positive_duration)]
    pub prediction_model_expiration_duration: Duration,
    /// Peak prediction: directory of the model checkpoint (one file, `prediction-models.json`,
    /// replaced atomically); loaded at start so a restart keeps the learnt peaks.
    #[arg(
        long,
        env = "KOORDLET_PREDICTION_CHECKPOINT_FILEPATH",
        default_value = "/prediction-checkpoints"
    )]
    pub prediction_checkpoint_filepath: PathBuf,
    /// Peak prediction: time between two checkpoints.
    #[arg(long, env = "KOORDLET_PREDICTION_MODEL_CHECKPOINT_INTERVAL", default_value = "10m", value_parser = parse_positive_duration)]
    pub prediction_model_checkpoint_interval: Duration,
    /// Feature gates, `Name=true|false,...` (upstream names and defaults).
    #[arg(long, env = "KOORDLET_FEATURE_GATES", default_value = "", long_help = koordlet_core::features::HELP)]
    pub feature_gates: String,
    /// Decide and log, write nothing.
    #[arg(long, env = "KOORDLET_DRY_RUN", num_args = 0..=1, default_value = "false", default_missing_value = "true", action = ArgAction::Set, value_parser = koord_runtime::parse_go_bool)]
    pub dry_run: bool,
    /// When the Eviction API refuses an eviction (429: a PodDisruptionBudget) or cannot be
    /// reached: `none` reports the failure and decides again next round; `delete` deletes the
    /// pod (ignores PDBs); `kill-containers` SIGKILLs the pod's container processes through
    /// their cgroups (upstream's default; works without the API server).
    #[arg(long, env = "KOORDLET_EVICTION_FALLBACK", value_enum, default_value = "none")]
    pub eviction_fallback: crate::evict_fallback::EvictionFallback,
    /// Most cgroup files the collectors keep open between rounds (each costs one descriptor and
    /// ~4.4 KiB of kernel memory; 12 per pod). Only lowers the default: half the raised
    /// `RLIMIT_NOFILE` soft limit, at most 8192. 0 opens and closes every file every round.
    #[arg(long, env = "KOORDLET_MAX_KEPT_CGROUP_FILES")]
    pub max_kept_cgroup_files: Option<usize>,
    /// Prometheus `/metrics` address (served with the health endpoints when equal); `:PORT` is
    /// every interface. Upstream's `--addr` sets it and --health-addr.
    #[arg(long, env = "KOORDLET_METRICS_ADDR", default_value = "0.0.0.0:9316", value_parser = koord_runtime::parse_listen_addr)]
    pub metrics_addr: SocketAddr,
    /// `/healthz` and `/readyz` address; `:PORT` is every interface.
    #[arg(long, env = "KOORDLET_HEALTH_ADDR", default_value = "0.0.0.0:9316", value_parser = koord_runtime::parse_listen_addr)]
    pub health_addr: SocketAddr,
    /// Log format.
    #[arg(long, env = "KOORDLET_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// klog verbosity (`--v=4`); see `koord_runtime::verbosity_filter`.
    #[arg(long = "v", value_name = "N", help = koord_runtime::VERBOSITY_HELP)]
    pub verbosity: Option<u8>,
}

/// A duration flag outside what the loop it paces accepts.
#[derive(Debug, thiserror::Error)]
pub enum IntervalError {
    /// Not a duration (`1s`, `500ms`, `1m30s`, or whole seconds).
    #[error(transparent)]
    Syntax(#[from] koord_runtime::DurationError),
    /// Below the loop's floor or above its ceiling.
    #[error("must be {0}")]
    OutOfRange(&'static str),
}

/// Parses the collect interval (at least 100 ms).
fn parse_interval(text: &str) -> Result<Duration, IntervalError> {
    let d = koord_runtime::parse_duration(text)?;
    if d < Duration::from_millis(100) {
        return Err(IntervalError::OutOfRange("at least 100ms"));
    }
    Ok(d)
}

/// Parses any duration, zero included.
fn parse_any_duration(text: &str) -> Result<Duration, IntervalError> {
    Ok(koord_runtime::parse_duration(text)?)
}

/// Parses a duration above zero.
fn parse_positive_duration(text: &str) -> Result<Duration, IntervalError> {
    let d = koord_runtime::parse_duration(text)?;
    if d.is_zero() {
        return Err(IntervalError::OutOfRange("above zero"));
    }
    Ok(d)
}

/// Parses the suppress tick (10 ms to 10 s).
fn parse_suppress_interval(text: &str) -> Result<Duration, IntervalError> {
    let d = koord_runtime::parse_duration(text)?;
    if d < Duration::from_millis(10) || d > Duration::from_secs(10) {
        return Err(IntervalError::OutOfRange("between 10ms and 10s"));
    }
    Ok(d)
}
