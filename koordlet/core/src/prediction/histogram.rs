//! A decaying histogram of usage samples (the Vertical Pod Autoscaler's model, as upstream's
//! peak predictor uses it).
//!
//! - Buckets grow exponentially: bucket `i` starts at `first × (ratio^i − 1) / (ratio − 1)`, so
//!   a bucket is `ratio − 1` (5 %) as wide as its start: small usages are resolved finely,
//!   large ones relatively. Values at or past the last bucket's start land in the last bucket;
//!   negative and NaN values land in the first. No value panics.
//! - A sample added at time `t` weighs `2^((t − reference) / half_life)`: a sample one
//!   half-life older counts half as much, so old behaviour fades out. When the exponent would
//!   pass [`MAX_DECAY_EXPONENT`], the reference moves forward and every weight is scaled down
//!   by the same factor (the ratios, hence the percentiles, do not change).
//! - A percentile is the END of the first bucket whose cumulative weight reaches `p × total`
//!   (the start of the last bucket, which has no end): an estimate that errs high by at most
//!   one bucket width, the safe side for a peak.

use serde::{Deserialize, Serialize};

/// Largest decay exponent before the reference time moves (keeps weights far from overflow).
pub const MAX_DECAY_EXPONENT: f64 = 100.0;

/// Exponential bucket boundaries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketScheme {
    first_bucket_size: f64,
    ratio: f64,
    num_buckets: usize,
}

impl BucketScheme {
    /// Buckets covering `[0, max_value]`, the first `first_bucket_size` wide, each next one
    /// `ratio` times wider. Nonsense arguments (non-positive, ratio ≤ 1) are raised to the
    /// smallest meaningful value rather than refused: the schemes are constants.
    pub fn exponential(max_value: f64, first_bucket_size: f64, ratio: f64) -> Self {
        let first_bucket_size = if first_bucket_size > 0.0 {
            first_bucket_size
        } else {
            f64::MIN_POSITIVE
        };
        let ratio = if ratio > 1.0 { ratio } else { 1.0 + 1e-6 };
        let max_value = max_value.max(first_bucket_size);
        let buckets = ((max_value * (ratio - 1.0) / first_bucket_size + 1.0).ln() / ratio.ln()).ceil();
        let num_buckets = (buckets as usize).saturating_add(1).clamp(1, 100_000);
        BucketScheme {
            first_bucket_size,
            ratio,
            num_buckets,
        }
    }

    /// CPU in cores: 0.01-core first bucket, 5 % steps, up to 1000 cores (176 buckets).
    pub fn cpu() -> Self {
        Self::exponential(1000.0, 0.01, 1.05)
    }

    /// Memory in bytes: 10 MB first bucket, 5 % steps, up to 1 TB (176 buckets).
    pub fn memory() -> Self {
        Self::exponential(1e12, 1e7, 1.05)
    }

    /// Number of buckets.
    pub fn num_buckets(&self) -> usize {
        self.num_buckets
    }

    /// The bucket a value falls in.
    pub fn bucket_of(&self, value: f64) -> usize {
        if value.is_nan() || value < self.first_bucket_size {
            return 0;
        }
        let index =
            ((value * (self.ratio - 1.0) / self.first_bucket_size + 1.0).ln() / self.ratio.ln()).floor();
        if !index.is_finite() || index >= (self.num_buckets - 1) as f64 {
            return self.num_buckets - 1;
        }
        // Float rounding can put a value exactly on a boundary one bucket low or high.
        let mut bucket = index.max(0.0) as usize;
        if bucket + 1 < self.num_buckets && value >= self.bucket_start(bucket + 1) {
            bucket += 1;
        } else if bucket > 0 && value < self.bucket_start(bucket) {
            bucket -= 1;
        }
        bucket
    }

    /// Where bucket `i` starts.
    pub fn bucket_start(&self, i: usize) -> f64 {
        if i == 0 {
            return 0.0;
        }
        let exponent = i32::try_from(i).unwrap_or(i32::MAX);
        self.first_bucket_size * (self.ratio.powi(exponent) - 1.0) / (self.ratio - 1.0)
    }
}

