//! The end of the story: what happened, with figures, and one check per act that says whether
//! it was seen. Pure: computed from the [`StoryState`] alone.

use super::observe::NodeSample;
use super::state::{StoryState, cores, gib, quota};
use super::timeline::Act;

/// Whether an act was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Seen, with the figures.
    Seen(String),
    /// Not seen, with what was seen instead.
    NotSeen(String),
    /// Not played here, and why.
    Skipped(String),
}

/// One act of the story and whether it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What should have happened.
    pub what: &'static str,
    /// Whether it did.
    pub outcome: Outcome,
}

/// The summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Where the pods ran.
    pub cgroups: String,
    /// One line of figures per node.
    pub nodes: Vec<String>,
    /// The checks, in story order.
    pub checks: Vec<Check>,
}

impl Summary {
    /// Whether every act that was played was seen.
    pub fn all_seen(&self) -> bool {
        self.checks
            .iter()
            .all(|c| !matches!(c.outcome, Outcome::NotSeen(_)))
    }

    /// The check about `what`.
    pub fn check(&self, what: &str) -> Option<&Outcome> {
        self.checks.iter().find(|c| c.what == what).map(|c| &c.outcome)
    }
}

/// Check names, shared with the tests.
pub const BATCH_PUBLISHED: &str = "batch resources published on every node";
/// See [`BATCH_PUBLISHED`].
pub const BATCH_FOLLOWS_LS: &str = "batch-cpu follows LS load";
/// See [`BATCH_PUBLISHED`].
pub const BE_ADMITTED: &str = "BE pods mutated by the webhook and running on batch resources";
/// See [`BATCH_PUBLISHED`].
pub const BE_SUPPRESSED: &str = "BE CPU suppressed under LS load";
/// See [`BATCH_PUBLISHED`].
pub const LS_BURST: &str = "LS pods get CPU burst";
/// See [`BATCH_PUBLISHED`].
pub const BE_EVICTED: &str = "memory pressure evicts a BE pod through the Eviction API";

fn in_act(figures: &[(Act, NodeSample)], act: Act) -> impl Iterator<Item = &NodeSample> {
    figures.iter().filter(move |(a, _)| *a == act).map(|(_, s)| s)
}

/// The last value of `field` in `act` and its smallest and largest.
fn span(
    figures: &[(Act, NodeSample)],
    act: Act,
    field: fn(&NodeSample) -> Option<i64>,
) -> Option<(i64, i64, i64)> {
    let values: Vec<i64> = in_act(figures, act).filter_map(field).collect();
    Some((*values.last()?, *values.iter().min()?, *values.iter().max()?))
}

fn positive_quota(s: &NodeSample) -> Option<i64> {
    s.be_quota_us.filter(|q| *q > 0)
}

fn cpuset_size(s: &NodeSample) -> Option<i64> {
    let text = s.be_cpuset.as_deref()?;
    let mut count = 0;
    for part in text.split(',').filter(|p| !p.is_empty()) {
        count += match part.split_once('-') {
            Some((a, b)) => b.parse::<i64>().ok()? - a.parse::<i64>().ok()? + 1,
            None => 1,
        };
    }
    Some(count)
}

