//! Wiring: client, leader election, config watch, indexes, the three controllers, admin server.

use std::{
    future::Future,
    sync::{Arc, Mutex, RwLock},
};

use futures::{FutureExt, Stream, StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use koord_api::{NodeMetric, NodeSLO, topology::NodeResourceTopology};
use kube::{
    Api, Client, ResourceExt,
    runtime::{
        Controller, WatchStreamExt, controller,
        events::Reporter,
        reflector::{self, ObjectRef},
        watcher,
    },
};
use prometheus_client::registry::Registry;
use tokio::sync::broadcast;

use crate::{
    cli::{ControllerName, RunArgs},
    config_state::ConfigState,
    controllers::{
        Context, TopologyIndex, UsageIndex, cleanup, config_watch::ConfigWatch, error_policy, nodemetric,
        noderesource, nodeslo,
    },
    leader::{self, Leadership},
    metrics::Metrics,
    pod_index::PodIndex,
};

/// Reconciles in flight per controller. Unbounded, a ConfigMap change fires one request per
/// node per controller at once (3,000 on 1,000 nodes), which overruns the client's connection
/// pool and the API server; failed reconciles then wait out the 15 s retry.
pub const CONCURRENCY: u16 = 16;

/// Events buffered per subscriber of the shared Node stream before the reflector waits for the
/// slowest controller.
const NODE_STREAM_BUFFER: usize = 256;

/// Annotation `kubectl apply` keeps a full copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no controller reads before a Node enters the shared store: `managedFields` (most
/// of a Node's bytes, rewritten on every kubelet status update), the image list, attached
/// volumes and a `kubectl apply` copy of the object. The controllers only write Nodes through
/// merge patches, so nothing trimmed here can be written back.
pub fn trim_node(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(annotations) = node.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
    }
}

/// Name of the leader Lease (upstream's leader election ID).
pub const LEASE_NAME: &str = "koordinator-manager";

