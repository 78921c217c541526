//! The edges that fill the snapshot: kubelet `/pods` polling or an API server pod watch, and
//! watches on the single Node, NodeSLO and NodeMetric named like the node.
//!
//! Each source updates its part of the snapshot with `send_modify`; a watch error is retried
//! with backoff (logged once per outage) while the snapshot keeps the last value seen.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use koord_api::{NodeMetric, NodeSLO};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector};
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tracing::{info, warn};

use super::{NodeMetricSettings, PodsOutcome, Snapshot, StatesError, merge_pods, parse_kubelet_pods};

/// Default kubelet endpoint.
pub const DEFAULT_KUBELET_URL: &str = "https://127.0.0.1:10250";
/// The service-account token mounted into every pod.
pub const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// How often the kubelet is asked (upstream: 10 s).
pub const KUBELET_SYNC_INTERVAL: Duration = Duration::from_secs(10);
const KUBELET_TIMEOUT: Duration = Duration::from_secs(3);

/// A client for the kubelet's `/pods`: HTTPS with the service-account token and without CA
/// verification (the kubelet's serving certificate is usually self-signed, as upstream), or
/// plain HTTP for test clusters.
pub fn kubelet_client(url: &str, token_file: Option<&std::path::Path>) -> Result<Client, StatesError> {
    let uri: http::Uri = url.parse().map_err(|source| StatesError::BadUrl {
        url: url.to_owned(),
        source,
    })?;
    let mut config = kube::Config::new(uri);
    config.accept_invalid_certs = true;
    // kube-rs builds the TLS roots before it swaps in the accept-anything verifier; with no CA
    // given it asks the system's store, and a minimal image (no CA bundle) then fails every
    // request. The roots are never consulted here, so an empty set is the honest one.
    config.root_cert = Some(Vec::new());
    config.read_timeout = Some(KUBELET_TIMEOUT);
    config.connect_timeout = Some(KUBELET_TIMEOUT);
    if let Some(path) = token_file
        && path.is_file()
    {
        config.auth_info.token_file = Some(path.to_string_lossy().into_owned());
    }
    Client::try_from(config).map_err(StatesError::Request)
}

/// One GET of `/pods`.
pub async fn fetch_kubelet_pods(client: &Client) -> Result<Vec<Pod>, StatesError> {
    let request = http::Request::get("/pods")
        .body(Vec::new())
        .map_err(StatesError::BuildRequest)?;
    let body = client.request_text(request).await.map_err(StatesError::Request)?;
    parse_kubelet_pods(body.as_bytes())
}

fn log_outcome(outcome: &PodsOutcome, last: &mut Option<String>) {
    let line = match outcome {
        PodsOutcome::Replaced {
            rejected, trimmed, ..
        } if rejected.is_empty() && trimmed.is_empty() => None,
        PodsOutcome::Replaced {
            rejected, trimmed, ..
        } => Some(
            [
                (!rejected.is_empty()).then(|| format!("pods left out: {}", rejected.join("; "))),
                (!trimmed.is_empty())
                    .then(|| format!("pod metadata over the bounds: {}", trimmed.join("; "))),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("; "),
        ),
        PodsOutcome::KeptEmptyAnswer => Some("kubelet answered no pods; keeping the previous list".into()),
        PodsOutcome::KeptOnError(e) => Some(format!("{e}; keeping the previous list")),
    };
    if line != *last {
        if let Some(l) = &line {
            warn!("{l}");
        }
        *last = line;
    }
}

/// Polls the kubelet forever (until the task is dropped).
pub async fn poll_kubelet(client: Client, tx: watch::Sender<Snapshot>) {
    let mut last_log = None;
    loop {
        let answer = fetch_kubelet_pods(&client).await;
        let previous = tx.borrow().pods.clone();
        let (pods, outcome) = merge_pods(&previous, answer);
        log_outcome(&outcome, &mut last_log);
        if matches!(outcome, PodsOutcome::Replaced { .. }) {
            tx.send_modify(|s| {
                s.pods = pods;
                s.pods_synced = true;
            });
        }
        tokio::time::sleep(KUBELET_SYNC_INTERVAL).await;
    }
}

/// Watches this node's pods on the API server (`spec.nodeName=<node>`).
pub async fn watch_pods(client: Client, node: String, tx: watch::Sender<Snapshot>) {
    let api: Api<Pod> = Api::all(client);
    let (reader, writer) = reflector::store::<Pod>();
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let mut last_log = None;
    // Trimmed before the reflector's cache stores them (see `bounds`); `merge_pods` reports.
    let events = watcher::watcher(api, config).default_backoff().modify(|pod| {
        let _ = super::bounds::bound_pod_metadata(pod);
    });
    let stream = koord_runtime::log_watch_errors(reflector::reflector(writer, events), "Pod");
    futures::pin_mut!(stream);
    loop {
        match stream.try_next().await {
            Ok(Some(Event::InitApply(_) | Event::Init)) => continue,
            Ok(Some(_)) => {
                let pods: Vec<Pod> = reader.state().iter().map(|p| (**p).clone()).collect();
                let previous = tx.borrow().pods.clone();
                let (merged, outcome) = merge_pods(&previous, Ok(pods));
                log_outcome(&outcome, &mut last_log);
                if matches!(outcome, PodsOutcome::Replaced { .. }) {
                    tx.send_modify(|s| {
                        s.pods = merged;
                        s.pods_synced = true;
                    });
                }
            }
            Ok(None) => return,
            // Logged once per outage by log_watch_errors; the snapshot keeps the last list.
            Err(_) => {}
        }
    }
}

/// Watches the single object of kind `K` named `name`, calling `apply` on every version seen.
async fn watch_named<K>(api: Api<K>, name: String, what: &'static str, apply: impl Fn(K))
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = koord_runtime::log_watch_errors(watcher::watcher(api, config).default_backoff(), what);
    futures::pin_mut!(stream);
    loop {
        match stream.next().await {
            Some(Ok(Event::Apply(obj) | Event::InitApply(obj))) => apply(obj),
            Some(Ok(Event::Delete(_))) => info!("{what} {name} deleted; keeping the last one seen"),
            Some(Ok(_)) => {}
            // Logged once per outage by log_watch_errors; the last one seen is kept.
            Some(Err(_)) => {}
            None => return,
        }
    }
}

/// Watches this Node, its NodeSLO and its NodeMetric spec; returns when all three end.
pub async fn watch_node_objects(client: Client, node: String, tx: watch::Sender<Snapshot>) {
    let (tx1, tx2, tx3) = (tx.clone(), tx.clone(), tx);
    let nodes = watch_named(Api::<Node>::all(client.clone()), node.clone(), "Node", move |n| {
        tx1.send_modify(|s| s.node = Some(Arc::new(n)));
    });
    let slos = watch_named(
        Api::<NodeSLO>::all(client.clone()),
        node.clone(),
        "NodeSLO",
        move |o| {
            tx2.send_modify(|s| s.node_slo = Some(Arc::new(o.spec)));
        },
    );
    let metrics = watch_named(Api::<NodeMetric>::all(client), node, "NodeMetric", move |o| {
        let settings = NodeMetricSettings::from_spec(&o.spec);
        if !settings.bad_durations.is_empty() {
            warn!(durations = ?settings.bad_durations, "NodeMetric spec: durations that do not parse are left out");
        }
        tx3.send_if_modified(|s| {
            let changed = s.node_metric != settings;
            s.node_metric = settings;
            changed
        });
    });
    tokio::join!(nodes, slos, metrics);
}
