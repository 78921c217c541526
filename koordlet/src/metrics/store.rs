//! The metric store: many bounded [`Series`] behind one map, with window queries.
//!
//! ## Memory bound
//! Every series holds at most `fine_capacity` samples (16 bytes each) and `bucket_capacity`
//! summaries ([`Bucket`], 72 bytes each), and the store holds at most `max_series` series with
//! object names of at most [`MAX_OBJECT_LEN`] bytes. [`StoreConfig::memory_bound_bytes`] adds
//! these up (with the hash map's worst-case slack); [`MetricStore::approx_bytes`] reports what
//! is actually allocated. Neither uptime nor pod churn can grow it: series not appended to for
//! `series_ttl` are dropped by [`MetricStore::expire`], and a new series arriving at the
//! `max_series` cap replaces the one appended to least recently.
//!
//! ## Windows
//! A window `[start, end]` (inclusive, ms) is answered from fine samples exactly and, for the
//! part older than the fine ring, from buckets: a bucket counts when all its samples are inside
//! the window, so the old edge of a long window is resolved to `bucket_width`.
//!
//! ## Percentile definition
//! Nearest rank: sort the window's values ascending and take the value at 1-based rank
//! `ceil(p × n)` (clamped to 1..=n). For n = 10, p50 is the 5th value and p90 the 9th; for
//! n = 9, p90 is the 9th (upstream computes `int(float32(n) × p) − 1` as a 0-based index,
//! which gives the 8th: one rank low whenever `n × p` is not an integer; we use the textbook
//! definition). Values from buckets enter as `count` values spread along the bucket's
//! min / p25 / p50 / p75 / p90 / p99 / max curve, so percentiles over bucketed data are
//! approximate within that spread; count, sum, average, min and max stay exact.

use std::collections::HashMap;
use std::time::Duration;

use super::series::{Bucket, Series};
use super::{KeyView, MetricKind, MetricTime, SeriesKey};

/// Longest object name (pod UID, container ID) a series key may carry.
pub const MAX_OBJECT_LEN: usize = 256;

/// Sizes of a store. All bounds are hard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Fine samples kept per series (the short windows are answered exactly from them). Keep
    /// it above the number of samples one `bucket_width` receives (60 at a 1 s interval):
    /// then every bucket summarises exactly one whole window; below that, a window is split
    /// over several buckets and `bucket_capacity` covers less time.
    pub fine_capacity: usize,
    /// Summaries kept per series.
    pub bucket_capacity: usize,
    /// Time window one summary covers.
    pub bucket_width: Duration,
    /// A series not appended to for this long is dropped by [`MetricStore::expire`].
    pub series_ttl: Duration,
    /// Most series held at once.
    pub max_series: usize,
}

impl Default for StoreConfig {
    /// Node-level series at a 1 s interval: 5 min of exact samples, 36 one-minute summaries
    /// (windows up to 30 min and more), 256 series.
    fn default() -> Self {
        Self {
            fine_capacity: 300,
            bucket_capacity: 36,
            bucket_width: Duration::from_secs(60),
            series_ttl: Duration::from_secs(36 * 60),
            max_series: 256,
        }
    }
}

impl StoreConfig {
    /// Pod and container series at a 1 s interval: 64 s of exact samples (the "last" and
    /// short average queries), 8 one-minute summaries (the 5 min report window), up to 8192
    /// series, dropped 10 min after their pod stops reporting.
    pub fn pods() -> Self {
        Self {
            fine_capacity: 64,
            bucket_capacity: 8,
            bucket_width: Duration::from_secs(60),
            series_ttl: Duration::from_secs(600),
            max_series: 8192,
        }
    }

    /// Most bytes one series' buffers can hold.
    pub fn series_bytes(&self) -> usize {
        self.fine_capacity.max(1) * 16 + self.bucket_capacity.max(1) * std::mem::size_of::<Bucket>()
    }

    /// Upper bound of [`MetricStore::approx_bytes`] for this configuration.
    pub fn memory_bound_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(SeriesKey, Series)>() + 1;
        // hashbrown keeps at most 8/7 of its length as buckets, rounded to a power of two.
        let slots = (self.max_series.saturating_mul(8) / 7 + 1).next_power_of_two();
        self.max_series
            .saturating_mul(self.series_bytes() + MAX_OBJECT_LEN)
            + slots.saturating_mul(entry)
    }
}