/// Summarises `state`.
pub fn summarize(state: &StoryState) -> Summary {
    let mut nodes = Vec::new();
    let (mut published, mut follows, mut suppressed, mut burst) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut all_published = !state.nodes.is_empty();
    let burst_readable = state
        .nodes
        .iter()
        .any(|t| t.figures.iter().any(|(_, s)| s.ls_burst_us.is_some()));
    for track in &state.nodes {
        let f = &track.figures;
        let batch = |s: &NodeSample| s.batch_cpu_milli;
        let calm = span(f, Act::Calm, batch);
        let peak = span(f, Act::LsPeak, batch);
        // Batch resources move on Node events and reports, which may come after the LS act.
        let after = span(f, Act::LsAfter, batch)
            .or(span(f, Act::Memory, batch))
            .map(|(last, min, max)| {
                let memory_max = span(f, Act::Memory, batch).map_or(max, |m| m.2.max(max));
                (last, min, memory_max)
            });
        let q_calm = span(f, Act::Calm, positive_quota);
        let q_peak = span(f, Act::LsPeak, positive_quota);
        let s_calm = span(f, Act::Calm, cpuset_size);
        let s_peak = span(f, Act::LsPeak, cpuset_size);
        let be_calm = span(f, Act::Calm, |s| s.be_cpu_milli.map(|v| v as i64));
        let be_peak = span(f, Act::LsPeak, |s| s.be_cpu_milli.map(|v| v as i64));
        let max_burst = f.iter().filter_map(|(_, s)| s.ls_burst_us).max();
        match calm {
            Some((c, _, _)) if c > 0 => published.push(format!("{} {} cores", track.name, cores(c))),
            _ => all_published = false,
        }
        if let (Some((c, _, _)), Some((_, p_min, _)), Some((_, _, a_max))) = (calm, peak, after)
            && p_min < c
            && a_max > p_min
        {
            follows.push(format!(
                "{}: {} cores calm, {} at the LS peak, {} after",
                track.name,
                cores(c),
                cores(p_min),
                cores(a_max)
            ));
        }
        if let (Some((c, _, _)), Some((_, p_min, _))) = (q_calm, q_peak)
            && p_min < c
        {
            suppressed.push(format!(
                "{}: BE quota {} calm, {} at the LS peak",
                track.name,
                quota(c),
                quota(p_min)
            ));
        } else if let (Some((c, _, _)), Some((_, p_min, _))) = (s_calm, s_peak)
            && p_min < c
        {
            suppressed.push(format!(
                "{}: BE cpuset {c} CPUs calm, {p_min} at the LS peak",
                track.name
            ));
        }
        if let Some(b) = max_burst.filter(|b| *b > 0) {
            burst.push(format!("{}: cfs_burst_us up to {b}", track.name));
        }
        nodes.push(format!(
            "{}: batch-cpu calm {} / LS peak {} / after {} cores; BE quota calm {} / peak {}; BE usage calm {} / peak {} cores; evictions {}",
            track.name,
            calm.map_or("-".into(), |c| cores(c.0)),
            peak.map_or("-".into(), |p| cores(p.1)),
            after.map_or("-".into(), |a| cores(a.2)),
            q_calm.map_or("-".into(), |q| quota(q.0)),
            q_peak.map_or("-".into(), |q| quota(q.1)),
            be_calm.map_or("-".into(), |b| cores(b.0)),
            be_peak.map_or("-".into(), |b| cores(b.1)),
            track.evictions,
        ));
    }
    let seen_or = |lines: Vec<String>, otherwise: &str| {
        if lines.is_empty() {
            Outcome::NotSeen(otherwise.to_string())
        } else {
            Outcome::Seen(lines.join("; "))
        }
    };
    let admitted: Vec<String> = state
        .admissions
        .iter()
        .filter(|a| a.mutated && a.running)
        .filter_map(|a| {
            let (cpu, memory) = a.batch_requests?;
            Some(format!(
                "{} on {} (priority {}, batch-cpu {}m, batch-memory {} GiB)",
                a.pod,
                a.node,
                a.priority.unwrap_or_default(),
                cpu,
                gib(memory)
            ))
        })
        .collect();
    let evicted = match &state.memory {
        Some(Err(reason)) => Outcome::Skipped(reason.clone()),
        _ => seen_or(
            state
                .evictions
                .iter()
                .map(|e| format!("{} from {} ({}: {})", e.pod, e.node, e.reason, e.message))
                .collect(),
            "no BE pod was evicted",
        ),
    };
    let checks = vec![
        Check {
            what: BATCH_PUBLISHED,
            outcome: if all_published {
                Outcome::Seen(published.join(", "))
            } else {
                Outcome::NotSeen("a node had no batch-cpu before LS load rose".into())
            },
        },
        Check {
            what: BATCH_FOLLOWS_LS,
            outcome: seen_or(follows, "batch-cpu did not fall at the LS peak and rise after it"),
        },
        Check {
            what: BE_ADMITTED,
            outcome: if admitted.is_empty() {
                Outcome::NotSeen(format!(
                    "{} BE pods created, none both mutated and running",
                    state.admissions.len()
                ))
            } else {
                Outcome::Seen(format!(
                    "{} of {}: {}",
                    admitted.len(),
                    state.admissions.len(),
                    admitted.join(", ")
                ))
            },
        },
        Check {
            what: BE_SUPPRESSED,
            outcome: seen_or(
                suppressed,
                "neither the BE quota nor the BE cpuset went down at the LS peak",
            ),
        },
        Check {
            what: LS_BURST,
            outcome: if burst_readable {
                seen_or(burst, "no LS container got a CFS burst")
            } else {
                Outcome::Skipped("no LS cgroup has a CFS burst file (kernel older than 5.14)".into())
            },
        },
        Check {
            what: BE_EVICTED,
            outcome: evicted,
        },
    ];
    Summary {
        cgroups: state.cgroups.clone(),
        nodes,
        checks,
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "summary ({})", self.cgroups)?;
        for line in &self.nodes {
            writeln!(f, "  {line}")?;
        }
        for check in &self.checks {
            match &check.outcome {
                Outcome::Seen(detail) => writeln!(f, "  [seen]     {}: {detail}", check.what)?,
                Outcome::NotSeen(detail) => writeln!(f, "  [not seen] {}: {detail}", check.what)?,
                Outcome::Skipped(reason) => writeln!(f, "  [skipped]  {}: {reason}", check.what)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(batch: i64, quota: i64) -> NodeSample {
        NodeSample {
            batch_cpu_milli: Some(batch),
            be_quota_us: Some(quota),
            ..NodeSample::default()
        }
    }

    #[test]
    fn batch_and_quota_falling_at_the_peak_are_seen() {
        let mut state = StoryState::new(&["n".into()], std::time::Duration::from_secs(30));
        state.nodes[0].figures = vec![
            (Act::Calm, sample(3000, 400_000)),
            (Act::LsPeak, sample(2000, 300_000)),
            (Act::LsAfter, sample(2900, 390_000)),
        ];
        let summary = summarize(&state);
        assert!(matches!(summary.check(BATCH_PUBLISHED), Some(Outcome::Seen(_))));
        assert!(matches!(summary.check(BATCH_FOLLOWS_LS), Some(Outcome::Seen(_))));
        assert!(matches!(summary.check(BE_SUPPRESSED), Some(Outcome::Seen(_))));
        assert!(matches!(summary.check(BE_ADMITTED), Some(Outcome::NotSeen(_))));
        assert!(!summary.all_seen());
        assert_eq!(
            cpuset_size(&NodeSample {
                be_cpuset: Some("0-3,6".into()),
                ..NodeSample::default()
            }),
            Some(5)
        );
    }
}
