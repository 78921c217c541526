//! Wiring: client, leader election, config watch, indexes, the three controllers, admin server.

use std::{
    future::Future,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use futures::{FutureExt, Stream, StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use koord_api::{NodeMetric, NodeSLO};
use kube::{
    Api, Client, ResourceExt,
    config::{KubeConfigOptions, Kubeconfig},
    runtime::{
        Controller, WatchStreamExt, controller,
        events::{Recorder, Reporter},
        reflector::ObjectRef,
        watcher,
    },
};
use prometheus_client::registry::Registry;
use tokio::sync::broadcast;

use crate::{
    cli::{ControllerName, RunArgs},
    config_state::ConfigState,
    controllers::{
        Context, UsageIndex, cleanup, config_watch::ConfigWatch, error_policy, nodemetric, noderesource,
        nodeslo,
    },
    leader::{self, Leadership},
    metrics::Metrics,
    pod_index::PodIndex,
};

/// Reconciles in flight per controller. Unbounded, a ConfigMap change fires one request per
/// node per controller at once (3,000 on 1,000 nodes), which overruns the client's connection
/// pool and the API server; failed reconciles then wait out the 15 s retry.
pub const CONCURRENCY: u16 = 16;

/// Name of the leader Lease (upstream's leader election ID).
pub const LEASE_NAME: &str = "koordinator-manager";

/// Why the manager could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The kubeconfig could not be read.
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// No usable client configuration.
    #[error("client configuration: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    /// The client could not be built.
    #[error("client: {0}")]
    Client(#[from] kube::Error),
    /// Leader election could not start.
    #[error(transparent)]
    Leader(#[from] leader::LeaderError),
    /// An admin port could not be bound.
    #[error("admin server: {0}")]
    Admin(#[from] std::io::Error),
}

/// Builds a client from `--kubeconfig`, else in-cluster, else the default kubeconfig.
pub async fn client(args: &RunArgs) -> Result<Client, StartError> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

fn broadcast_stream(sender: &broadcast::Sender<()>) -> impl Stream<Item = ()> + Send + 'static {
    stream::unfold(sender.subscribe(), |mut receiver| async move {
        match receiver.recv().await {
            Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => Some(((), receiver)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}

fn drain<T, E: std::fmt::Display>(
    name: &'static str,
    results: impl Stream<Item = Result<T, E>> + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    results.for_each(move |result| {
        if let Err(error) = result {
            tracing::debug!(controller = name, %error, "controller event");
        }
        futures::future::ready(())
    })
}

/// Runs the manager until `shutdown` resolves.
pub async fn run(
    args: RunArgs,
    client: Client,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let shutdown = shutdown.shared();
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let readiness = koord_runtime::Readiness::default();
    readiness.register("config");
    let registry = Arc::new(registry);
    koord_runtime::serve_admin(
        args.metrics_addr,
        registry.clone(),
        readiness.clone(),
        shutdown.clone(),
    )
    .await?;
    if args.health_addr != args.metrics_addr {
        koord_runtime::serve_admin(args.health_addr, registry, readiness.clone(), shutdown.clone()).await?;
    }

    let identity = args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("koord-manager-{}", std::process::id()));
    let leadership = if args.leader_elect {
        leader::elect(
            client.clone(),
            &args.config_namespace,
            LEASE_NAME,
            &identity,
            args.lease_duration_seconds,
        )
        .await?
    } else {
        Leadership::always()
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "koord-manager".into(),
            instance: Some(identity),
        },
    );

    // Tasks that follow the cluster; aborted when the controllers stop, which also drops every
    // Leadership handle so that the Lease is released.
    let mut background = Vec::new();
    let config = Arc::new(RwLock::new(ConfigState::new()));
    let (changed, _) = broadcast::channel(16);
    let config_watch = ConfigWatch {
        api: Api::namespaced(client.clone(), &args.config_namespace),
        name: args.slo_config_name.clone(),
        state: config.clone(),
        changed: changed.clone(),
        leadership: leadership.clone(),
        metrics: metrics.clone(),
        recorder: recorder.clone(),
        readiness: readiness.clone(),
    };
    background.push(tokio::spawn(config_watch.run()));

    // Leadership gained → reconcile everything.
    {
        let changed = changed.clone();
        background.push(tokio::spawn(leadership.gained().for_each(move |()| {
            tracing::info!("became the leader: reconciling every node");
            let _ = changed.send(());
            futures::future::ready(())
        })));
    }

    let pods = PodIndex::default();
    let usage = UsageIndex::default();
    let ctx = Arc::new(Context {
        client: client.clone(),
        config,
        leadership,
        metrics,
        recorder,
        pods: pods.clone(),
        usage: usage.clone(),
        last_batch_write: Mutex::new(Default::default()),
        resync: Duration::from_secs(args.resync_seconds.max(1)),
    });

    let children = cleanup::Children {
        node_slo: args.controllers.contains(&ControllerName::Nodeslo),
        node_metric: args.controllers.contains(&ControllerName::Nodemetric),
    };
    if children.node_slo || children.node_metric {
        background.push(tokio::spawn(cleanup::run(
            client.clone(),
            children,
            ctx.leadership.clone(),
        )));
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let wc = watcher::Config::default();
    let mut tasks = Vec::new();
    if args.controllers.contains(&ControllerName::Nodeslo) {
        let controller = Controller::new(nodes.clone(), wc.clone())
            .owns(Api::<NodeSLO>::all(client.clone()), wc.clone())
            .with_config(controller::Config::default().concurrency(CONCURRENCY))
            .reconcile_all_on(broadcast_stream(&changed))
            .graceful_shutdown_on(shutdown.clone())
            .run(
                nodeslo::reconcile,
                |n, e, c| error_policy(nodeslo::NAME, &n, e, &c),
                ctx.clone(),
            );
        tasks.push(tokio::spawn(drain(nodeslo::NAME, controller)));
    }
    if args.controllers.contains(&ControllerName::Nodemetric) {
        let controller = Controller::new(nodes.clone(), wc.clone())
            .owns(Api::<NodeMetric>::all(client.clone()), wc.clone())
            .with_config(controller::Config::default().concurrency(CONCURRENCY))
            .reconcile_all_on(broadcast_stream(&changed))
            .graceful_shutdown_on(shutdown.clone())
            .run(
                nodemetric::reconcile,
                |n, e, c| error_policy(nodemetric::NAME, &n, e, &c),
                ctx.clone(),
            );
        tasks.push(tokio::spawn(drain(nodemetric::NAME, controller)));
    }
    if args.controllers.contains(&ControllerName::Noderesource) {
        // Pods and NodeMetrics are kept only as the few numbers the formula reads.
        let pod_events = watcher(Api::<Pod>::all(client.clone()), wc.clone()).default_backoff();
        let indexed = (pods.clone(), ctx.metrics.clone());
        background.push(tokio::spawn(pods.follow(pod_events).for_each(move |_| {
            let (pods, metrics) = &indexed;
            metrics
                .pods_indexed
                .set(i64::try_from(pods.len()).unwrap_or(i64::MAX));
            futures::future::ready(())
        })));
        let metric_events = watcher(Api::<NodeMetric>::all(client.clone()), wc.clone()).default_backoff();
        background.push(tokio::spawn(
            usage
                .follow(metric_events)
                .for_each(|_| futures::future::ready(())),
        ));
        // A second, trigger-only watch: a report reconciles its node. If it overtakes the index
        // above, the next resync picks the report up.
        let controller = Controller::new(nodes.clone(), wc.clone())
            .watches(
                Api::<NodeMetric>::all(client.clone()),
                wc.clone(),
                |metric: NodeMetric| Some(ObjectRef::<Node>::new(&metric.name_any())),
            )
            .with_config(controller::Config::default().concurrency(CONCURRENCY))
            .reconcile_all_on(broadcast_stream(&changed))
            .graceful_shutdown_on(shutdown.clone())
            .run(
                noderesource::reconcile,
                |n, e, c| error_policy(noderesource::NAME, &n, e, &c),
                ctx.clone(),
            );
        tasks.push(tokio::spawn(drain(noderesource::NAME, controller)));
    }
    for task in tasks {
        if let Err(error) = task.await {
            tracing::error!(%error, "controller task failed");
        }
    }
    for task in background {
        task.abort();
    }
    Ok(())
}
