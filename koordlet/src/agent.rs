//! The live agent: sources fill the snapshot; one loop per collect interval collects metrics
//! and reconciles BE limits through the executor; another reports NodeMetric status.

use std::future::Future;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use prometheus_client::registry::Registry;
use tokio::sync::{Mutex, watch};
use tracing::{info, warn};

use crate::cli::{AgentArgs, DriverArg, PodsSource};
use crate::evictor::Evictor;
use crate::executor::{Executor, ExecutorConfig};
use crate::metrics::MetricTime;
use crate::metrics::collector::{Collector, Stores};
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
    /// The kubeconfig file could not be loaded.
    #[error("kubernetes client: {0}")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    /// No in-cluster or default kubeconfig.
    #[error("kubernetes client: {0}")]
    InferConfig(#[source] kube::config::InferConfigError),
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

async fn kube_config(args: &AgentArgs) -> Result<kube::Config, AgentError> {
    Ok(match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(AgentError::Kubeconfig)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(AgentError::Kubeconfig)?
        }
        None => kube::Config::infer().await.map_err(AgentError::InferConfig)?,
    })
}

/// Runs the agent until `shutdown` resolves.
pub async fn run_agent(
    args: AgentArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AgentError> {
    let node = args
        .node_name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or(AgentError::NoNodeName)?;
    let gates = FeatureGates::parse(&args.feature_gates)?;
    let roots = SystemRoots {
        cgroup: args.cgroup_root.clone(),
        proc: args.proc_root.clone(),
        sys: args.sys_root.clone(),
        resctrl: args.resctrl_root.clone(),
    };
    let mut cgroups = Cgroups::detect(&roots)?;
    if let Some(max) = args.max_kept_cgroup_files {
        let limit = max.min(cgroups.fd_budget().limit());
        info!(
            kept_cgroup_files = limit,
            "cgroup file-descriptor budget lowered by flag"
        );
        cgroups = cgroups.with_fd_budget(crate::system::FdBudget::new(limit));
    }
    let cgroups = Arc::new(cgroups);
    let driver = match args.cgroup_driver {
        DriverArg::Cgroupfs => CgroupDriver::Cgroupfs,
        DriverArg::Systemd => CgroupDriver::Systemd,
        DriverArg::Auto => {
            crate::system::detect_driver(cgroups.root(), cgroups.layout(), std::path::Path::new(""))
                .unwrap_or_else(|| {
                    warn!("no kubepods cgroup found; assuming the cgroupfs driver");
                    CgroupDriver::Cgroupfs
                })
        }
    };
    info!(node, version = ?cgroups.version(), ?driver, dry_run = args.dry_run, "koordlet starting");
    let paths = KubeCgroupPaths::new(driver);

    let mut registry = Registry::with_prefix("koordlet");
    let telemetry = Telemetry::register(&mut registry);
    let suppress_metrics = crate::suppress_loop::SuppressMetrics::register(&mut registry, telemetry.clone());
    let readiness = koord_runtime::Readiness::default();
    readiness.register("pods");
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop = |rx: &watch::Receiver<bool>| {
        let mut rx = rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let registry = Arc::new(registry);
    let admin = koord_runtime::serve_admin(
        args.health_addr,
        registry.clone(),
        readiness.clone(),
        stop(&stop_rx),
    )
    .await?;
    if args.metrics_addr != args.health_addr {
        koord_runtime::serve_admin(
            args.metrics_addr,
            registry.clone(),
            readiness.clone(),
            stop(&stop_rx),
        )
        .await?;
    }

    let config = kube_config(&args).await?;
    let client = kube::Client::try_from(config.clone()).map_err(AgentError::Client)?;
    let evict_client = crate::evictor::no_retry_client(config).map_err(AgentError::Client)?;
    let (snap_tx, snap_rx) = watch::channel(Snapshot::default());
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(sources::watch_node_objects(
        client.clone(),
        node.clone(),
        snap_tx.clone(),
    ));
    match args.pods_source {
        PodsSource::Kubelet => {
            let kubelet = sources::kubelet_client(
                &args.kubelet_url,
                Some(std::path::Path::new(sources::SERVICE_ACCOUNT_TOKEN)),
            )?;
            tasks.spawn(sources::poll_kubelet(kubelet, snap_tx.clone()));
        }
        PodsSource::Apiserver => {
            tasks.spawn(sources::watch_pods(client.clone(), node.clone(), snap_tx.clone()));
        }
    }
    // Fast CPU suppress loop; the QoS round keeps its cpuset scope (BE tree, CPU pools) fresh.
    let (scope_tx, scope_rx) = tokio::sync::watch::channel(None);
    let fast_config = crate::suppress_loop::node_config(args.suppress_interval, args.dry_run, &roots, &paths);
    match crate::suppress_loop::SuppressLoop::new(cgroups.clone(), fast_config, Some(suppress_metrics))
        .map(|l| l.with_scope_updates(scope_rx))
    {
        Ok(fast) => {
            tasks.spawn(fast.run(snap_rx.clone(), gates.clone()));
        }
        Err(e) => warn!(error = %e, "fast CPU suppress loop not started"),
    }

    let stores = Arc::new(Mutex::new(Stores::default()));
    // Collection + QoS strategies loop.
    {
        let (stores, snap_rx, readiness, telemetry) = (
            stores.clone(),
            snap_rx.clone(),
            readiness.clone(),
            telemetry.clone(),
        );
        let mut collector = Collector::new(cgroups.clone(), roots.clone(), paths.clone());
        let executor = Executor::new(
            cgroups.clone(),
            ExecutorConfig {
                dry_run: args.dry_run,
                ..ExecutorConfig::default()
            },
        );
        let interval = args.collect_interval;
        let mut qos = QosLoop::new(
            QosLoopConfig {
                // The fast path owns the live cpu_suppress writes.
                apply_cpu_suppress: false,
                collect_interval: interval,
            },
            gates.clone(),
            QosEdges {
                cgroups: cgroups.clone(),
                paths: paths.clone(),
                topology: crate::gather::read_topology(&roots.sys),
                executor,
                evictor: Evictor::new(evict_client, &node, args.dry_run, telemetry.clone()),
                telemetry: telemetry.clone(),
            },
        )
        .with_cpuset_scope(scope_tx);
        tasks.spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                ticker.tick().await;
                let snapshot = snap_rx.borrow().clone();
                readiness.set("pods", snapshot.pods_synced);
                let started = Instant::now();
                let now = MetricTime::from_system_time(SystemTime::now());
                {
                    let mut stores = stores.lock().await;
                    collector.collect(&snapshot, now, &mut stores);
                }
                telemetry
                    .collection_seconds
                    .observe(started.elapsed().as_secs_f64());
                qos.round(&snapshot, &stores, now).await;
            }
        });
    }
    // NodeMetric report loop.
    {
        let (stores, snap_rx, telemetry, node) =
            (stores.clone(), snap_rx.clone(), telemetry.clone(), node.clone());
        tasks.spawn(async move {
            loop {
                let interval = snap_rx.borrow().node_metric.report_interval;
                tokio::time::sleep(interval).await;
                let snapshot = snap_rx.borrow().clone();
                let now = MetricTime::from_system_time(SystemTime::now());
                let status = {
                    let stores = stores.lock().await;
                    report::build_status(&ReportInput {
                        node_store: &stores.node,
                        pod_store: &stores.pods,
                        pods: &snapshot.pods,
                        settings: &snapshot.node_metric,
                        now,
                    })
                };
                let result = match report::publish(&client, &node, &status).await {
                    Ok(()) => "ok",
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
        });
    }

    shutdown.await;
    info!("shutting down");
    let _ = stop_tx.send(true);
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let _ = admin.task.await;
    Ok(())
}
