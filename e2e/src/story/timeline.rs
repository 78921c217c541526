//! When each act of the story happens: a pure function of the played duration, so the
//! playground, the test and a reader of `--help` agree on what plays when.

use std::time::Duration;

/// The shortest story that still shows every act: batch resources move on the report
/// interval, so each act needs a few reports.
pub const MIN_DURATION: Duration = Duration::from_secs(30);

/// One thing the story does to the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// LS traffic rises: a busy `payment` replica starts on every node.
    LsRise,
    /// LS traffic falls: the busy replicas go away.
    LsFall,
    /// An LS pod on the first node fills its cache: node memory crosses the eviction threshold.
    MemoryPressure,
    /// The cache is dropped: memory usage falls back.
    MemoryRelief,
    /// The end: the summary follows.
    End,
}

impl Step {
    /// What the step does, for the log.
    pub fn describe(self) -> &'static str {
        match self {
            Step::LsRise => "LS load rises: a busy payment replica starts on every node",
            Step::LsFall => "LS load falls: the busy payment replicas stop",
            Step::MemoryPressure => "memory pressure: an LS pod on the first node fills a large cache",
            Step::MemoryRelief => "memory relief: the LS cache pod stops",
            Step::End => "the story ends",
        }
    }
}

/// A step and when it plays, counted from the start of the played part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cue {
    /// Offset from the start.
    pub at: Duration,
    /// What happens.
    pub step: Step,
}

/// Which part of the story a moment belongs to, for the figures of the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Act {
    /// Before LS load rises.
    Calm,
    /// LS load is high.
    LsPeak,
    /// LS load fell again.
    LsAfter,
    /// The first node is short of memory.
    Memory,
}

impl Act {
    /// A short name for tables.
    pub fn label(self) -> &'static str {
        match self {
            Act::Calm => "calm",
            Act::LsPeak => "LS peak",
            Act::LsAfter => "LS fell",
            Act::Memory => "memory",
        }
    }
}

/// The cues of a story of `duration` (at least [`MIN_DURATION`]): calm for the first quarter,
/// LS peak until half time, memory pressure from 65 % to 90 %.
pub fn timeline(duration: Duration) -> Vec<Cue> {
    let at = |percent: u32| duration * percent / 100;
    vec![
        Cue {
            at: at(25),
            step: Step::LsRise,
        },
        Cue {
            at: at(50),
            step: Step::LsFall,
        },
        Cue {
            at: at(65),
            step: Step::MemoryPressure,
        },
        Cue {
            at: at(90),
            step: Step::MemoryRelief,
        },
        Cue {
            at: duration,
            step: Step::End,
        },
    ]
}

/// The act a moment `elapsed` into the story belongs to.
pub fn act_at(duration: Duration, elapsed: Duration) -> Act {
    let percent = elapsed.as_millis() * 100 / duration.as_millis().max(1);
    match percent {
        0..25 => Act::Calm,
        25..50 => Act::LsPeak,
        50..65 => Act::LsAfter,
        _ => Act::Memory,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cues_are_ordered_and_end_at_the_duration() {
        let d = Duration::from_secs(40);
        let cues = timeline(d);
        assert!(cues.windows(2).all(|w| w[0].at < w[1].at));
        assert_eq!(cues.last().map(|c| (c.at, c.step)), Some((d, Step::End)));
        assert_eq!(cues[0].at, Duration::from_secs(10));
        assert_eq!(act_at(d, Duration::from_secs(5)), Act::Calm);
        assert_eq!(act_at(d, Duration::from_secs(15)), Act::LsPeak);
        assert_eq!(act_at(d, Duration::from_secs(22)), Act::LsAfter);
        assert_eq!(act_at(d, Duration::from_secs(27)), Act::Memory);
    }
}
