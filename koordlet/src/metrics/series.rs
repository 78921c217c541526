//! One series: a ring of fine samples and a ring of coarse summaries of older samples.
//!
//! When the fine ring is full, the oldest samples leave it a summary window at a time: every
//! sample of the oldest window (`floor(t / bucket_width)`) still in the ring is folded into one
//! [`Bucket`]. A sample is therefore in exactly one place (fine ring or one bucket), never both.

use super::MetricTime;
use super::ring::Ring;

/// One fine sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sample {
    pub(crate) time: i64,
    pub(crate) value: f64,
}

/// Probabilities of the interior quantile points a bucket keeps (min and max are kept exactly).
pub const BUCKET_QUANTILES: [f64; 5] = [0.25, 0.5, 0.75, 0.9, 0.99];

/// Summary of samples that left the fine ring, all from one window of `bucket_width`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// Time of the first sample summarised (ms).
    pub first_time: i64,
    /// Time of the last sample, as an offset from `first_time` (ms; < bucket width).
    pub last_offset: u32,
    /// Number of samples.
    pub count: u32,
    /// Sum of the values (exact average).
    pub sum: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Value of the last sample.
    pub last: f64,
    /// Linear-interpolation quantiles at [`BUCKET_QUANTILES`].
    pub quantiles: [f32; 5],
}

impl Bucket {
    /// Summarises samples (non-empty, in time order).
    fn summarise(samples: &[Sample]) -> Option<Bucket> {
        let first = samples.first()?;
        let last = samples.last()?;
        let mut values: Vec<f64> = samples.iter().map(|s| s.value).collect();
        values.sort_by(f64::total_cmp);
        let mut quantiles = [0f32; 5];
        for (slot, p) in quantiles.iter_mut().zip(BUCKET_QUANTILES) {
            *slot = linear_quantile(&values, p) as f32;
        }
        Some(Bucket {
            first_time: first.time,
            last_offset: u32::try_from(last.time.saturating_sub(first.time)).unwrap_or(u32::MAX),
            count: u32::try_from(samples.len()).unwrap_or(u32::MAX),
            sum: values.iter().sum(),
            min: values.first().copied().unwrap_or(0.0),
            max: values.last().copied().unwrap_or(0.0),
            last: last.value,
            quantiles,
        })
    }

    /// Time of the last sample summarised.
    pub fn last_time(&self) -> i64 {
        self.first_time.saturating_add(i64::from(self.last_offset))
    }

    /// Reconstructs `count` evenly spread values from the summary (min, the quantile points and
    /// max joined by straight lines), used to merge old data into a window's percentiles.
    pub(crate) fn expand_into(&self, out: &mut Vec<f64>) {
        let mut probs = [0f64; 7];
        let mut vals = [0f64; 7];
        probs[0] = 0.0;
        vals[0] = self.min;
        for i in 0..5 {
            probs[i + 1] = BUCKET_QUANTILES[i];
            vals[i + 1] = f64::from(self.quantiles[i]).clamp(self.min, self.max);
        }
        probs[6] = 1.0;
        vals[6] = self.max;
        let n = self.count as usize;
        for j in 0..n {
            let q = if n == 1 { 0.5 } else { j as f64 / (n - 1) as f64 };
            let seg = probs.windows(2).position(|w| q <= w[1]).unwrap_or(5);
            let (p0, p1) = (probs[seg], probs[seg + 1]);
            let (v0, v1) = (vals[seg], vals[seg + 1]);
            let t = if p1 > p0 { (q - p0) / (p1 - p0) } else { 0.0 };
            out.push(v0 + (v1 - v0) * t);
        }
    }
}

/// Quantile of sorted values with linear interpolation between closest ranks.
fn linear_quantile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n => {
            let pos = p.clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = pos.ceil() as usize;
            let (a, b) = (sorted[lo.min(n - 1)], sorted[hi.min(n - 1)]);
            a + (b - a) * (pos - lo as f64)
        }
    }
}

