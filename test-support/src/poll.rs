//! Polling until a condition holds.
//!
//! Tests against a cluster, a controller loop or the kernel observe effects that arrive "soon":
//! they poll. [`Poll`] is the one implementation (deadline, interval, one last try at the
//! deadline); [`wait_for`], [`eventually`] and [`wait_for_blocking`] are the shapes tests call,
//! which panic with a message naming what never happened, because a panic is a test's failure
//! report.

use std::time::{Duration, Instant};

use thiserror::Error;

/// How often a probe runs unless [`Poll::every`] says otherwise: fast enough that a test does not
/// wait noticeably longer than the effect takes, slow enough not to load a 2-core machine.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(50);

/// The probe never answered within the deadline.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("timed out after {timeout:?} waiting for {what}")]
pub struct TimedOut {
    /// What was awaited, as the caller described it.
    pub what: String,
    /// The deadline that passed.
    pub timeout: Duration,
}

/// A deadline and an interval for polling a probe; build with [`Poll::new`], run with
/// [`Poll::until`] (async) or [`Poll::until_blocking`] (threads, no runtime).
#[derive(Debug, Clone)]
pub struct Poll {
    what: String,
    timeout: Duration,
    interval: Duration,
}

impl Poll {
    /// Waits up to `timeout` for `what`, probing every [`DEFAULT_INTERVAL`].
    pub fn new(what: impl Into<String>, timeout: Duration) -> Self {
        Poll {
            what: what.into(),
            timeout,
            interval: DEFAULT_INTERVAL,
        }
    }

    /// Probes every `interval` instead (e.g. slower for an expensive list call).
    pub fn every(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Runs `probe` until it returns `Some`; the probe always runs at least once and once more at
    /// the deadline, so a slow probe is never cut short of its last chance.
    pub async fn until<T>(self, mut probe: impl AsyncFnMut() -> Option<T>) -> Result<T, TimedOut> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(value) = probe().await {
                return Ok(value);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self.timed_out());
            }
            tokio::time::sleep(self.interval.min(deadline - now)).await;
        }
    }

    /// [`Poll::until`] for code without an async runtime (kernel tests, threads).
    pub fn until_blocking<T>(self, mut probe: impl FnMut() -> Option<T>) -> Result<T, TimedOut> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(value) = probe() {
                return Ok(value);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self.timed_out());
            }
            std::thread::sleep(self.interval.min(deadline - now));
        }
    }

    fn timed_out(self) -> TimedOut {
        TimedOut {
            what: self.what,
            timeout: self.timeout,
        }
    }
}

/// Polls `probe` until it answers and returns the answer; panics naming `what` after `timeout`.
#[allow(clippy::panic)] // a test helper: the panic is the test's failure report
pub async fn wait_for<T>(what: &str, timeout: Duration, probe: impl AsyncFnMut() -> Option<T>) -> T {
    match Poll::new(what, timeout).until(probe).await {
        Ok(value) => value,
        Err(timed_out) => panic!("{timed_out}"),
    }
}

/// Polls `check` until it holds; panics naming `what` after `timeout`.
pub async fn eventually(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    wait_for(what, timeout, async || check().await.then_some(())).await
}

/// [`wait_for`] without an async runtime.
#[allow(clippy::panic)] // a test helper: the panic is the test's failure report
pub fn wait_for_blocking<T>(what: &str, timeout: Duration, probe: impl FnMut() -> Option<T>) -> T {
    match Poll::new(what, timeout).until_blocking(probe) {
        Ok(value) => value,
        Err(timed_out) => panic!("{timed_out}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_as_soon_as_the_probe_does() {
        let mut calls = 0;
        let started = Instant::now();
        let value = Poll::new("third call", Duration::from_secs(5))
            .every(Duration::from_millis(5))
            .until(async || {
                calls += 1;
                (calls == 3).then_some(calls)
            })
            .await;
        assert_eq!(value, Ok(3));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn times_out_naming_what_was_awaited_after_a_last_try() {
        let mut calls = 0;
        let err = Poll::new("a pod that never comes", Duration::from_millis(30))
            .every(Duration::from_millis(10))
            .until(async || {
                calls += 1;
                None::<()>
            })
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "timed out after 30ms waiting for a pod that never comes"
        );
        assert!(calls >= 2, "probed at the start and at the deadline, got {calls}");
    }

    #[tokio::test]
    async fn a_zero_timeout_still_probes_once() {
        assert_eq!(
            Poll::new("now", Duration::ZERO).until(async || Some(7)).await,
            Ok(7)
        );
    }

    #[tokio::test]
    async fn eventually_returns_when_the_check_holds() {
        let mut n = 0;
        eventually("n reaches 2", Duration::from_secs(5), async || {
            n += 1;
            n >= 2
        })
        .await;
        assert_eq!(n, 2);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 20ms waiting for nothing")]
    async fn wait_for_panics_with_the_reason() {
        wait_for("nothing", Duration::from_millis(20), async || None::<()>).await;
    }

    #[test]
    fn blocking_polls_without_a_runtime() {
        let mut calls = 0;
        let value = wait_for_blocking("second call", Duration::from_secs(5), || {
            calls += 1;
            (calls == 2).then_some("done")
        });
        assert_eq!(value, "done");
        let err = Poll::new("never", Duration::from_millis(10))
            .until_blocking(|| None::<()>)
            .unwrap_err();
        assert_eq!(err.what, "never");
    }
}
