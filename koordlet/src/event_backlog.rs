//! Events that could not be published (the API server was unreachable), kept to be published
//! once it answers again, by one rule: one pending Event per pod and reason. A later failure
//! for the same pod and reason replaces the note (the newest numbers) and counts the attempt;
//! the Event published after recovery says how many attempts it stands for and when the first
//! was. An outage therefore costs at most one Event per pod and reason, never one per round,
//! and loses none up to [`MAX_PENDING`] pods and reasons (beyond that the newest are dropped
//! with a log line and counted).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tracing::{info, warn};

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
    pub fn keep(&mut self, event: Event, reference: ObjectReference, now: jiff::Timestamp) {
        let key = (reference.uid.clone().unwrap_or_default(), event.reason.clone());
        if let Some(pending) = self.pending.get_mut(&key) {
            pending.note = event.note.unwrap_or_default();
            pending.attempts = pending.attempts.saturating_add(1);
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            self.dropped += 1;
            warn!(reason = %event.reason, dropped = self.dropped,
                  "Event backlog full: an Event that could not be published is dropped");
            return;
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

    /// Publishes what waits, oldest pod first; stops at the first failure (still unreachable)
    /// and keeps the rest. Returns how many were published.
    pub async fn flush(&mut self, recorder: &Recorder) -> usize {
        let mut published = 0;
        while let Some((key, pending)) = self.pending.first_key_value() {
            let key = key.clone();
            if let Err(e) = recorder
                .publish(&Self::deferred(pending), &pending.reference)
                .await
            {
                warn!(error = %e, waiting = self.pending.len(), "Events still cannot be published");
                break;
            }
            self.pending.remove(&key);
            published += 1;
        }
        if published > 0 {
            info!(
                published,
                "Events kept while the API server was unreachable are published"
            );
        }
        published
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
