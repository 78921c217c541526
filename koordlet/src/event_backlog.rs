//! Events that could not be published (the API server was unreachable), kept to be published
//! once it answers again, by one rule: one pending Event per pod and reason. A later failure
//! for the same pod and reason replaces the note (the newest numbers) and counts the attempt;
//! the Event published after recovery says how many attempts it stands for and when the first
//! was. An outage therefore costs at most one Event per pod and reason, never one per round,
//! and loses none up to [`MAX_PENDING`] pods and reasons (beyond that the newest are dropped
//! with a log line and counted).
//!
//! Only an unreachable or overloaded API server (no answer, 408, 429, 5xx) keeps an Event: one
//! the API server refuses (its namespace is being deleted or gone) would be refused again, so
//! it is dropped with a log line and counted, and never holds back the Events behind it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::{debug, info, warn};

/// Whether publishing may work later: no answer, a timeout, throttling or a server error. Any
/// other answer is the API server refusing the Event itself.
fn unreachable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 408 | 429) || s.code >= 500,
        _ => true,
    }
}

/// `namespace/name` of the object an Event is about, for log lines.
fn object_name(reference: &ObjectReference) -> String {
    format!(
        "{}/{}",
        reference.namespace.as_deref().unwrap_or_default(),
        reference.name.as_deref().unwrap_or_default()
    )
}

/// Publishes Events through kube's [`Recorder`] and keeps those the API server could not take
/// (see the module docs).
pub struct EventPublisher {
    client: kube::Client,
    reporter: Reporter,
    recorder: Recorder,
    backlog: EventBacklog,
    refused: u64,
    /// The last flush stopped at an unreachable API server (logged once until one works).
    flush_failing: bool,
}

impl EventPublisher {
    /// Events reported by `reporter` through `client`.
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            client,
            reporter,
            backlog: EventBacklog::default(),
            refused: 0,
            flush_failing: false,
        }
    }

    /// One attempt. The recorder patches the Event it created before for the same object,
    /// reason and action; when that Event is gone (deleted with its namespace, or expired) the
    /// patch gets 404 however often it is retried, so the recorder starts afresh and creates it.
    async fn send(&mut self, event: &Event, reference: &ObjectReference) -> Result<(), kube::Error> {
        match self.recorder.publish(event, reference).await {
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.recorder = Recorder::new(self.client.clone(), self.reporter.clone());
                self.recorder.publish(event, reference).await
            }
            other => other,
        }
    }

    fn refuse(&mut self, reason: &str, reference: &ObjectReference, error: &kube::Error) {
        self.refused += 1;
        warn!(object = %object_name(reference), reason = %reason, error = %error, refused = self.refused,
              "the API server refused an Event; dropped");
    }

    /// Publishes `event` about `reference`: kept for later when the API server cannot be
    /// reached, dropped (logged, counted) when it refuses it.
    pub async fn publish(&mut self, event: Event, reference: ObjectReference, now: jiff::Timestamp) {
        match self.send(&event, &reference).await {
            Ok(()) => {}
            Err(e) if unreachable(&e) => {
                let object = object_name(&reference);
                let reason = event.reason.clone();
                // Logged when an Event starts waiting, not each round its pod and reason fail.
                if self.backlog.keep(event, reference, now) {
                    warn!(object = %object, reason = %reason, error = %e,
                          "cannot publish Event; kept to publish when the API server answers");
                } else {
                    debug!(object = %object, reason = %reason, error = %e,
                           "cannot publish Event; the one waiting for this object and reason takes its note");
                }
            }
            Err(e) => self.refuse(&event.reason, &reference, &e),
        }
    }

    /// Publishes what waits, oldest pod first; stops at the first Event that cannot reach the
    /// API server and keeps it and the rest; drops those refused. Returns how many were
    /// published.
    pub async fn flush(&mut self) -> usize {
        let mut published = 0;
        let mut stopped = None;
        while let Some((key, pending)) = self.backlog.pending.first_key_value() {
            let (key, event, reference) = (
                key.clone(),
                EventBacklog::deferred(pending),
                pending.reference.clone(),
            );
            match self.send(&event, &reference).await {
                Ok(()) => published += 1,
                Err(e) if unreachable(&e) => {
                    stopped = Some(e);
                    break;
                }
                Err(e) => self.refuse(&event.reason, &reference, &e),
            }
            self.backlog.pending.remove(&key);
        }
        if published > 0 {
            info!(
                published,
                "Events kept while the API server was unreachable are published"
            );
        }
        match stopped {
            // Logged once until a flush gets through, not every round.
            Some(e) if self.flush_failing => {
                debug!(error = %e, waiting = self.backlog.len(), "Events still cannot be published");
            }
            Some(e) => {
                warn!(error = %e, waiting = self.backlog.len(),
                      "Events still cannot be published; retried every round (logged again once they are)");
                self.flush_failing = true;
            }
            None => self.flush_failing = false,
        }
        published
    }

    /// Events waiting for the API server.
    pub fn waiting(&self) -> usize {
        self.backlog.len()
    }

    /// Events the API server refused (dropped).
    pub fn refused(&self) -> u64 {
        self.refused
    }
}

