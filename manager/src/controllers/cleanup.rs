//! Deletes a Node's NodeSLO and NodeMetric when the Node goes away, and makes the node
//! resource controller forget the node (its per-node state and metric series).
//!
//! Both carry an ownerReference to their Node, so a real API server garbage-collects them even
//! while the manager is down. This task is the manager's own guarantee on top (upstream's only
//! one): it follows Node deletions, and after every (re-)list it removes children whose Node no
//! longer exists — which also covers deletions missed while no replica was running.

use std::collections::HashSet;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use koord_api::{NodeMetric, NodeSLO};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams},
    core::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};

use std::sync::Arc;

use super::Context;
use crate::leader::Leadership;

/// Which children the cleanup removes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Children {
    /// NodeSLOs (the nodeslo controller runs).
    pub node_slo: bool,
    /// NodeMetrics (the nodemetric controller runs).
    pub node_metric: bool,
}

async fn delete_children(client: &Client, children: Children, node: &str) {
    if children.node_slo {
        let api: Api<NodeSLO> = Api::all(client.clone());
        report(
            node,
            "NodeSLO",
            api.delete(node, &DeleteParams::default()).await.map(|_| ()),
        );
    }
    if children.node_metric {
        let api: Api<NodeMetric> = Api::all(client.clone());
        report(
            node,
            "NodeMetric",
            api.delete(node, &DeleteParams::default()).await.map(|_| ()),
        );
    }
}

fn report(node: &str, kind: &str, result: Result<(), kube::Error>) {
    match result {
        Ok(()) => tracing::info!(node, kind, "deleted with its Node"),
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => tracing::warn!(node, kind, %error, "could not delete with its Node"),
    }
}

async fn orphans(client: &Client, children: Children, nodes: &HashSet<String>) -> Vec<String> {
    let mut names = HashSet::new();
    if children.node_slo {
        match Api::<NodeSLO>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await
        {
            Ok(list) => names.extend(list.items.into_iter().filter_map(|o| o.metadata.name)),
            Err(error) => tracing::warn!(%error, "cannot list NodeSLOs for cleanup"),
        }
    }
    if children.node_metric {
        match Api::<NodeMetric>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await
        {
            Ok(list) => names.extend(list.items.into_iter().filter_map(|o| o.metadata.name)),
            Err(error) => tracing::warn!(%error, "cannot list NodeMetrics for cleanup"),
        }
    }
    names.into_iter().filter(|name| !nodes.contains(name)).collect()
}

/// Runs until the Node watch ends. `forget`: the node resource controller's context, told
/// about every Node gone (on every replica: followers keep series too).
pub async fn run(client: Client, children: Children, leadership: Leadership, forget: Option<Arc<Context>>) {
    let events = watcher(
        Api::<PartialObjectMeta<Node>>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff();
    let mut events = koord_runtime::log_watch_errors(events, "Node (cleanup)").boxed();
    let mut nodes = HashSet::new();
    let mut listing = HashSet::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listing.clear(),
            Ok(watcher::Event::InitApply(node)) => {
                listing.extend(node.metadata.name);
            }
            Ok(watcher::Event::InitDone) => {
                nodes = std::mem::take(&mut listing);
                if let Some(ctx) = &forget {
                    let gone = ctx.forget_nodes_except(&nodes);
                    if !gone.is_empty() {
                        tracing::info!(nodes = ?gone, "forgot the state of Nodes deleted while the watch was down");
                    }
                }
                if leadership.is_leader() {
                    for orphan in orphans(&client, children, &nodes).await {
                        delete_children(&client, children, &orphan).await;
                    }
                }
            }
            Ok(watcher::Event::Apply(node)) => {
                nodes.extend(node.metadata.name);
            }
            Ok(watcher::Event::Delete(node)) => {
                if let Some(name) = node.metadata.name {
                    nodes.remove(&name);
                    if let Some(ctx) = &forget {
                        ctx.forget_node(&name);
                    }
                    if leadership.is_leader() {
                        delete_children(&client, children, &name).await;
                    }
                }
            }
            // Logged once per outage by log_watch_errors; the watcher retries.
            Err(_) => {}
        }
    }
}