/// Why a sample was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AppendError {
    /// NaN or infinite.
    #[error("value {0} is not finite")]
    NotFinite(f64),
    /// Older than (or as old as) the series' newest sample.
    #[error("sample at {given} ms is not newer than the last one at {last} ms")]
    OutOfOrder {
        /// Newest time held.
        last: i64,
        /// Time given.
        given: i64,
    },
    /// Object name longer than [`MAX_OBJECT_LEN`].
    #[error("object name of {0} bytes is longer than {MAX_OBJECT_LEN}")]
    ObjectTooLong(usize),
}

/// Aggregates of one series over a window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowStats {
    /// Number of samples.
    pub count: u64,
    /// Arithmetic mean (exact).
    pub avg: f64,
    /// Smallest value (exact).
    pub min: f64,
    /// Largest value (exact).
    pub max: f64,
    /// Value of the newest sample in the window.
    pub latest: f64,
    /// Time of the oldest sample in the window.
    pub first_time: MetricTime,
    /// Time of the newest sample in the window.
    pub last_time: MetricTime,
    /// Median (nearest rank).
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl WindowStats {
    /// `last_time - first_time`: how much of the window the data covers (the NodeMetric
    /// reporter leaves aggregates empty when this is under half the window).
    pub fn time_span(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.last_time.0.saturating_sub(self.first_time.0)).unwrap_or(0))
    }
}

/// Nearest-rank percentile of sorted values (see the module docs). `None` when empty.
pub fn nearest_rank(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let rank = (p.clamp(0.0, 1.0) * n as f64).ceil() as usize;
    sorted.get(rank.clamp(1, n) - 1).copied()
}

/// The store. Not synchronised: wrap it in a lock to share it between collectors and readers.
#[derive(Debug)]
pub struct MetricStore {
    config: StoreConfig,
    series: HashMap<SeriesKey, Series>,
}