/// Pending (pod, reason) pairs kept at most.
pub const MAX_PENDING: usize = 256;

/// An Event's parts (kube's `Event` is neither `Clone` nor `Debug`).
#[derive(Debug, Clone)]
struct Pending {
    warning: bool,
    reason: String,
    note: String,
    action: String,
    reference: ObjectReference,
    attempts: u32,
    first: jiff::Timestamp,
}

/// The Events waiting for the API server.
#[derive(Debug, Default)]
pub struct EventBacklog {
    pending: BTreeMap<(String, String), Pending>,
    dropped: u64,
}

impl EventBacklog {
    /// Keeps `event` about `reference` for later (see the module docs for the rule).
    /// Returns true when the Event starts waiting (no Event for its pod and reason waited).
    pub fn keep(&mut self, event: Event, reference: ObjectReference, now: jiff::Timestamp) -> bool {
        let key = (reference.uid.clone().unwrap_or_default(), event.reason.clone());
        if let Some(pending) = self.pending.get_mut(&key) {
            pending.note = event.note.unwrap_or_default();
            pending.attempts = pending.attempts.saturating_add(1);
            return false;
        }
        if self.pending.len() >= MAX_PENDING {
            self.dropped += 1;
            warn!(reason = %event.reason, dropped = self.dropped,
                  "Event backlog full: an Event that could not be published is dropped");
            return false;
        }
        self.pending.insert(
            key,
            Pending {
                warning: event.type_ == EventType::Warning,
                reason: event.reason,
                note: event.note.unwrap_or_default(),
                action: event.action,
                reference,
                attempts: 1,
                first: now,
            },
        );
        true
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Events dropped because the backlog was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The Event as it will be published: the note gains the attempt count and first time.
    fn deferred(pending: &Pending) -> Event {
        let suffix = format!(
            " (published late: the API server was unreachable; {} attempt(s) since {})",
            pending.attempts, pending.first
        );
        // The API server caps notes at 1 kB: the suffix wins over the note's tail.
        let keep = 1000usize.saturating_sub(suffix.chars().count());
        Event {
            type_: if pending.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: pending.reason.clone(),
            note: Some(pending.note.chars().take(keep).collect::<String>() + &suffix),
            action: pending.action.clone(),
            secondary: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(reason: &str, note: &str) -> Event {
        Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note.into()),
            action: "Evict".into(),
            secondary: None,
        }
    }

    fn pod(uid: &str) -> ObjectReference {
        ObjectReference {
            uid: Some(uid.into()),
            name: Some(uid.into()),
            ..ObjectReference::default()
        }
    }

    /// A fake API server for Events: answers 503 to everything while `down`, else 404 to a
    /// create in namespace `gone` and to a patch (the Event was deleted), 201/200 otherwise.
    /// Returns the client, the `down` switch and the request log (`METHOD namespace`).
    fn server() -> (
        kube::Client,
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    ) {
        use std::sync::{Arc, Mutex, atomic::AtomicBool, atomic::Ordering};
        let down = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (is_down, seen) = (down.clone(), log.clone());
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let (down, log) = (is_down.load(Ordering::SeqCst), seen.clone());
            async move {
                let namespace = req
                    .uri()
                    .path()
                    .split('/')
                    .skip_while(|p| *p != "namespaces")
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                let method = req.method().clone();
                log.lock().unwrap().push(format!("{method} {namespace}"));
                let body = req.into_body().collect_bytes().await.unwrap();
                let (status, reply) = if down {
                    (
                        503,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "code": 503, "reason": "ServiceUnavailable", "message": "unavailable"}),
                    )
                } else if namespace == "gone" || method == http::Method::PATCH {
                    (
                        404,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "code": 404, "reason": "NotFound", "message": "not found"}),
                    )
                } else {
                    let code = if method == http::Method::POST { 201 } else { 200 };
                    (code, serde_json::from_slice(&body).unwrap())
                };
                let response = http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&reply).unwrap()))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        (kube::Client::new(service, "default"), down, log)
    }

    fn in_namespace(uid: &str, namespace: &str) -> ObjectReference {
        ObjectReference {
            namespace: Some(namespace.into()),
            ..pod(uid)
        }
    }

    fn reporter() -> Reporter {
        Reporter {
            controller: "koordlet".into(),
            instance: Some("node".into()),
        }
    }

    #[tokio::test]
    async fn an_event_refused_is_dropped_and_does_not_hold_back_the_others() {
        let (client, down, log) = server();
        let mut events = EventPublisher::new(client, reporter());
        let now = jiff::Timestamp::UNIX_EPOCH;
        down.store(true, std::sync::atomic::Ordering::SeqCst);
        // The API server cannot be reached: both are kept.
        events
            .publish(event("evictPodFail", "a"), in_namespace("a", "gone"), now)
            .await;
        events
            .publish(event("evictPodFail", "b"), in_namespace("b", "ns"), now)
            .await;
        assert_eq!((events.waiting(), events.refused()), (2, 0));
        assert_eq!(events.flush().await, 0, "still down: nothing published");
        assert_eq!(events.waiting(), 2);
        assert!(events.flush_failing, "the next failing flush logs at debug only");
        // It answers: the Event whose namespace is gone is refused and dropped (its 404 tried
        // once more with a fresh recorder), the one behind it is published.
        down.store(false, std::sync::atomic::Ordering::SeqCst);
        log.lock().unwrap().clear();
        assert_eq!(events.flush().await, 1);
        assert_eq!((events.waiting(), events.refused()), (0, 1));
        assert!(!events.flush_failing, "a failure after this one warns again");
        assert_eq!(*log.lock().unwrap(), ["POST gone", "POST gone", "POST ns"]);
        // Refused at once: not kept either.
        events
            .publish(event("evictPodFail", "c"), in_namespace("c", "gone"), now)
            .await;
        assert_eq!((events.waiting(), events.refused()), (0, 2));
    }

    #[tokio::test]
    async fn a_deleted_event_series_is_created_afresh() {
        let (client, _down, log) = server();
        let mut events = EventPublisher::new(client, reporter());
        let now = jiff::Timestamp::UNIX_EPOCH;
        events
            .publish(event("evictPodFail", "1"), in_namespace("a", "ns"), now)
            .await;
        // The same pod, reason and action again: kube's recorder patches the first Event, which
        // is gone (404); a fresh recorder creates it instead of keeping it forever.
        events
            .publish(event("evictPodFail", "2"), in_namespace("a", "ns"), now)
            .await;
        assert_eq!(*log.lock().unwrap(), ["POST ns", "PATCH ns", "POST ns"]);
        assert_eq!((events.waiting(), events.refused()), (0, 0));
    }

    #[test]
    fn one_pending_event_per_pod_and_reason_with_the_newest_note() {
        let t0: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut backlog = EventBacklog::default();
        for round in 0..5 {
            backlog.keep(event("evictPodFail", &format!("round {round}")), pod("a"), t0);
        }
        backlog.keep(event("evictPodSuccess", "ok"), pod("a"), t0);
        backlog.keep(event("evictPodFail", "b"), pod("b"), t0);
        assert_eq!(backlog.len(), 3);
        let pending = &backlog.pending[&("a".to_string(), "evictPodFail".to_string())];
        let note = EventBacklog::deferred(pending).note.unwrap();
        assert!(note.starts_with("round 4 (published late"), "{note}");
        assert!(note.contains("5 attempt(s) since 2026-01-01T00:00:00Z"), "{note}");
    }

    #[test]
    fn bounded_and_notes_stay_within_the_api_limit() {
        let t0 = jiff::Timestamp::UNIX_EPOCH;
        let mut backlog = EventBacklog::default();
        for i in 0..MAX_PENDING + 10 {
            backlog.keep(
                event("evictPodFail", &"x".repeat(2000)),
                pod(&format!("p{i}")),
                t0,
            );
        }
        assert_eq!(backlog.len(), MAX_PENDING);
        assert_eq!(backlog.dropped(), 10);
        let first = backlog.pending.values().next().unwrap();
        let note = EventBacklog::deferred(first).note.unwrap();
        assert_eq!(note.chars().count(), 1000);
        assert!(note.ends_with("since 1970-01-01T00:00:00Z)"), "{note}");
    }
}