/// A bounded series.
#[derive(Debug, Clone)]
pub struct Series {
    fine: Ring<Sample>,
    buckets: Ring<Bucket>,
    bucket_width_ms: i64,
}

impl Series {
    /// A series holding at most `fine_capacity` samples and `bucket_capacity` summaries of
    /// `bucket_width_ms` each.
    pub fn new(fine_capacity: usize, bucket_capacity: usize, bucket_width_ms: i64) -> Self {
        Self {
            fine: Ring::new(fine_capacity),
            buckets: Ring::new(bucket_capacity),
            bucket_width_ms: bucket_width_ms.max(1),
        }
    }

    /// Time of the newest sample.
    pub fn last_time(&self) -> Option<MetricTime> {
        self.fine.back().map(|s| MetricTime(s.time))
    }

    /// The newest sample.
    pub fn latest(&self) -> Option<(MetricTime, f64)> {
        self.fine.back().map(|s| (MetricTime(s.time), s.value))
    }

    /// Appends a sample; the caller guarantees time order and a finite value.
    pub(crate) fn push(&mut self, time: i64, value: f64) {
        if self.fine.is_full() {
            let window = |t: i64| t.div_euclid(self.bucket_width_ms);
            if let Some(oldest) = self.fine.front().map(|s| window(s.time)) {
                let mut evicted = Vec::new();
                self.fine
                    .drain_front_while(|s| window(s.time) == oldest, &mut evicted);
                if let Some(bucket) = Bucket::summarise(&evicted) {
                    self.buckets.push(bucket);
                }
            }
        }
        self.fine.push(Sample { time, value });
    }

    /// Bytes allocated by this series' buffers.
    pub fn allocated_bytes(&self) -> usize {
        self.fine.allocated_items() * std::mem::size_of::<Sample>()
            + self.buckets.allocated_items() * std::mem::size_of::<Bucket>()
    }

    /// Fine samples in `[start, end]`, oldest first.
    pub(crate) fn fine_in(&self, start: i64, end: i64) -> impl Iterator<Item = &Sample> + '_ {
        self.fine.iter().filter(move |s| s.time >= start && s.time <= end)
    }

    /// Buckets whose samples all lie in `[start, end]`.
    pub(crate) fn buckets_in(&self, start: i64, end: i64) -> impl Iterator<Item = &Bucket> + '_ {
        self.buckets
            .iter()
            .filter(move |b| b.first_time >= start && b.last_time() <= end)
    }

    /// Number of fine samples held (for tests and footprint reports).
    pub fn fine_len(&self) -> usize {
        self.fine.len()
    }

    /// Number of buckets held.
    pub fn bucket_len(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_moves_whole_windows_into_buckets() {
        let mut s = Series::new(4, 2, 10);
        for t in 0..4 {
            s.push(t * 5, t as f64); // windows: 0,0,1,1
        }
        assert_eq!((s.fine_len(), s.bucket_len()), (4, 0));
        s.push(20, 4.0); // full: window 0 (t=0,5) leaves
        assert_eq!((s.fine_len(), s.bucket_len()), (3, 1));
        let b = *s.buckets_in(0, 100).next().unwrap();
        assert_eq!(
            (b.first_time, b.last_time(), b.count, b.sum, b.min, b.max),
            (0, 5, 2, 1.0, 0.0, 1.0)
        );
    }

    #[test]
    fn expansion_preserves_count_and_extremes() {
        let samples: Vec<Sample> = (0..60)
            .map(|i| Sample {
                time: i,
                value: i as f64,
            })
            .collect();
        let b = Bucket::summarise(&samples).unwrap();
        let mut out = Vec::new();
        b.expand_into(&mut out);
        assert_eq!(out.len(), 60);
        assert_eq!(out[0], 0.0);
        assert_eq!(out[59], 59.0);
        // A uniform bucket is reconstructed within float32 rounding.
        for (i, v) in out.iter().enumerate() {
            assert!((v - i as f64).abs() < 1e-3, "{i}: {v}");
        }
    }
}
