//! The metric clock: the times samples are stored and windows are queried at. It follows the
//! wall clock (so NodeMetric windows and times line up with the rest of the cluster) but never
//! steps: between two readings it advances by what the monotonic clock says elapsed, and when
//! the wall clock disagrees by more than [`STEP_TOLERANCE`] (an operator or a time daemon
//! stepped it, a VM resumed with a stale clock) the difference is absorbed into an offset
//! instead of the samples' timeline. Without it a step back would make every append out of
//! order (no usage, so no suppress or memory eviction, until the wall clock caught up again)
//! and a step forward would empty every window at once.
//!
//! Slewing (the daemon's normal small corrections) stays within the tolerance and is followed.
//! State kept in [`std::time::Instant`]s (cool-downs, the in-flight evictions, the fast
//! suppress state machine, host application CPU rates) is immune to steps by construction.

use std::time::{Duration, Instant, SystemTime};

use super::MetricTime;

/// A wall-clock change larger than this between two readings, beyond the monotonic elapsed
/// time, is a step and is absorbed. Slews are far smaller (at most 0.5 ms per second).
pub const STEP_TOLERANCE: Duration = Duration::from_secs(2);

/// Converts clock readings to [`MetricTime`]s that never go back and never jump.
#[derive(Debug, Clone, Default)]
pub struct MetricClock {
    last: Option<(Instant, MetricTime)>,
    /// Wall time minus metric time, ms: the sum of the steps absorbed so far.
    offset_ms: i64,
    steps: u64,
}

impl MetricClock {
    /// The metric time of a reading (`wall`, `mono`) taken now. Readings must come in
    /// monotonic order (they do: one clock, one mutex).
    pub fn read(&mut self, wall: SystemTime, mono: Instant) -> MetricTime {
        let wall = MetricTime::from_system_time(wall).as_millis();
        let now = match self.last {
            None => wall,
            Some((last_mono, last)) => {
                let elapsed =
                    i64::try_from(mono.saturating_duration_since(last_mono).as_millis()).unwrap_or(i64::MAX);
                let expected = last.as_millis().saturating_add(elapsed);
                let following = wall.saturating_sub(self.offset_ms);
                let tolerance = STEP_TOLERANCE.as_millis() as i64;
                if following.abs_diff(expected) > tolerance.unsigned_abs() {
                    self.offset_ms = wall.saturating_sub(expected);
                    self.steps += 1;
                    tracing::warn!(
                        step_ms = following.saturating_sub(expected),
                        "the wall clock stepped; metric windows keep their timeline"
                    );
                    expected
                } else {
                    following
                }
            }
        };
        // Never back, and a new reading is always a new millisecond for the stores.
        let now = match self.last {
            Some((_, last)) if now <= last.as_millis() => last.as_millis() + 1,
            _ => now,
        };
        self.last = Some((mono, MetricTime(now)));
        MetricTime(now)
    }

    /// Reads the real clocks.
    pub fn now(&mut self) -> MetricTime {
        self.read(SystemTime::now(), Instant::now())
    }

    /// The wall time of metric time `t` (NodeMetric's `updateTime` is wall time).
    pub fn wall_of(&self, t: MetricTime) -> MetricTime {
        MetricTime(t.as_millis().saturating_add(self.offset_ms))
    }

    /// Steps absorbed since start.
    pub fn steps(&self) -> u64 {
        self.steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    /// Reads every second for `n` seconds with the wall clock `wall(i)`.
    fn run(
        clock: &mut MetricClock,
        t0: Instant,
        from: u64,
        n: u64,
        wall: impl Fn(u64) -> SystemTime,
    ) -> Vec<i64> {
        (from..from + n)
            .map(|i| clock.read(wall(i), t0 + Duration::from_secs(i)).as_millis())
            .collect()
    }

    #[test]
    fn follows_a_steady_wall_clock() {
        let (w0, t0) = (SystemTime::UNIX_EPOCH + HOUR * 1000, Instant::now());
        let mut clock = MetricClock::default();
        let times = run(&mut clock, t0, 0, 5, |i| w0 + Duration::from_secs(i));
        let start = MetricTime::from_system_time(w0).as_millis();
        assert_eq!(times, (0..5).map(|i| start + i * 1000).collect::<Vec<_>>());
        assert_eq!(clock.steps(), 0);
        assert_eq!(clock.wall_of(MetricTime(times[4])), MetricTime(times[4]));
    }

    #[test]
    fn a_step_back_or_forward_keeps_the_timeline_and_the_wall_time_of_reports() {
        for step in [-(HOUR.as_secs() as i64), HOUR.as_secs() as i64] {
            let (w0, t0) = (SystemTime::UNIX_EPOCH + HOUR * 1000, Instant::now());
            let wall = |i: u64| {
                let base = w0 + Duration::from_secs(i);
                match (i >= 3, step < 0) {
                    (false, _) => base,
                    (true, true) => base - HOUR,
                    (true, false) => base + HOUR,
                }
            };
            let mut clock = MetricClock::default();
            let times = run(&mut clock, t0, 0, 6, wall);
            let diffs: Vec<i64> = times.windows(2).map(|w| w[1] - w[0]).collect();
            assert_eq!(diffs, [1000; 5], "step {step}");
            assert_eq!(clock.steps(), 1);
            // Reports still carry the (new) wall time.
            assert_eq!(
                clock.wall_of(MetricTime(times[5])),
                MetricTime::from_system_time(wall(5)),
                "step {step}"
            );
        }
    }

    #[test]
    fn slewing_is_followed_and_time_never_repeats() {
        let (w0, t0) = (SystemTime::UNIX_EPOCH + HOUR * 1000, Instant::now());
        let mut clock = MetricClock::default();
        // The wall clock runs 100 ms per second slow (far more than any slew), then stands still.
        let times = run(&mut clock, t0, 0, 4, |i| w0 + Duration::from_millis(i * 900));
        assert_eq!(clock.steps(), 0);
        let still = clock.read(w0 + Duration::from_millis(2700), t0 + Duration::from_millis(3500));
        assert_eq!(times[3] - times[0], 2700);
        assert_eq!(still.as_millis(), times[3] + 1);
    }
}