/// A histogram whose samples lose weight with age (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct DecayingHistogram {
    scheme: BucketScheme,
    half_life_ms: i64,
    reference_ms: Option<i64>,
    weights: Vec<f64>,
    total_weight: f64,
}

/// A histogram as saved in a checkpoint: the reference time and the non-empty buckets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistogramCheckpoint {
    /// Reference time of the weights (ms since the epoch).
    pub reference_ms: i64,
    /// `(bucket, weight)` of every bucket with weight.
    pub buckets: Vec<(u32, f64)>,
}

/// Why a checkpointed histogram was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RestoreError {
    /// A bucket index past the scheme's buckets.
    #[error("bucket {index} does not exist (the scheme has {buckets})")]
    NoSuchBucket {
        /// The index given.
        index: u32,
        /// Buckets of the scheme.
        buckets: usize,
    },
    /// A negative, NaN or infinite weight.
    #[error("bucket {index} has weight {weight}, not a finite non-negative number")]
    BadWeight {
        /// The bucket.
        index: u32,
        /// The weight given.
        weight: f64,
    },
}

impl DecayingHistogram {
    /// An empty histogram; a half-life under 1 ms is raised to 1 ms.
    pub fn new(scheme: BucketScheme, half_life_ms: i64) -> Self {
        DecayingHistogram {
            scheme,
            half_life_ms: half_life_ms.max(1),
            reference_ms: None,
            weights: vec![0.0; scheme.num_buckets()],
            total_weight: 0.0,
        }
    }

    /// Its bucket scheme.
    pub fn scheme(&self) -> &BucketScheme {
        &self.scheme
    }

    /// True before the first sample.
    pub fn is_empty(&self) -> bool {
        self.total_weight <= 0.0
    }

    /// Sum of all weights (relative to the reference time).
    pub fn total_weight(&self) -> f64 {
        self.total_weight
    }

    /// Weight of bucket `i` (0 past the last).
    pub fn bucket_weight(&self, i: usize) -> f64 {
        self.weights.get(i).copied().unwrap_or(0.0)
    }

    /// Adds `value` seen at `time_ms` with weight 1 at that time. A non-finite value is
    /// refused (returns false) and changes nothing.
    pub fn add_sample(&mut self, value: f64, time_ms: i64) -> bool {
        if !value.is_finite() {
            return false;
        }
        let reference = *self.reference_ms.get_or_insert(time_ms);
        let mut exponent = self.exponent(time_ms, reference);
        if exponent > MAX_DECAY_EXPONENT {
            self.shift_reference(time_ms);
            exponent = 0.0;
        }
        let weight = exponent.exp2();
        let bucket = self.scheme.bucket_of(value);
        self.weights[bucket] += weight;
        self.total_weight += weight;
        true
    }

    fn exponent(&self, time_ms: i64, reference_ms: i64) -> f64 {
        time_ms.saturating_sub(reference_ms) as f64 / self.half_life_ms as f64
    }

    /// Moves the reference to `new_reference_ms`, scaling the weights so ratios stay.
    fn shift_reference(&mut self, new_reference_ms: i64) {
        let Some(old) = self.reference_ms else {
            self.reference_ms = Some(new_reference_ms);
            return;
        };
        let factor = self.exponent(old, new_reference_ms).exp2();
        self.total_weight = 0.0;
        for w in &mut self.weights {
            *w *= factor;
            self.total_weight += *w;
        }
        self.reference_ms = Some(new_reference_ms);
    }

