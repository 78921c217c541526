//! Watch streams: newline-delimited `{"type":..,"object":..}` events replayed from the history
//! after `resourceVersion` (or synthetic ADDED events for the current state), selector-aware
//! ADDED/DELETED transitions, periodic BOOKMARKs, `timeoutSeconds`, and an ERROR 410 event for
//! a version that left the history or when [`ApiServer::expire_watches`] ends every watch.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::object::{needs_conversion, storage_key};
use super::ops::Target;
use super::partial::MetadataAs;
use super::selector::{FieldSelector, LabelSelector};
use super::server::ApiServer;
use super::store::{ChangeType, StoredObject};
use super::table;

/// Parameters of a watch request.
#[derive(Debug, Clone, Default)]
pub struct WatchParams {
    /// `resourceVersion` (None or 0: start with the current state).
    pub resource_version: Option<u64>,
    /// Label selector.
    pub labels: LabelSelector,
    /// Field selector.
    pub fields: FieldSelector,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `sendInitialEvents`.
    pub send_initial: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// Render events as Table rows (kubectl get -w).
    pub table: bool,
    /// Render objects as `PartialObjectMetadata` (metadata-only watches).
    pub metadata_only: Option<MetadataAs>,
    /// Bookmark period.
    pub bookmark_every: Duration,
}

struct Encoder {
    t: Target,
    table: bool,
    metadata_only: Option<MetadataAs>,
}

impl Encoder {
    fn event(&self, ty: &str, obj: &StoredObject) -> Bytes {
        let mut buf = BytesMut::with_capacity(obj.json.len() + 32);
        buf.put_slice(b"{\"type\":\"");
        buf.put_slice(ty.as_bytes());
        buf.put_slice(b"\",\"object\":");
        if let Some(form) = self.metadata_only {
            buf.put_slice(&serde_json::to_vec(&form.object(&obj.value)).unwrap_or_default());
        } else if self.table {
            let view = self.t.view(&obj.value);
            let tbl = table::table(&self.t.info, &[view], &obj.rv.to_string(), None, true);
            buf.put_slice(&serde_json::to_vec(&tbl).unwrap_or_default());
        } else if needs_conversion(&self.t.info, &self.t.version) {
            buf.put_slice(&serde_json::to_vec(&self.t.view(&obj.value)).unwrap_or_default());
        } else {
            buf.put_slice(&obj.json);
        }
        buf.put_slice(b"}\n");
        buf.freeze()
    }

    fn raw(&self, ty: &str, object: Value) -> Bytes {
        let mut v = serde_json::to_vec(&json!({"type": ty, "object": object})).unwrap_or_default();
        v.push(b'\n');
        Bytes::from(v)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_end && let Some(m) = metadata.as_object_mut() {
            m.insert("annotations".into(), json!({"k8s.io/initial-events-end": "true"}));
        }
        let object = match self.metadata_only {
            Some(form) => {
                json!({"kind": "PartialObjectMetadata", "apiVersion": form.api_version, "metadata": metadata})
            }
            None => {
                json!({"kind": self.t.info.kind, "apiVersion": self.t.info.api_version(&self.t.version), "metadata": metadata})
            }
        };
        self.raw("BOOKMARK", object)
    }
}

/// Start a watch; the response streams until timeout, teardown or client disconnect.
pub fn watch(server: Arc<ApiServer>, t: Target, p: WatchParams) -> Response {
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let enc = Encoder {
        t: t.clone(),
        table: p.table,
        metadata_only: p.metadata_only,
    };
    let key = storage_key(&t.info);
    let ns = if t.info.namespaced {
        t.namespace.clone()
    } else {
        None
    };
    let matches = {
        let (labels, fields) = (p.labels.clone(), p.fields.clone());
        move |v: &Value| labels.matches(v.pointer("/metadata/labels")) && fields.matches(v)
    };
    let start = match p.resource_version.filter(|rv| *rv > 0 && !p.send_initial) {
        Some(rv) => match server.store.watch_from(rv) {
            Ok((history, rx)) => Ok((Vec::new(), history, rv, rx)),
            Err(e) => Err(e),
        },
        None => {
            let (items, rv, rx) = server.store.snapshot_and_subscribe(&key, ns.as_deref());
            Ok((items, Vec::new(), rv, rx))
        }
    };
    let cancel = server.cancel.clone();
    let mut expired = server.watch_expiry.subscribe();
    tokio::spawn(async move {
        let (initial, history, start_rv, mut events) = match start {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(enc.raw("ERROR", e.status())).await;
                return;
            }
        };
        let mut last_rv = start_rv;
        for obj in initial.iter().filter(|o| matches(&o.value)) {
            if tx.send(enc.event("ADDED", obj)).await.is_err() {
                return;
            }
        }
        if p.send_initial && p.bookmarks && tx.send(enc.bookmark(start_rv, true)).await.is_err() {
            return;
        }
        let deliver = |c: &super::store::Change| -> Option<Bytes> {
            if c.resource != key || ns.as_deref().is_some_and(|n| n != c.namespace) {
                return None;
            }
            let now = matches(&c.object.value);
            let before = c.previous.as_ref().is_some_and(|p| matches(&p.value));
            let ty = match c.kind {
                ChangeType::Added if now => "ADDED",
                ChangeType::Modified if now && before => "MODIFIED",
                ChangeType::Modified if now => "ADDED",
                ChangeType::Modified if before => "DELETED",
                ChangeType::Deleted if before || now => "DELETED",
                _ => return None,
            };
            Some(enc.event(ty, &c.object))
        };
        for c in &history {
            last_rv = c.rv;
            if let Some(b) = deliver(c)
                && tx.send(b).await.is_err()
            {
                return;
            }
        }
        let deadline = tokio::time::sleep(p.timeout.unwrap_or(Duration::from_secs(1800)));
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(p.bookmark_every);
        let mut bookmarked = last_rv;
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = cancel.cancelled() => return,
                _ = tx.closed() => return,
                _ = expired.changed() => {
                    let gone = super::ApiError::gone(format!("too old resource version: {last_rv} (watch expired)"));
                    let _ = tx.send(enc.raw("ERROR", gone.status())).await;
                    return;
                }
                _ = tick.tick(), if p.bookmarks => {
                    if last_rv > bookmarked {
                        bookmarked = last_rv;
                        if tx.send(enc.bookmark(last_rv, false)).await.is_err() { return; }
                    }
                }
                ev = events.recv() => match ev {
                    Ok(c) => {
                        if c.rv <= last_rv { continue; }
                        last_rv = c.rv;
                        if let Some(b) = deliver(&c) && tx.send(b).await.is_err() { return; }
                    }
                    // Too slow a consumer or shutdown: end the stream; the client re-watches.
                    Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    let ct = [(http::header::CONTENT_TYPE, "application/json")];
    (ct, Body::from_stream(stream)).into_response()
}
