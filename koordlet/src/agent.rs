//! The live agent: sources fill the snapshot; one loop per collect interval collects metrics
//! and reconciles BE limits through the executor; another reports NodeMetric status, another
//! the node's NodeResourceTopology.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use tokio::sync::{Mutex, watch};
use tracing::{error, info, warn};

use crate::cli::{AgentArgs, DriverArg, PodsSource};
use crate::evictor::Evictor;
use crate::executor::{Executor, ExecutorConfig};
use crate::metrics::clock::MetricClock;
use crate::metrics::collector::{Collector, Stores};
use crate::metrics::{MetricKind, SeriesKey};
use crate::qos_loop::{QosEdges, QosLoop, QosLoopConfig};
use crate::report::{self, ReportInput};
use crate::states::{Snapshot, sources};
use crate::system::{CgroupDriver, Cgroups, KubeCgroupPaths, SystemRoots};
use crate::telemetry::Telemetry;
use koordlet_core::features::FeatureGates;

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// `--node-name` / `NODE_NAME` missing.
    #[error("--node-name (or NODE_NAME) is required")]
    NoNodeName,
    /// Bad feature gates.
    #[error(transparent)]
    FeatureGates(#[from] koordlet_core::features::FeatureGateError),
    /// Cgroup layout detection failed.
    #[error("cgroup layout: {0}")]
    Cgroups(#[from] crate::system::SystemError),
    /// No usable kubeconfig.
    #[error("kubernetes client: {0}")]
    Kubeconfig(#[from] koord_runtime::KubeconfigError),
    /// The client could not be built from the configuration.
    #[error("kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// Kubelet client.
    #[error(transparent)]
    Kubelet(#[from] crate::states::StatesError),
    /// Admin endpoint.
    #[error("admin endpoint: {0}")]
    Admin(#[from] std::io::Error),
}

/// What the agent runs with, resolved from its flags (or built directly by an embedder).
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// This node's name.
    pub node: String,
    /// Feature gates.
    pub gates: FeatureGates,
    /// Where the host's kernel interfaces are mounted.
    pub roots: SystemRoots,
    /// Lowers the budget of kept-open cgroup files.
    pub max_kept_cgroup_files: Option<usize>,
    /// The kubelet's cgroup driver; `None` detects it from the tree.
    pub cgroup_driver: Option<CgroupDriver>,
    /// Where pods come from.
    pub pods: PodsFrom,
    /// The kubeconfig file; `None` infers (in-cluster, then the default file).
    pub kubeconfig: Option<PathBuf>,
    /// Collection and QoS round period.
    pub collect_interval: Duration,
    /// Fast CPU suppress tick.
    pub suppress_interval: Duration,
    /// Period of the NodeResourceTopology report (gate NodeTopologyReport).
    pub node_topology_report_interval: Duration,
    /// Decide and log, write and evict nothing.
    pub dry_run: bool,
    /// Mount resctrl when it is supported and not mounted.
    pub mount_resctrl: bool,
    /// The kubelet's root dir (its `cpu_manager_state`).
    pub kubelet_root_dir: PathBuf,
    /// The CPU set policy state file.
    pub cpuset_state_file: PathBuf,
    /// `/proc/sys` root for system_config.
    pub proc_sys_root: PathBuf,
    /// Node-local state directory.
    pub state_dir: PathBuf,
    /// What the evictor does when the Eviction API refuses or cannot be reached.
    pub eviction_fallback: crate::evict_fallback::EvictionFallback,
    /// The runtime's NRI socket; `None` turns the runtime hooks off.
    pub nri_socket: Option<PathBuf>,
    /// Prometheus `/metrics` address.
    pub metrics_addr: SocketAddr,
    /// `/healthz` and `/readyz` address.
    pub health_addr: SocketAddr,
    /// Peak prediction (`prodReclaimableMetric`, `prodPeakMetric`).
    pub prediction: crate::prediction::PredictionSettings,
}

/// Where the agent's pod list comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodsFrom {
    /// The kubelet's `/pods` at this base URL.
    Kubelet(String),
    /// An API server watch on `spec.nodeName`.
    Apiserver,
}

impl AgentSettings {
    /// Resolves the flags: the node name must be set and the feature gates must parse.
    pub fn from_args(args: &AgentArgs) -> Result<Self, AgentError> {
        let node = args
            .node_name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or(AgentError::NoNodeName)?;
        Ok(AgentSettings {
            node,
            gates: FeatureGates::parse(&args.feature_gates)?,
            roots: SystemRoots {
                cgroup: args.cgroup_root.clone(),
                proc: args.proc_root.clone(),
                sys: args.sys_root.clone(),
                resctrl: args.resctrl_root.clone(),
            },
            max_kept_cgroup_files: args.max_kept_cgroup_files,
            cgroup_driver: match args.cgroup_driver {
                DriverArg::Auto => None,
                DriverArg::Cgroupfs => Some(CgroupDriver::Cgroupfs),
                DriverArg::Systemd => Some(CgroupDriver::Systemd),
            },
            pods: match args.pods_source {
                PodsSource::Kubelet => PodsFrom::Kubelet(args.kubelet_url.clone()),
                PodsSource::Apiserver => PodsFrom::Apiserver,
            },
            kubeconfig: args.kubeconfig.clone(),
            collect_interval: args.collect_interval,
            suppress_interval: args.suppress_interval,
            node_topology_report_interval: args.node_topology_report_interval,
            dry_run: args.dry_run,
            mount_resctrl: args.mount_resctrl,
            kubelet_root_dir: args.kubelet_root_dir.clone(),
            cpuset_state_file: args.cpuset_state_file.clone(),
            eviction_fallback: args.eviction_fallback,
            proc_sys_root: args.proc_sys_root.clone(),
            state_dir: args.state_dir.clone(),
            nri_socket: args.enable_nri_runtime_hook.then(|| args.nri_socket.clone()),
            metrics_addr: args.metrics_addr,
            health_addr: args.health_addr,
            prediction: crate::prediction::PredictionSettings {
                predict: koordlet_core::prediction::PredictSettings {
                    cold_start: args.prediction_cold_start_duration,
                    safety_margin_percent: args.prediction_safety_margin_percent,
                },
                cpu_half_life: args.prediction_cpu_histogram_decay_halflife,
                memory_half_life: args.prediction_memory_histogram_decay_halflife,
                training_interval: args.prediction_training_interval,
                model_expiration: args.prediction_model_expiration_duration,
                checkpoint_path: args
                    .prediction_checkpoint_filepath
                    .join(crate::prediction::checkpoint::FILE_NAME),
                checkpoint_interval: args.prediction_model_checkpoint_interval,
            },
        })
    }
}

/// Runs the agent with command-line `args` until `shutdown` resolves.
pub async fn run_agent(
    args: AgentArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AgentError> {
    run(AgentSettings::from_args(&args)?, shutdown).await
}

/// Runs the agent until `shutdown` resolves: opens the node's cgroups, serves the admin
/// endpoints, connects to the API server, then runs the sources, the fast suppress loop, the
/// collection + QoS round, the NodeMetric report and the NodeResourceTopology report as tasks.
pub async fn run(
    settings: AgentSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AgentError> {
    let (cgroups, paths) = open_cgroups(&settings)?;
    info!(node = settings.node, version = ?cgroups.version(), driver = ?paths.driver,
          dry_run = settings.dry_run, "koordlet starting");

    let mut root_registry = Registry::default();
    koord_runtime::register_standard_metrics(&mut root_registry, "koordlet", env!("CARGO_PKG_VERSION"));
    let registry = root_registry.sub_registry_with_prefix("koordlet");
    let telemetry = Telemetry::register(registry, &settings.node);
    telemetry.upstream.record_start(unix_now_seconds());
    telemetry.record_feature_gates(&settings.gates);
    let without_effect = settings.gates.enabled_without_effect();
    if !without_effect.is_empty() {
        warn!(gates = %without_effect.join(", "), "feature gates enabled that do nothing in this koordlet");
    }
    let suppress_metrics = crate::suppress_loop::SuppressMetrics::register(registry, telemetry.clone());
    let readiness = koord_runtime::Readiness::default();
    readiness.register("pods");
    let nri_telemetry = crate::nri::NriTelemetry::register(registry);
    let prediction_telemetry =
        crate::prediction::PredictionTelemetry::register(registry, telemetry.upstream.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let admin = serve_admin(&settings, Arc::new(root_registry), &readiness, &stop_rx).await?;

    let (client, evict_client) = connect(&settings).await?;
    let (snap_tx, snap_rx) = watch::channel(Snapshot::default());
    let mut tasks = tokio::task::JoinSet::new();
    spawn_sources(&mut tasks, &settings, &client, &snap_tx)?;
    // The QoS round keeps the fast loop's cpuset scope (BE tree, CPU pools) fresh.
    let (scope_tx, scope_rx) = watch::channel(None);
    spawn_fast_suppress(
        &mut tasks,
        &settings,
        &cgroups,
        &paths,
        suppress_metrics,
        scope_rx,
        &snap_rx,
    );
    let stores = Arc::new(Mutex::new(Stores::default()));
    let edges = QosEdges {
        cgroups: cgroups.clone(),
        paths: paths.clone(),
        topology: crate::gather::read_topology(&settings.roots.sys),
        executor: Executor::new(
            cgroups.clone(),
            ExecutorConfig {
                dry_run: settings.dry_run,
                ..ExecutorConfig::default()
            },
        ),
        evictor: Evictor::new(evict_client, &settings.node, settings.dry_run, telemetry.clone())
            .with_fallback(
                settings.eviction_fallback,
                crate::evict_fallback::ContainerKiller::new(cgroups.clone(), paths.clone()),
            ),
        telemetry: telemetry.clone(),
    };
    let (runtime_cpusets_tx, runtime_cpusets_rx) = watch::channel(None);
    let kubelet_cpu_manager = crate::cpuset_state::detect_kubelet_cpu_manager(&settings.kubelet_root_dir);
    let resctrl = crate::resctrl_loop::start(
        &settings.gates,
        &settings.roots,
        settings.mount_resctrl,
        cgroups.clone(),
        paths.clone(),
        settings.dry_run,
    );
    let rdt = crate::resctrl_loop::rdt_availability(&resctrl);
    let qos = QosLoop::new(
        QosLoopConfig {
            // The fast path owns the live cpu_suppress writes.
            apply_cpu_suppress: false,
            collect_interval: settings.collect_interval,
        },
        settings.gates.clone(),
        edges,
    )
    .with_cpuset_scope(scope_tx)
    .with_runtime_cpusets(runtime_cpusets_tx)
    .with_resctrl(resctrl.ok())
    .with_cpuset_policy(
        kubelet_cpu_manager.clone(),
        Some(crate::cpuset_state::CpusetStateFile::new(
            &settings.cpuset_state_file,
        )),
    );
    let qos = match crate::system_config::SystemConfig::open(
        crate::system_config::SystemFiles {
            proc_sys: settings.proc_sys_root.clone(),
            sys: settings.roots.sys.clone(),
        },
        &settings.state_dir,
        settings.dry_run,
    ) {
        Ok(system_config) => qos.with_system_config(system_config),
        Err(e) => {
            error!(error = %e, "system_config disabled: the node's remembered sysctl values cannot be read");
            qos
        }
    };
    let collector = Collector::new(cgroups.clone(), settings.roots.clone(), paths.clone());
    let clock = Arc::new(std::sync::Mutex::new(MetricClock::default()));
    tasks.spawn(collect_and_decide(
        collector,
        qos,
        settings.collect_interval,
        SharedMetrics {
            clock: clock.clone(),
            stores: stores.clone(),
        },
        snap_rx.clone(),
        readiness.clone(),
        telemetry.clone(),
    ));
    spawn_nri(
        &mut tasks,
        &settings,
        NriInputs {
            telemetry: nri_telemetry,
            pod_cgroups: Arc::new(crate::nri::NodePodCgroups::new(cgroups.clone(), paths.clone())),
            kubelet_static_cpu_manager: kubelet_cpu_manager.is_static(),
            runtime_cpusets: runtime_cpusets_rx,
            rdt,
        },
        &readiness,
        &snap_rx,
        &stop_rx,
    );
    spawn_topology_report(&mut tasks, &settings, &client, &telemetry);
    let (prediction_tx, prediction_rx) = watch::channel(None);
    tasks.spawn(crate::prediction::run(
        crate::prediction::PredictServer::new(settings.prediction.clone()),
        clock.clone(),
        stores.clone(),
        snap_rx.clone(),
        prediction_tx,
        prediction_telemetry,
    ));
    tasks.spawn(report_node_metric(
        client,
        settings.node.clone(),
        SharedMetrics { clock, stores },
        snap_rx,
        prediction_rx,
        telemetry,
    ));

    shutdown.await;
    info!("shutting down");
    let _ = stop_tx.send(true);
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let _ = admin.task.await;
    Ok(())
}

/// What the runtime hooks need from the rest of the agent.
struct NriInputs {
    telemetry: crate::nri::NriTelemetry,
    pod_cgroups: Arc<dyn crate::nri::PodCgroups>,
    /// The kubelet's static CPU manager owns container cpusets.
    kubelet_static_cpu_manager: bool,
    /// The CPU set policies' pools after each QoS round.
    runtime_cpusets: watch::Receiver<Option<Arc<koordlet_core::strategies::cpuset_policy::RuntimeCpusets>>>,
    /// Whether containers may start in their resctrl group (what the resctrl round found).
    rdt: crate::nri::RdtAvailability,
}

/// Starts the runtime hooks over NRI when enabled: the plugin's connection loop, and tasks that
/// keep the hooks' settings and CPU pools equal to the QoS round's (gates, NodeSLO, the CPU set
/// policies). When the socket exists at start the `nri` readiness check follows the connection.
fn spawn_nri(
    tasks: &mut tokio::task::JoinSet<()>,
    settings: &AgentSettings,
    inputs: NriInputs,
    readiness: &koord_runtime::Readiness,
    snapshots: &watch::Receiver<Snapshot>,
    stop: &watch::Receiver<bool>,
) {
    use crate::nri::{ConnectionState, HookSettings, PluginConfig, RuntimeHooks};
    use koordlet_core::strategies::engine::be_limits_settings;
    use koordlet_core::strategies::resctrl::ResctrlClasses;
    let NriInputs {
        telemetry,
        pod_cgroups,
        kubelet_static_cpu_manager,
        mut runtime_cpusets,
        rdt,
    } = inputs;
    let Some(socket) = settings.nri_socket.clone() else {
        info!("NRI runtime hooks disabled by flag");
        return;
    };
    if settings.dry_run {
        // An adjustment the runtime applies is a write: --dry-run writes nothing, so the
        // plugin does not register and containers start as the kubelet asked.
        info!("NRI runtime hooks off in --dry-run (a runtime adjustment is a write)");
        return;
    }
    let gates = settings.gates.clone();
    let decide_settings = move |snapshot: &Snapshot| HookSettings {
        batch_resource: gates.enabled("BatchResource"),
        be_limits: be_limits_settings(
            &gates,
            snapshot.node_slo.as_deref(),
            snapshot
                .node
                .as_deref()
                .map(koordlet_core::strategies::engine::cpu_normalization_of)
                .unwrap_or_default(),
        ),
        cpusets: !kubelet_static_cpu_manager,
        cpuset_allocator: gates.enabled("CPUSetAllocator"),
        resctrl: snapshot
            .node_slo
            .as_deref()
            .map(ResctrlClasses::from_slo)
            .unwrap_or_default(),
    };
    let hooks = RuntimeHooks::new(decide_settings(&snapshots.borrow()))
        .with_pod_cgroups(pod_cgroups)
        .with_rdt(rdt);
    let mut snapshots = snapshots.clone();
    let updater = hooks.clone();
    tasks.spawn(async move {
        while snapshots.changed().await.is_ok() {
            let next = decide_settings(&snapshots.borrow_and_update());
            updater.set_settings(next);
        }
    });
    let updater = hooks.clone();
    tasks.spawn(async move {
        while runtime_cpusets.changed().await.is_ok() {
            updater.set_runtime_cpusets(runtime_cpusets.borrow_and_update().clone());
        }
    });
    let expected = socket.exists();
    if expected {
        readiness.register("nri");
    } else {
        info!(socket = %socket.display(), "NRI socket not present; koordlet connects when it appears");
    }
    let (state_tx, mut state_rx) = watch::channel(ConnectionState::Disabled);
    let readiness = readiness.clone();
    tasks.spawn(async move {
        while state_rx.changed().await.is_ok() {
            let state = *state_rx.borrow_and_update();
            if expected {
                readiness.set("nri", state == ConnectionState::Registered);
            }
        }
    });
    tasks.spawn(crate::nri::run_plugin(
        PluginConfig::new(socket),
        std::sync::Arc::new(hooks),
        telemetry,
        state_tx,
        stop.clone(),
    ));
}

/// Starts the NodeResourceTopology report when the gate NodeTopologyReport is on (the default).
fn spawn_topology_report(
    tasks: &mut tokio::task::JoinSet<()>,
    settings: &AgentSettings,
    client: &kube::Client,
    telemetry: &Telemetry,
) {
    if !settings.gates.enabled("NodeTopologyReport") {
        info!("NodeTopologyReport gate off: no NodeResourceTopology (cpu-basic-info) is reported");
        return;
    }
    tasks.spawn(report::topology::run(
        client.clone(),
        settings.node.clone(),
        settings.roots.clone(),
        settings.node_topology_report_interval,
        report::topology::Counters {
            rounds: telemetry.topology_reports.clone(),
            apply_conflicts: telemetry.apply_conflicts.clone(),
        },
    ));
}

/// Detects the cgroup layout, applies the kept-file budget and settles the kubelet's driver.
fn open_cgroups(settings: &AgentSettings) -> Result<(Arc<Cgroups>, KubeCgroupPaths), AgentError> {
    let mut cgroups = Cgroups::detect(&settings.roots)?;
    if let Some(max) = settings.max_kept_cgroup_files {
        let limit = max.min(cgroups.fd_budget().limit());
        info!(
            kept_cgroup_files = limit,
            "cgroup file-descriptor budget lowered by flag"
        );
        cgroups = cgroups.with_fd_budget(crate::system::FdBudget::new(limit));
    }
    let driver = settings.cgroup_driver.unwrap_or_else(|| {
        crate::system::detect_driver(cgroups.root(), cgroups.layout(), std::path::Path::new(""))
            .unwrap_or_else(|| {
                warn!("no kubepods cgroup found; assuming the cgroupfs driver");
                CgroupDriver::Cgroupfs
            })
    });
    Ok((Arc::new(cgroups), KubeCgroupPaths::new(driver)))
}

/// Serves `/metrics`, `/healthz` and `/readyz` (on one address or two) until `stop` is set.
async fn serve_admin(
    settings: &AgentSettings,
    registry: Arc<Registry>,
    readiness: &koord_runtime::Readiness,
    stop: &watch::Receiver<bool>,
) -> Result<koord_runtime::AdminServer, AgentError> {
    let stopped = |rx: &watch::Receiver<bool>| {
        let mut rx = rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    Ok(koord_runtime::serve_admin_pair(
        settings.health_addr,
        settings.metrics_addr,
        registry,
        readiness,
        || stopped(stop),
    )
    .await?)
}

/// The API server clients: one for watches and reports, one without retries for evictions
/// (a PDB-blocked eviction is reported at once and decided again next round).
async fn connect(settings: &AgentSettings) -> Result<(kube::Client, kube::Client), AgentError> {
    let config = koord_runtime::kube_config(settings.kubeconfig.as_deref()).await?;
    let client = kube::Client::try_from(config.clone()).map_err(AgentError::Client)?;
    let evict_client = crate::evictor::no_retry_client(config).map_err(AgentError::Client)?;
    Ok((client, evict_client))
}

/// Starts the watches on the node's objects and the pod source, all filling `snapshots`.
fn spawn_sources(
    tasks: &mut tokio::task::JoinSet<()>,
    settings: &AgentSettings,
    client: &kube::Client,
    snapshots: &watch::Sender<Snapshot>,
) -> Result<(), AgentError> {
    tasks.spawn(sources::watch_node_objects(
        client.clone(),
        settings.node.clone(),
        snapshots.clone(),
    ));
    match &settings.pods {
        PodsFrom::Kubelet(url) => {
            let kubelet =
                sources::kubelet_client(url, Some(std::path::Path::new(sources::SERVICE_ACCOUNT_TOKEN)))?;
            tasks.spawn(sources::poll_kubelet(kubelet, snapshots.clone()));
        }
        PodsFrom::Apiserver => {
            tasks.spawn(sources::watch_pods(
                client.clone(),
                settings.node.clone(),
                snapshots.clone(),
            ));
        }
    }
    Ok(())
}

/// Starts the fast CPU suppress loop; a node where it cannot start (no counters) runs without
/// it, with a warning.
fn spawn_fast_suppress(
    tasks: &mut tokio::task::JoinSet<()>,
    settings: &AgentSettings,
    cgroups: &Arc<Cgroups>,
    paths: &KubeCgroupPaths,
    metrics: crate::suppress_loop::SuppressMetrics,
    scope: watch::Receiver<Option<Arc<koordlet_core::strategies::fast_suppress::CpusetScope>>>,
    snapshots: &watch::Receiver<Snapshot>,
) {
    let config = crate::suppress_loop::node_config(
        settings.suppress_interval,
        settings.dry_run,
        &settings.roots,
        paths,
    );
    match crate::suppress_loop::SuppressLoop::new(cgroups.clone(), config, Some(metrics)) {
        Ok(fast) => {
            tasks.spawn(
                fast.with_scope_updates(scope)
                    .run(snapshots.clone(), settings.gates.clone()),
            );
        }
        Err(e) => warn!(error = %e, "fast CPU suppress loop not started"),
    }
}

/// The metric stores and the clock their samples are stamped with, shared by the collection
/// round and the NodeMetric report.
#[derive(Clone)]
struct SharedMetrics {
    clock: Arc<std::sync::Mutex<MetricClock>>,
    stores: Arc<Mutex<Stores>>,
}

/// Every `interval`: collect metrics into the stores, then run one QoS round (observe ->
/// decide -> act) on the latest snapshot.
async fn collect_and_decide(
    mut collector: Collector,
    mut qos: QosLoop,
    interval: Duration,
    SharedMetrics { clock, stores }: SharedMetrics,
    snapshots: watch::Receiver<Snapshot>,
    readiness: koord_runtime::Readiness,
    telemetry: Telemetry,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticker.tick().await;
        let snapshot = snapshots.borrow().clone();
        readiness.set("pods", snapshot.pods_synced);
        let started = Instant::now();
        let now = read_clock(&clock).0;
        {
            let mut stores = stores.lock().await;
            collector.collect(&snapshot, now, &mut stores);
            let latest = |kind| stores.node.latest(&SeriesKey::node(kind)).map(|(_, v)| v);
            telemetry.upstream.record_node_usage(
                latest(MetricKind::NodeCpuUsage),
                latest(MetricKind::NodeMemoryUsage),
            );
        }
        if let Some(node) = &snapshot.node {
            telemetry.upstream.record_allocatable(node);
        }
        telemetry
            .collection_seconds
            .observe(started.elapsed().as_secs_f64());
        qos.round(&snapshot, &stores, now).await;
    }
}

/// Every `reportIntervalSeconds` of the NodeMetric spec: builds the status from the stores
/// (and the peak predictor's latest result) and patches it.
async fn report_node_metric(
    client: kube::Client,
    node: String,
    SharedMetrics { clock, stores }: SharedMetrics,
    snapshots: watch::Receiver<Snapshot>,
    prediction: watch::Receiver<Option<Arc<crate::prediction::PredictedMetrics>>>,
    telemetry: Telemetry,
) {
    let mut snapshots = snapshots;
    let mut last_report = tokio::time::Instant::now();
    loop {
        // The interval comes with the NodeMetric, which arrives after start: a changed
        // snapshot re-reads it, so the first report does not wait out the default minute.
        let interval = snapshots.borrow_and_update().node_metric.report_interval;
        tokio::select! {
            () = tokio::time::sleep_until(last_report + interval) => {}
            changed = snapshots.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
        }
        last_report = tokio::time::Instant::now();
        let snapshot = snapshots.borrow().clone();
        let (now, wall) = read_clock(&clock);
        let predicted = prediction.borrow().clone();
        let mut status = {
            let stores = stores.lock().await;
            report::build_status(&ReportInput {
                node_store: &stores.node,
                pod_store: &stores.pods,
                pods: &snapshot.pods,
                host_applications: snapshot
                    .node_slo
                    .as_deref()
                    .and_then(|slo| slo.host_applications.as_deref())
                    .unwrap_or(&[]),
                settings: &snapshot.node_metric,
                now,
                prod_reclaimable: predicted.as_deref().map(|p| &p.prod_reclaimable),
                prod_peak: predicted.as_deref().map(|p| &p.prod_peak),
            })
        };
        // Windows run on the metric clock; the report's time is the wall clock's.
        status.update_time = Some(report::time_of(wall));
        let result = match report::publish(&client, &node, &status).await {
            Ok(conflict) => {
                if conflict.is_some() {
                    telemetry
                        .apply_conflicts
                        .get_or_create(&vec![("resource".to_string(), "nodemetrics/status".to_string())])
                        .inc();
                }
                "ok"
            }
            Err(e) => {
                warn!(error = %e, "NodeMetric report failed");
                "error"
            }
        };
        telemetry
            .reports
            .get_or_create(&vec![("result".to_string(), result.to_string())])
            .inc();
    }
}

/// Seconds since the unix epoch (0 on a clock before it).
fn unix_now_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The metric time now and its wall time (see [`MetricClock`]).
pub(crate) fn read_clock(
    clock: &std::sync::Mutex<MetricClock>,
) -> (crate::metrics::MetricTime, crate::metrics::MetricTime) {
    let mut clock = clock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let now = clock.now();
    (now, clock.wall_of(now))
}