/// Why the manager could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No usable client configuration, or no client from it.
    #[error("{0}")]
    Kubeconfig(#[from] koord_runtime::KubeconfigError),
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

/// Builds a client from `--kubeconfig`, else the environment (see [`koord_runtime::kube_config`]).
pub async fn client(args: &RunArgs) -> Result<Client, StartError> {
    Ok(koord_runtime::kube_client(args.kubeconfig.as_deref()).await?)
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
    koord_runtime::register_standard_metrics(&mut registry, "koord_manager", env!("CARGO_PKG_VERSION"));
    let metrics = Arc::new(Metrics::register(&mut registry));
    let readiness = koord_runtime::Readiness::default();
    readiness.register("config");
    let registry = Arc::new(registry);
    koord_runtime::serve_admin_pair(args.metrics_addr, args.health_addr, registry, &readiness, || {
        shutdown.clone()
    })
    .await?;

    let identity = args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("koord-manager-{}", std::process::id()));
    let leadership = if args.leader_elect {
        leader::elect(
            client.clone(),
            args.leader_election_namespace
                .as_deref()
                .unwrap_or(&args.config_namespace),
            LEASE_NAME,
            &identity,
            args.lease_duration.as_secs().max(1),
        )
        .await?
    } else {
        Leadership::always()
    };
    let recorder = koord_runtime::EventPublisher::new(
        client.clone(),
        Reporter {
            controller: "koord-manager".into(),
            instance: Some(identity),
        },
    );

    // Tasks that follow the cluster; aborted when the controllers stop, which also drops every
    // Leadership handle so that the Lease is released.
    let mut background = Vec::new();
    {
        let metrics = metrics.clone();
        let states = leadership.states();
        background.push(tokio::spawn(async move {
            let mut states = std::pin::pin!(states);
            while let Some(leads) = states.next().await {
                metrics.set_leader(LEASE_NAME, leads);
            }
            metrics.set_leader(LEASE_NAME, false);
        }));
    }
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
    let topology = TopologyIndex::default();
    let ctx = Arc::new(Context {
        client: client.clone(),
        config,
        leadership,
        metrics,
        recorder,
        pods: pods.clone(),
        usage: usage.clone(),
        topology: topology.clone(),
        normalization_problems: Mutex::new(Default::default()),
        last_batch_write: Mutex::new(Default::default()),
        last_mid_write: Mutex::new(Default::default()),
        applied_pairs: Mutex::new(Default::default()),
        last_zone_write: Mutex::new(Default::default()),
        resync: args.resync,
    });

    let children = cleanup::Children {
        node_slo: args.controllers.contains(&ControllerName::Nodeslo),
        node_metric: args.controllers.contains(&ControllerName::Nodemetric),
    };
    let noderesource = args.controllers.contains(&ControllerName::Noderesource);
    if children.node_slo || children.node_metric || noderesource {
        background.push(tokio::spawn(cleanup::run(
            client.clone(),
            children,
            ctx.leadership.clone(),
            noderesource.then(|| ctx.clone()),
        )));
    }
    let wc = watcher::Config::default();
    // One Node watch and one trimmed store, shared by the controllers (each `Controller::new`
    // would keep its own full copy of every Node). Subscribers are made before the watch starts.
    let (node_store, node_writer) = reflector::store_shared::<Node>(NODE_STREAM_BUFFER);
    let node_controller = || -> Controller<Node> {
        match node_writer.subscribe() {
            Some(trigger) => Controller::for_shared_stream(trigger, node_store.clone()),
            // `store_shared` always makes a subscribable writer; keep a working fallback anyway.
            None => Controller::new(Api::<Node>::all(client.clone()), wc.clone()),
        }
    };
    let mut tasks = Vec::new();
    if args.controllers.contains(&ControllerName::Nodeslo) {
        let controller = node_controller()
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
        let controller = node_controller()
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
        // Pods and NodeMetrics are kept only as the few numbers the formula reads. A pod bound
        // to a node, gone from it, or changed as the formula sees it (phase, priority, QoS,
        // requests, NUMA placement) reconciles its node, after the index has it: batch
        // resources follow scheduling at once instead of at the next report or resync.
        let pod_events = watcher(Api::<Pod>::all(client.clone()), wc.clone()).default_backoff();
        let indexed = (pods.clone(), ctx.metrics.clone());
        let pod_changes = pods
            .follow(pod_events)
            .inspect(move |_| {
                let (pods, metrics) = &indexed;
                metrics
                    .pods_indexed
                    .set(i64::try_from(pods.len()).unwrap_or(i64::MAX));
            })
            .flat_map(futures::stream::iter)
            .map(|node| ObjectRef::<Node>::new(&node));
        let metric_events = watcher(Api::<NodeMetric>::all(client.clone()), wc.clone()).default_backoff();
        background.push(tokio::spawn(
            usage
                .follow(metric_events)
                .for_each(|_| futures::future::ready(())),
        ));
        // NodeResourceTopologies: the CPU facts koordlet reports (CPU normalization) and the
        // NUMA zones (NUMA-level batch resources). The index keeps only the numbers; a change
        // reconciles its node, after the index has it.
        let nrt_events =
            watcher(Api::<NodeResourceTopology>::all(client.clone()), wc.clone()).default_backoff();
        let nrt_changes = topology
            .follow(nrt_events)
            .map(|node| ObjectRef::<Node>::new(&node));
        // A second, trigger-only watch: a report reconciles its node. If it overtakes the index
        // above, the next resync picks the report up.
        let controller = node_controller()
            .reconcile_on(nrt_changes)
            .reconcile_on(pod_changes)
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
    let node_events = watcher(Api::<Node>::all(client.clone()), wc.clone())
        .default_backoff()
        .modify(trim_node)
        .reflect_shared(node_writer);
    let node_events =
        koord_runtime::log_watch_errors(node_events, "Node").for_each(|_| futures::future::ready(()));
    background.push(tokio::spawn(node_events));
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::{
        api::core::v1::{ContainerImage, NodeStatus},
        apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::ManagedFieldsEntry},
    };

    #[test]
    fn trim_node_keeps_what_the_controllers_read() {
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        node.metadata.resource_version = Some("7".into());
        node.metadata.labels = Some([("pool".to_string(), "a".to_string())].into());
        node.metadata.annotations = Some(
            [
                (LAST_APPLIED.to_string(), "{\"big\":true}".to_string()),
                ("node.koordinator.sh/reservation".to_string(), "{}".to_string()),
            ]
            .into(),
        );
        node.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubelet".into()),
            ..Default::default()
        }]);
        let capacity: std::collections::BTreeMap<String, Quantity> =
            [("cpu".to_string(), Quantity("4".into()))].into();
        node.status = Some(NodeStatus {
            capacity: Some(capacity.clone()),
            allocatable: Some(capacity.clone()),
            images: Some(vec![ContainerImage {
                names: Some(vec!["registry/app:1".into()]),
                size_bytes: Some(1),
            }]),
            volumes_in_use: Some(vec!["v".into()]),
            ..Default::default()
        });
        trim_node(&mut node);
        assert_eq!(node.metadata.managed_fields, None);
        assert_eq!(node.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(node.labels().get("pool").map(String::as_str), Some("a"));
        assert!(!node.annotations().contains_key(LAST_APPLIED));
        assert!(node.annotations().contains_key("node.koordinator.sh/reservation"));
        let status = node.status.as_ref().expect("status kept");
        assert_eq!(status.capacity.as_ref(), Some(&capacity));
        assert_eq!(status.allocatable.as_ref(), Some(&capacity));
        assert_eq!(status.images, None);
        assert_eq!(status.volumes_in_use, None);
    }
}
