//! Watch failures logged once per outage.
//!
//! kube's watchers retry with backoff when the API server cannot be reached, and every retry
//! yields an error. Logging each one floods the log during an outage (a line per watch every few
//! seconds, for as long as it lasts) and says nothing new after the first. [`log_watch_errors`]
//! logs the first failure of an outage as a warning, the retries at debug level, and one line
//! when the watch works again with how long it failed and how many retries it took. The errors
//! themselves pass through unchanged, for callers that act on them.

use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::runtime::watcher;

/// What one watch event means for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Note {
    /// The first failure of an outage: a warning.
    Started,
    /// Another failure of the same outage: debug.
    Again,
    /// The watch works again after `retries` failures over `lasted`: one info line.
    Ended { lasted: Duration, retries: u64 },
    /// Nothing to say.
    Quiet,
}

/// Whether a watch is failing, since when and how often.
#[derive(Debug, Default)]
struct Outage {
    since: Option<Instant>,
    retries: u64,
}

impl Outage {
    fn failed(&mut self, now: Instant) -> Note {
        self.retries += 1;
        if self.since.is_none() {
            self.since = Some(now);
            Note::Started
        } else {
            Note::Again
        }
    }

    fn worked(&mut self, now: Instant) -> Note {
        match self.since.take() {
            Some(since) => Note::Ended {
                lasted: now.saturating_duration_since(since),
                retries: std::mem::take(&mut self.retries),
            },
            None => Note::Quiet,
        }
    }
}

/// The HTTP status the API server answered a failed watch or list with (`None`: no answer, e.g.
/// the server cannot be reached): 403 is RBAC, 404 a resource the server does not serve.
pub fn watch_error_status(error: &watcher::Error) -> Option<u16> {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => match e {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        },
        watcher::Error::WatchError(status) => Some(status.code),
        watcher::Error::NoResourceVersion => None,
    }
}

/// Logs the errors of the watch `what` (e.g. `"Node"`) once per outage and passes every item
/// through: a warning at the first failure, debug lines for the retries, and an info line when
/// an event arrives again. Put it after `default_backoff()` (or any other backoff).
pub fn log_watch_errors<S, K>(stream: S, what: &'static str) -> impl Stream<Item = S::Item>
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let mut outage = Outage::default();
    stream.inspect(move |item| {
        let note = match item {
            Ok(_) => outage.worked(Instant::now()),
            Err(_) => outage.failed(Instant::now()),
        };
        match (note, item) {
            (Note::Started, Err(error)) => tracing::warn!(
                what,
                %error,
                "watch failed; retrying with backoff (logged once until it works again)"
            ),
            (Note::Again, Err(error)) => tracing::debug!(what, %error, "watch still failing"),
            (Note::Ended { lasted, retries }, _) => tracing::info!(
                what,
                failed_seconds = lasted.as_secs_f64(),
                retries,
                "watch works again"
            ),
            _ => {}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_noted_when_it_starts_and_when_it_ends() {
        let t0 = Instant::now();
        let mut outage = Outage::default();
        assert_eq!(outage.worked(t0), Note::Quiet);
        assert_eq!(outage.failed(t0), Note::Started);
        assert_eq!(outage.failed(t0 + Duration::from_secs(1)), Note::Again);
        assert_eq!(outage.failed(t0 + Duration::from_secs(3)), Note::Again);
        assert_eq!(
            outage.worked(t0 + Duration::from_secs(10)),
            Note::Ended {
                lasted: Duration::from_secs(10),
                retries: 3
            }
        );
        assert_eq!(outage.worked(t0 + Duration::from_secs(11)), Note::Quiet);
        // The next outage starts afresh.
        assert_eq!(outage.failed(t0 + Duration::from_secs(20)), Note::Started);
        assert_eq!(
            outage.worked(t0 + Duration::from_secs(21)),
            Note::Ended {
                lasted: Duration::from_secs(1),
                retries: 1
            }
        );
    }

    #[test]
    fn the_status_of_a_refused_watch_is_read_whatever_the_stage() {
        let status = |code| {
            kube::core::Status::failure("no", "Forbidden")
                .with_code(code)
                .boxed()
        };
        let cases = [
            (
                watcher::Error::WatchStartFailed(kube::Error::Api(status(403))),
                Some(403),
            ),
            (
                watcher::Error::InitialListFailed(kube::Error::Api(status(404))),
                Some(404),
            ),
            (
                watcher::Error::WatchFailed(kube::Error::Api(status(500))),
                Some(500),
            ),
            (watcher::Error::WatchError(status(410)), Some(410)),
            (watcher::Error::NoResourceVersion, None),
        ];
        for (error, want) in cases {
            assert_eq!(watch_error_status(&error), want, "{error}");
        }
    }

    #[tokio::test]
    async fn every_item_passes_through() {
        let items: Vec<Result<watcher::Event<k8s_openapi::api::core::v1::Pod>, watcher::Error>> = vec![
            Err(watcher::Error::NoResourceVersion),
            Err(watcher::Error::NoResourceVersion),
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitDone),
        ];
        let out: Vec<_> = log_watch_errors(futures::stream::iter(items), "Pod")
            .collect()
            .await;
        assert_eq!(out.len(), 4);
        assert!(out[0].is_err() && out[1].is_err());
        assert!(matches!(out[3], Ok(watcher::Event::InitDone)));
    }
}