    /// The `p`-th percentile (0..=1) as described in the module docs; `None` when empty.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        if self.is_empty() {
            return None;
        }
        let last_nonzero = self.weights.iter().rposition(|w| *w > 0.0)?;
        let threshold = p.clamp(0.0, 1.0) * self.total_weight;
        let mut partial = 0.0;
        let mut bucket = last_nonzero;
        for (i, w) in self.weights.iter().enumerate().take(last_nonzero + 1) {
            partial += w;
            if *w > 0.0 && partial >= threshold {
                bucket = i;
                break;
            }
        }
        if bucket + 1 < self.scheme.num_buckets() {
            Some(self.scheme.bucket_start(bucket + 1))
        } else {
            Some(self.scheme.bucket_start(bucket))
        }
    }

    /// The histogram for a checkpoint (`None` when empty).
    pub fn checkpoint(&self) -> Option<HistogramCheckpoint> {
        let reference_ms = self.reference_ms?;
        let buckets: Vec<(u32, f64)> = self
            .weights
            .iter()
            .enumerate()
            .filter(|(_, w)| **w > 0.0)
            .map(|(i, w)| (u32::try_from(i).unwrap_or(u32::MAX), *w))
            .collect();
        (!buckets.is_empty()).then_some(HistogramCheckpoint {
            reference_ms,
            buckets,
        })
    }

    /// Rebuilds a histogram from a checkpoint, refusing impossible buckets and weights.
    pub fn restore(
        scheme: BucketScheme,
        half_life_ms: i64,
        checkpoint: &HistogramCheckpoint,
    ) -> Result<Self, RestoreError> {
        let mut h = Self::new(scheme, half_life_ms);
        for &(index, weight) in &checkpoint.buckets {
            let slot = h
                .weights
                .get_mut(index as usize)
                .ok_or(RestoreError::NoSuchBucket {
                    index,
                    buckets: scheme.num_buckets(),
                })?;
            if !weight.is_finite() || weight < 0.0 {
                return Err(RestoreError::BadWeight { index, weight });
            }
            *slot += weight;
            h.total_weight += weight;
        }
        h.reference_ms = Some(checkpoint.reference_ms);
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const HOUR: i64 = 3_600_000;

    #[test]
    fn schemes_have_the_documented_bucket_counts_and_boundaries() {
        let cpu = BucketScheme::cpu();
        assert_eq!(cpu.num_buckets(), 176);
        assert_eq!(cpu.bucket_start(0), 0.0);
        assert!((cpu.bucket_start(1) - 0.01).abs() < 1e-12);
        assert!((cpu.bucket_start(2) - 0.0205).abs() < 1e-12);
        assert!(
            cpu.bucket_start(175) >= 1000.0 * 0.95,
            "{}",
            cpu.bucket_start(175)
        );
        assert_eq!(BucketScheme::memory().num_buckets(), 176);
        // Every boundary maps to its own bucket, just below it to the previous one.
        for i in 1..cpu.num_buckets() {
            let start = cpu.bucket_start(i);
            assert_eq!(cpu.bucket_of(start), i, "start of {i}");
            assert_eq!(cpu.bucket_of(start * (1.0 - 1e-9)), i - 1, "below {i}");
        }
    }

    #[test]
    fn extremes_never_panic() {
        let cpu = BucketScheme::cpu();
        let last = cpu.num_buckets() - 1;
        for (value, bucket) in [
            (0.0, 0),
            (-5.0, 0),
            (f64::NAN, 0),
            (1e-300, 0),
            (1e6, last),
            (f64::MAX, last),
            (f64::INFINITY, last),
        ] {
            assert_eq!(cpu.bucket_of(value), bucket, "{value}");
        }
        let mut h = DecayingHistogram::new(cpu, HOUR);
        assert!(h.add_sample(0.0, 0));
        assert!(h.add_sample(f64::MAX, 0));
        assert!(!h.add_sample(f64::INFINITY, 0));
        assert!(!h.add_sample(f64::NAN, 0));
        assert_eq!(h.total_weight(), 2.0);
        assert_eq!(h.percentile(1.0), Some(cpu.bucket_start(last)));
        assert_eq!(h.percentile(0.0), Some(cpu.bucket_start(1)));
        // Degenerate schemes still work.
        let odd = BucketScheme::exponential(-1.0, 0.0, 0.5);
        assert!(odd.num_buckets() >= 1);
        let _ = odd.bucket_of(3.0);
    }

    #[test]
    fn percentiles_of_known_samples_are_bucket_ends() {
        let cpu = BucketScheme::cpu();
        let mut h = DecayingHistogram::new(cpu, 12 * HOUR);
        assert_eq!(h.percentile(0.95), None);
        // 100 samples at the same time: 1..=100 × 0.01 cores.
        for i in 1..=100 {
            h.add_sample(f64::from(i) * 0.01, 0);
        }
        let end_of = |v: f64| cpu.bucket_start(cpu.bucket_of(v) + 1);
        // p95 is the bucket holding the 95th smallest value (0.95 cores), reported at its end.
        assert_eq!(h.percentile(0.95), Some(end_of(0.95)));
        assert_eq!(h.percentile(0.5), Some(end_of(0.50)));
        assert_eq!(h.percentile(1.0), Some(end_of(1.0)));
        let p95 = h.percentile(0.95).unwrap();
        assert!((0.95..0.95 * 1.06).contains(&p95), "{p95}");
        // A constant usage reads as itself, rounded up to its bucket's end.
        let mut flat = DecayingHistogram::new(cpu, 12 * HOUR);
        for t in 0..60 {
            flat.add_sample(0.05, t * 1000);
        }
        let p = flat.percentile(0.95).unwrap();
        assert!((0.05..0.0553).contains(&p), "{p}");
    }

    #[test]
    fn a_sample_one_half_life_older_counts_half() {
        let cpu = BucketScheme::cpu();
        let mut h = DecayingHistogram::new(cpu, 12 * HOUR);
        h.add_sample(0.1, 0);
        h.add_sample(2.0, 12 * HOUR);
        let (old, new) = (
            h.bucket_weight(cpu.bucket_of(0.1)),
            h.bucket_weight(cpu.bucket_of(2.0)),
        );
        assert!((new / old - 2.0).abs() < 1e-12, "{old} {new}");
        // Total weight 3: a third is the old sample, so p0.33 is the old bucket, p0.34 the new.
        assert_eq!(h.percentile(0.33), Some(cpu.bucket_start(cpu.bucket_of(0.1) + 1)));
        assert_eq!(h.percentile(0.34), Some(cpu.bucket_start(cpu.bucket_of(2.0) + 1)));
    }

    #[test]
    fn the_reference_moves_without_changing_ratios() {
        let cpu = BucketScheme::cpu();
        let mut h = DecayingHistogram::new(cpu, HOUR);
        h.add_sample(0.1, 0);
        h.add_sample(0.1, HOUR);
        // 150 half-lives later: the exponent would be 150, the reference moves.
        h.add_sample(5.0, 150 * HOUR);
        h.add_sample(5.0, 151 * HOUR);
        assert!(
            h.total_weight().is_finite() && h.total_weight() < 10.0,
            "{}",
            h.total_weight()
        );
        let old = h.bucket_weight(cpu.bucket_of(0.1));
        assert!(old > 0.0 && old < 1e-40, "{old}");
        let new = h.bucket_weight(cpu.bucket_of(5.0));
        assert!((new - 3.0).abs() < 1e-9, "{new}");
    }

    #[test]
    fn checkpoint_round_trip_and_refusals() {
        let mut h = DecayingHistogram::new(BucketScheme::memory(), 24 * HOUR);
        assert_eq!(h.checkpoint(), None);
        h.add_sample(3e8, 1000);
        h.add_sample(5e8, 2000);
        let cp = h.checkpoint().unwrap();
        let back = DecayingHistogram::restore(BucketScheme::memory(), 24 * HOUR, &cp).unwrap();
        assert_eq!(back, h);
        let bad = HistogramCheckpoint {
            reference_ms: 0,
            buckets: vec![(999, 1.0)],
        };
        assert!(matches!(
            DecayingHistogram::restore(BucketScheme::memory(), HOUR, &bad),
            Err(RestoreError::NoSuchBucket { index: 999, .. })
        ));
        let bad = HistogramCheckpoint {
            reference_ms: 0,
            buckets: vec![(3, -1.0)],
        };
        assert!(matches!(
            DecayingHistogram::restore(BucketScheme::memory(), HOUR, &bad),
            Err(RestoreError::BadWeight { index: 3, .. })
        ));
    }
}
