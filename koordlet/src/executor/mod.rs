//! Applies plans of cgroup writes.
//!
//! Strategies decide; this module acts. For every [`CgroupWrite`] of a plan it:
//! 1. skips it when the executor wrote the same value to the same file less than
//!    [`ExecutorConfig::force_refresh`] ago (the cache; after that period the value is checked and
//!    rewritten if someone else changed it);
//! 2. reads what the kernel holds and orders the writes so no intermediate state is refused by
//!    the kernel ([`order`]);
//! 3. validates and writes only values that differ from the file (compared semantically);
//! 4. logs one audit line per real change (`cgroup`, `file`, `old -> new`, `strategy`) on the
//!    `koordlet::audit` target; in dry-run mode the same line says `dry_run=true` and nothing is
//!    written.
//!
//! A failed write never stops the round: it is reported in [`ApplyReport::errors`]. Writes to
//! unsupported files (logged once by [`Cgroups`]) and to cgroups that vanished are counted and
//! skipped quietly.

pub mod order;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::system::{CgroupDir, CgroupResource, CgroupValue, Cgroups, SystemError};

pub use koordlet_core::CgroupWrite;

pub use order::Step;

/// Executor settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// How long a written value is trusted before it is checked again (upstream
    /// `--resource-force-update-seconds`, 60 s).
    pub force_refresh: Duration,
    /// Decide and log, write nothing.
    pub dry_run: bool,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            force_refresh: Duration::from_secs(60),
            dry_run: false,
        }
    }
}

/// One change made (or, in dry-run, that would have been made).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedChange {
    /// The cgroup directory.
    pub cgroup: CgroupDir,
    /// The file name as on this node (`cpu.max` on v2).
    pub file: String,
    /// The resource.
    pub resource: CgroupResource,
    /// Content before.
    pub old: String,
    /// Content written.
    pub new: String,
    /// The strategy that asked.
    pub strategy: String,
    /// True for a temporary value of the ordering rules.
    pub intermediate: bool,
}

/// A write that failed.
#[derive(Debug)]
pub struct WriteFailure {
    /// The write.
    pub write: CgroupWrite,
    /// Why.
    pub error: SystemError,
}

/// How long one cgroup file write took in the kernel (dry-run writes are not timed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteTiming {
    /// The resource written.
    pub resource: CgroupResource,
    /// True when the kernel accepted the write.
    pub ok: bool,
    /// Time spent in the write.
    pub elapsed: Duration,
}

/// What one [`Executor::apply`] did.
#[derive(Debug, Default)]
pub struct ApplyReport {
    /// Changes written (or logged, in dry-run), in order.
    pub changes: Vec<AppliedChange>,
    /// Skipped: same value written recently (cache hit).
    pub skipped_cached: usize,
    /// Skipped: the file already held the value.
    pub skipped_unchanged: usize,
    /// Skipped: the kernel has no such file here.
    pub skipped_unsupported: usize,
    /// Skipped: the cgroup directory is gone (or not created yet).
    pub skipped_missing: usize,
    /// Writes that failed (invalid value, I/O error, kernel refusal).
    pub errors: Vec<WriteFailure>,
    /// Every write that reached the kernel, in order, with its duration.
    pub timings: Vec<WriteTiming>,
}

struct CacheEntry {
    value: CgroupValue,
    written_at: Instant,
}

/// Bound on cache entries; entries older than twice the refresh period are dropped on every
/// apply, and past this bound the whole cache is dropped (values are re-read, nothing is lost).
const MAX_CACHE_ENTRIES: usize = 65_536;

/// Applies plans to one node's cgroups. Holds the last-written cache, so keep one per node.
pub struct Executor {
    cgroups: Arc<Cgroups>,
    config: ExecutorConfig,
    /// Last-written values by cgroup, then by file (a handful per cgroup): looked up by the
    /// write's borrowed directory, so a cache hit allocates nothing.
    cache: HashMap<CgroupDir, Vec<(CgroupResource, CacheEntry)>>,
}

impl Executor {
    /// An executor writing through `cgroups`.
    pub fn new(cgroups: Arc<Cgroups>, config: ExecutorConfig) -> Self {
        Self {
            cgroups,
            config,
            cache: HashMap::new(),
        }
    }

    /// The cgroup tree it writes to.
    pub fn cgroups(&self) -> &Arc<Cgroups> {
        &self.cgroups
    }

    /// Whether it only logs (`--dry-run`): the agent's other actors (core-scheduling cookies
    /// and the cpuset policy state file) follow the same switch.
    pub fn dry_run(&self) -> bool {
        self.config.dry_run
    }

    /// Number of cached last-written values.
    pub fn cached_entries(&self) -> usize {
        self.cache.values().map(Vec::len).sum()
    }

    /// Forgets cached values for `dir` and below (a pod that went away).
    pub fn forget(&mut self, dir: &CgroupDir) {
        self.cache.retain(|d, _| !d.starts_with(dir));
        self.cgroups.forget_dir(dir);
    }

    /// Applies a plan. `now` is the caller's clock (monotonic), so tests control the refresh.
    pub fn apply(&mut self, plan: Vec<CgroupWrite>, now: Instant) -> ApplyReport {
        self.apply_writes(plan.into_iter().map(Cow::Owned), now)
    }