impl MetricStore {
    /// An empty store.
    pub fn new(config: StoreConfig) -> Self {
        Self {
            config,
            series: HashMap::new(),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Number of series held.
    pub fn series_count(&self) -> usize {
        self.series.len()
    }

    /// Appends a sample. Times must increase per series; non-finite values are refused.
    pub fn append(&mut self, key: &SeriesKey, time: MetricTime, value: f64) -> Result<(), AppendError> {
        self.append_to(key.kind, &key.object, time, value)
    }

    /// [`MetricStore::append`] by the key's parts: allocates only when the series is new.
    pub fn append_to(
        &mut self,
        kind: MetricKind,
        object: &str,
        time: MetricTime,
        value: f64,
    ) -> Result<(), AppendError> {
        if !value.is_finite() {
            return Err(AppendError::NotFinite(value));
        }
        if object.len() > MAX_OBJECT_LEN {
            return Err(AppendError::ObjectTooLong(object.len()));
        }
        if let Some(series) = self.series.get_mut(&(kind, object) as &dyn KeyView) {
            if let Some(last) = series.last_time()
                && time <= last
            {
                return Err(AppendError::OutOfOrder {
                    last: last.0,
                    given: time.0,
                });
            }
            series.push(time.0, value);
            return Ok(());
        }
        if self.series.len() >= self.config.max_series.max(1) {
            let stalest = self
                .series
                .iter()
                .min_by_key(|(_, s)| s.last_time())
                .map(|(k, _)| k.clone());
            if let Some(stalest) = stalest {
                self.series.remove(&stalest);
            }
        }
        let width = i64::try_from(self.config.bucket_width.as_millis()).unwrap_or(i64::MAX);
        let mut series = Series::new(self.config.fine_capacity, self.config.bucket_capacity, width);
        series.push(time.0, value);
        self.series.insert(SeriesKey::of(kind, object), series);
        Ok(())
    }

    /// The newest sample of a series.
    pub fn latest(&self, key: &SeriesKey) -> Option<(MetricTime, f64)> {
        self.series.get(key)?.latest()
    }

    /// Aggregates over `[start, end]`; `None` when the window holds no sample.
    pub fn window(&self, key: &SeriesKey, start: MetricTime, end: MetricTime) -> Option<WindowStats> {
        let series = self.series.get(key)?;
        let (start, end) = (start.0, end.0);
        let mut values = Vec::new();
        let (mut count, mut sum) = (0u64, 0f64);
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        let mut first: Option<i64> = None;
        let mut last: Option<(i64, f64)> = None;
        for b in series.buckets_in(start, end) {
            count += u64::from(b.count);
            sum += b.sum;
            min = min.min(b.min);
            max = max.max(b.max);
            first = Some(first.map_or(b.first_time, |f| f.min(b.first_time)));
            if last.is_none_or(|(t, _)| b.last_time() >= t) {
                last = Some((b.last_time(), b.last));
            }
            b.expand_into(&mut values);
        }
        for s in series.fine_in(start, end) {
            count += 1;
            sum += s.value;
            min = min.min(s.value);
            max = max.max(s.value);
            first = Some(first.map_or(s.time, |f| f.min(s.time)));
            if last.is_none_or(|(t, _)| s.time >= t) {
                last = Some((s.time, s.value));
            }
            values.push(s.value);
        }
        let (first, (last_time, latest)) = (first?, last?);
        values.sort_by(f64::total_cmp);
        let pct = |p| nearest_rank(&values, p).unwrap_or(latest);
        Some(WindowStats {
            count,
            avg: sum / count as f64,
            min,
            max,
            latest,
            first_time: MetricTime(first),
            last_time: MetricTime(last_time),
            p50: pct(0.5),
            p90: pct(0.9),
            p95: pct(0.95),
            p99: pct(0.99),
        })
    }

    /// Any percentile (0..=1) over `[start, end]`, same definition as [`WindowStats`].
    pub fn percentile(&self, key: &SeriesKey, start: MetricTime, end: MetricTime, p: f64) -> Option<f64> {
        let series = self.series.get(key)?;
        let mut values: Vec<f64> = series.fine_in(start.0, end.0).map(|s| s.value).collect();
        for b in series.buckets_in(start.0, end.0) {
            b.expand_into(&mut values);
        }
        values.sort_by(f64::total_cmp);
        nearest_rank(&values, p)
    }

    /// Drops series whose newest sample is older than `now - series_ttl`; returns how many.
    pub fn expire(&mut self, now: MetricTime) -> usize {
        let cutoff = now.minus(self.config.series_ttl);
        let before = self.series.len();
        self.series
            .retain(|_, s| s.last_time().is_some_and(|t| t >= cutoff));
        if self.series.capacity() > 2 * self.series.len().max(16) {
            self.series.shrink_to_fit();
        }
        before - self.series.len()
    }

    /// The objects that have a series of `kind` (e.g. the NUMA node IDs), in no order.
    pub fn objects_of(&self, kind: MetricKind) -> impl Iterator<Item = &str> + '_ {
        self.series
            .keys()
            .filter(move |k| k.kind == kind)
            .map(|k| &*k.object)
    }

    /// Drops one series (a host application no longer declared).
    pub fn remove_series(&mut self, key: &SeriesKey) {
        self.series.remove(key);
    }

    /// Drops every series of `object` (a pod or container known to be gone).
    pub fn remove_object(&mut self, object: &str) {
        self.series.retain(|k, _| &*k.object != object);
    }

    /// Drops every series of the objects in `gone` in one pass over the store (a round's
    /// vanished pods and containers together).
    pub fn remove_objects(&mut self, gone: &std::collections::HashSet<Box<str>>) {
        if !gone.is_empty() {
            self.series.retain(|k, _| !gone.contains(&k.object));
        }
    }

    /// Bytes allocated by the store now (map slots, series buffers, key names).
    pub fn approx_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(SeriesKey, Series)>() + 1;
        let slots = if self.series.capacity() == 0 {
            0
        } else {
            (self.series.capacity() * 8 / 7 + 1).next_power_of_two()
        };
        slots * entry
            + self
                .series
                .iter()
                .map(|(k, s)| k.object.len() + s.allocated_bytes())
                .sum::<usize>()
    }
}
