//! What the story has seen so far: per node a bounded history of samples, the event log, and
//! the facts the summary is made of. Both views render from this alone.

use std::collections::VecDeque;
use std::time::Duration;

use super::observe::NodeSample;
use super::timeline::Act;

/// Samples kept per node (two minutes at one a second): memory never grows with the duration.
pub const HISTORY: usize = 120;

/// One line of the event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Time since the story started (setup included).
    pub at: Duration,
    /// What happened.
    pub text: String,
}

/// A sample with the act it was taken in.
#[derive(Debug, Clone, PartialEq)]
pub struct Moment {
    /// The act (None: before the timeline started).
    pub act: Option<Act>,
    /// The figures.
    pub sample: NodeSample,
}

/// One node's history.
#[derive(Debug, Clone, Default)]
pub struct NodeTrack {
    /// Node name.
    pub name: String,
    /// Recent samples, oldest first.
    pub history: VecDeque<Moment>,
    /// Every sample ever taken, reduced to the figures the summary compares per act.
    pub figures: Vec<(Act, NodeSample)>,
    /// BE pods evicted from this node.
    pub evictions: usize,
}

impl NodeTrack {
    /// The latest sample.
    pub fn latest(&self) -> Option<&NodeSample> {
        self.history.back().map(|m| &m.sample)
    }
}

/// A BE pod as the webhook admitted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// `namespace/name`.
    pub pod: String,
    /// The node it was pinned to.
    pub node: String,
    /// Priority the profile gave it.
    pub priority: Option<i32>,
    /// Requested batch-cpu (milli) and batch-memory (bytes), absent when not rewritten.
    pub batch_requests: Option<(i64, i64)>,
    /// Whether the profile's label was added.
    pub mutated: bool,
    /// Whether it reached Running.
    pub running: bool,
}

/// A BE pod evicted, with its Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// `namespace/name`.
    pub pod: String,
    /// The node it ran on.
    pub node: String,
    /// Event reason (`evictPodSuccess`).
    pub reason: String,
    /// Event message (the strategy and its numbers).
    pub message: String,
    /// When it was seen.
    pub at: Duration,
}

/// Everything both views need.
#[derive(Debug, Clone, Default)]
pub struct StoryState {
    /// Where the pods run (real cgroups or the fake tree, and why).
    pub cgroups: String,
    /// The played duration.
    pub duration: Duration,
    /// Time since the story started (setup included).
    pub elapsed: Duration,
    /// Time into the played part, once it started.
    pub played: Option<Duration>,
    /// The current act.
    pub act: Option<Act>,
    /// Per node, first node first.
    pub nodes: Vec<NodeTrack>,
    /// The event log, oldest first.
    pub log: Vec<LogEntry>,
    /// BE pods the webhook admitted.
    pub admissions: Vec<Admission>,
    /// BE pods evicted.
    pub evictions: Vec<Eviction>,
    /// Figures of the memory act: first node capacity, BE cache, LS cache (bytes), or why it
    /// was left out.
    pub memory: Option<Result<(u64, u64, u64), String>>,
    /// Set when the story is over.
    pub finished: bool,
}

/// Cores from milli-cores, for text.
pub fn cores(milli: i64) -> String {
    format!("{:.2}", milli as f64 / 1000.0)
}

/// GiB from bytes, for text.
pub fn gib(bytes: i64) -> String {
    format!("{:.2}", bytes as f64 / f64::from(1u32 << 30))
}

/// A quota in cores (`unlimited` for −1).
pub fn quota(us: i64) -> String {
    if us < 0 {
        "unlimited".into()
    } else {
        format!("{} cores", cores(us / 100))
    }
}

impl StoryState {
    /// A state for `nodes`.
    pub fn new(nodes: &[String], duration: Duration) -> Self {
        StoryState {
            duration,
            nodes: nodes
                .iter()
                .map(|n| NodeTrack {
                    name: n.clone(),
                    ..NodeTrack::default()
                })
                .collect(),
            ..StoryState::default()
        }
    }

    /// Adds a log line at the current time.
    pub fn log(&mut self, text: impl Into<String>) {
        self.log.push(LogEntry {
            at: self.elapsed,
            text: text.into(),
        });
    }

    /// Records one sample per node; logs the changes worth a line (batch resources moved,
    /// BE quota moved by a tenth or more, LS burst granted).
    pub fn record(&mut self, samples: Vec<(String, NodeSample)>) {
        let act = self.act;
        let mut lines = Vec::new();
        for (name, sample) in samples {
            let Some(track) = self.nodes.iter_mut().find(|t| t.name == name) else {
                continue;
            };
            if let Some(before) = track.latest() {
                if before.batch_cpu_milli != sample.batch_cpu_milli
                    && let Some(now) = sample.batch_cpu_milli
                {
                    let was = before.batch_cpu_milli.map_or("none".into(), cores);
                    let memory = sample.batch_memory_bytes.map_or("none".into(), gib);
                    lines.push(format!(
                        "{name}: batch-cpu {was} -> {} cores, batch-memory {memory} GiB",
                        cores(now)
                    ));
                }
                if let (Some(was), Some(now)) = (before.be_quota_us, sample.be_quota_us)
                    && was != now
                    && (was < 0 || now < 0 || (was - now).abs() * 10 >= was.abs())
                {
                    lines.push(format!("{name}: BE quota {} -> {}", quota(was), quota(now)));
                }
                if before.be_cpuset != sample.be_cpuset
                    && let (Some(was), Some(now)) = (&before.be_cpuset, &sample.be_cpuset)
                {
                    lines.push(format!("{name}: BE cpuset {was} -> {now}"));
                }
                if before.ls_burst_us.unwrap_or(0) <= 0 && sample.ls_burst_us.unwrap_or(0) > 0 {
                    lines.push(format!(
                        "{name}: LS pods get CPU burst: cfs_burst_us {}",
                        sample.ls_burst_us.unwrap_or(0)
                    ));
                }
            }
            if let Some(act) = act {
                track.figures.push((act, sample.clone()));
            }
            track.history.push_back(Moment { act, sample });
            while track.history.len() > HISTORY {
                track.history.pop_front();
            }
        }
        for line in lines {
            self.log(line);
        }
    }

    /// Records an eviction (deduplicated by pod).
    pub fn evicted(&mut self, eviction: Eviction) -> bool {
        if self.evictions.iter().any(|e| e.pod == eviction.pod) {
            return false;
        }
        if let Some(track) = self.nodes.iter_mut().find(|t| t.name == eviction.node) {
            track.evictions += 1;
        }
        self.log(format!(
            "{}: BE pod {} evicted ({}): {}",
            eviction.node, eviction.pod, eviction.reason, eviction.message
        ));
        self.evictions.push(eviction);
        true
    }

    /// One status line per node, for the plain output.
    pub fn status_lines(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter_map(|t| {
                let s = t.latest()?;
                Some(format!(
                    "{}: LS {} cores, BE {} cores, batch-cpu {} cores, batch-memory {} GiB, BE quota {}, evictions {}",
                    t.name,
                    s.ls_cpu_milli.map_or("?".into(), |v| cores(v as i64)),
                    s.be_cpu_milli.map_or("?".into(), |v| cores(v as i64)),
                    s.batch_cpu_milli.map_or("none".into(), cores),
                    s.batch_memory_bytes.map_or("none".into(), gib),
                    s.be_quota_us.map_or("?".into(), quota),
                    t.evictions
                ))
            })
            .collect()
    }
}