    /// [`Executor::apply`] for borrowed writes (a plan kept between rounds): writes the cache
    /// skips are never copied, so a round whose values are all cached allocates nothing per
    /// write.
    pub fn apply_refs<'a>(
        &mut self,
        plan: impl IntoIterator<Item = &'a CgroupWrite>,
        now: Instant,
    ) -> ApplyReport {
        self.apply_writes(plan.into_iter().map(Cow::Borrowed), now)
    }

    fn apply_writes<'a>(
        &mut self,
        plan: impl Iterator<Item = Cow<'a, CgroupWrite>>,
        now: Instant,
    ) -> ApplyReport {
        let mut report = ApplyReport::default();
        let ttl = self.config.force_refresh.saturating_mul(2);
        let mut entries = 0;
        self.cache.retain(|_, files| {
            files.retain(|(_, e)| now.saturating_duration_since(e.written_at) < ttl);
            entries += files.len();
            !files.is_empty()
        });
        if entries > MAX_CACHE_ENTRIES {
            self.cache.clear();
        }

        let mut pending = Vec::new();
        // Plans list a cgroup's files together: the last directory looked up is reused.
        let mut last: Option<(&CgroupDir, &Vec<(CgroupResource, CacheEntry)>)> = None;
        for write in plan {
            let files = match last {
                Some((dir, files)) if *dir == write.cgroup => Some(files),
                _ => {
                    last = self.cache.get_key_value(&write.cgroup);
                    last.map(|(_, files)| files)
                }
            };
            if let Some(entry) = files.and_then(|files| {
                files
                    .iter()
                    .find_map(|(r, e)| (*r == write.resource).then_some(e))
            }) && entry.value == write.value
                && now.saturating_duration_since(entry.written_at) < self.config.force_refresh
            {
                report.skipped_cached += 1;
                continue;
            }
            let write = write.into_owned();
            match self.cgroups.read(write.resource, &write.cgroup) {
                Ok(current) => pending.push((write, Some(current))),
                Err(e) => Self::record_error(&mut report, write, e),
            }
        }

        // Looked up without the support probe: a kernel without burst must not log about a
        // file no strategy asked for.
        let clamps = order::burst_clamps(&pending, |w| {
            let path = self
                .cgroups
                .file_path(CgroupResource::CpuCfsBurst, &w.cgroup)
                .ok()?;
            if !path.is_file() {
                return None;
            }
            match self.cgroups.read(CgroupResource::CpuCfsBurst, &w.cgroup) {
                Ok(CgroupValue::Int(v)) => Some(v),
                _ => None,
            }
        });
        for clamp in clamps {
            let current = self.cgroups.read(clamp.resource, &clamp.cgroup).ok();
            pending.push((clamp, current));
        }

        for step in order::order_writes(pending) {
            self.apply_step(step, now, &mut report);
        }
        report
    }

    fn remember(&mut self, write: &CgroupWrite, now: Instant) {
        let entry = CacheEntry {
            value: write.value.clone(),
            written_at: now,
        };
        let files = match self.cache.get_mut(&write.cgroup) {
            Some(files) => files,
            None => self.cache.entry(write.cgroup.clone()).or_default(),
        };
        match files.iter_mut().find(|(r, _)| *r == write.resource) {
            Some((_, e)) => *e = entry,
            None => files.push((write.resource, entry)),
        }
    }

    fn record_error(report: &mut ApplyReport, write: CgroupWrite, error: SystemError) {
        match error {
            SystemError::Unsupported { .. } => report.skipped_unsupported += 1,
            SystemError::CgroupDirMissing(_) => report.skipped_missing += 1,
            error => report.errors.push(WriteFailure { write, error }),
        }
    }

    fn apply_step(&mut self, step: Step, now: Instant, report: &mut ApplyReport) {
        let Step { write, intermediate } = step;
        let prepared = match self
            .cgroups
            .prepare_write(write.resource, &write.cgroup, &write.value)
        {
            Ok(p) => p,
            Err(e) => return Self::record_error(report, write, e),
        };
        if prepared.unchanged {
            report.skipped_unchanged += 1;
            if !intermediate && !self.config.dry_run {
                self.remember(&write, now);
            }
            return;
        }
        let file = prepared
            .path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let change = format!("{} -> {}", prepared.old, prepared.new);
        if self.config.dry_run {
            tracing::info!(target: "koordlet::audit", cgroup = %write.cgroup, file, change, strategy = %write.strategy, dry_run = true, "cgroup write (dry-run, not written)");
        } else {
            let started = Instant::now();
            let applied = self.cgroups.apply(&prepared);
            report.timings.push(WriteTiming {
                resource: write.resource,
                ok: applied.is_ok(),
                elapsed: started.elapsed(),
            });
            if let Err(e) = applied {
                return Self::record_error(report, write, e);
            }
            tracing::info!(target: "koordlet::audit", cgroup = %write.cgroup, file, change, strategy = %write.strategy, "cgroup write");
            if !intermediate {
                self.remember(&write, now);
            }
        }
        report.changes.push(AppliedChange {
            cgroup: write.cgroup,
            file,
            resource: write.resource,
            old: prepared.old,
            new: prepared.new,
            strategy: write.strategy.into_owned(),
            intermediate,
        });
    }
}
