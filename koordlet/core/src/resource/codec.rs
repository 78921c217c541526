//! Validation and the v1 <-> v2 text conversions of the resource table.

use super::{CgroupResource, CgroupValue, CgroupVersion, Codec, Domain, V1_MEMORY_UNLIMITED_FLOOR};
use crate::cpuset::CpuSet;
use crate::error::ParseError;

/// Why a value was refused by [`validate`] or [`encode`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    /// Outside the legal range.
    #[error("{value} is outside {min}..={max}{}", if *unlimited { " (or -1 for no limit)" } else { "" })]
    OutOfRange {
        /// The value.
        value: i64,
        /// Smallest legal value.
        min: i64,
        /// Largest legal value.
        max: i64,
        /// Whether -1 was legal.
        unlimited: bool,
    },
    /// An integer given for a CPU list or the other way round.
    #[error("wrong kind of value for this resource")]
    WrongKind,
    /// The resource cannot be written.
    #[error("read-only resource")]
    ReadOnly,
}

/// Checks `value` against the resource's domain.
pub fn validate(resource: CgroupResource, value: &CgroupValue) -> Result<(), DomainError> {
    let spec = resource.spec();
    if !spec.writable {
        return Err(DomainError::ReadOnly);
    }
    match (spec.domain, value) {
        (Domain::Int { min, max, unlimited }, CgroupValue::Int(v)) => {
            if (min..=max).contains(v) || (unlimited && *v == -1) {
                Ok(())
            } else {
                Err(DomainError::OutOfRange {
                    value: *v,
                    min,
                    max,
                    unlimited,
                })
            }
        }
        (Domain::Cpus, CgroupValue::Cpus(_)) => Ok(()),
        (Domain::Stat, _) => Err(DomainError::ReadOnly),
        _ => Err(DomainError::WrongKind),
    }
}

/// `cpu.shares` -> `cpu.weight`, clamped into 2..=262144 first.
pub fn shares_to_weight(shares: i64) -> i64 {
    let shares = shares.clamp(2, 262_144);
    1 + (shares - 2) * 9999 / 262_142
}

/// `cpu.weight` -> `cpu.shares`, clamped into 1..=10000 first.
pub fn weight_to_shares(weight: i64) -> i64 {
    let weight = weight.clamp(1, 10_000);
    2 + (weight - 1) * 262_142 / 9999
}

/// CPU request in milli-cores -> `cpu.shares`, as the kubelet computes it:
/// `m × 1024 / 1000` clamped to 2..=262144 (0 or less -> 2).
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli <= 0 {
        return 2;
    }
    (milli.saturating_mul(1024) / 1000).clamp(2, 262_144)
}

/// CPU limit in milli-cores -> CFS quota for `period_us`: `m × period / 1000`; 0 or less means
/// no limit (-1); a positive quota below the kernel's 1000 µs minimum is raised to 1000.
pub fn milli_cpu_to_quota(milli: i64, period_us: i64) -> i64 {
    if milli <= 0 {
        return -1;
    }
    let quota = milli.saturating_mul(period_us) / 1000;
    quota.clamp(1000, super::MAX_CFS_QUOTA_US)
}

/// The text to write for `value`. `current` is the file's present content, needed on v2 where
/// quota and period share `cpu.max` (the other field is kept; absent: `max` / 100000).
pub fn encode(
    resource: CgroupResource,
    version: CgroupVersion,
    value: &CgroupValue,
    current: Option<&str>,
) -> Result<String, DomainError> {
    validate(resource, value)?;
    let codec = resource.spec().codec;
    let int = match value {
        CgroupValue::Cpus(cpus) => return Ok(cpus.to_string()),
        CgroupValue::Int(v) => *v,
    };
    if version == CgroupVersion::V1 {
        return Ok(int.to_string());
    }
    let max_or = |v: i64| if v == -1 { "max".to_owned() } else { v.to_string() };
    Ok(match codec {
        Codec::SharesWeight => shares_to_weight(int).to_string(),
        Codec::MaxWhenUnlimited => max_or(int),
        Codec::CpuMaxQuota => {
            let period = current
                .and_then(|c| c.split_whitespace().nth(1))
                .unwrap_or("100000");
            format!("{} {period}", max_or(int))
        }
        Codec::CpuMaxPeriod => {
            let quota = current.and_then(|c| c.split_whitespace().next()).unwrap_or("max");
            format!("{quota} {int}")
        }
        Codec::Same | Codec::CpuUsage | Codec::Structured => int.to_string(),
    })
}

/// Reads a file's text as a v1-unit value.
pub fn decode(
    resource: CgroupResource,
    version: CgroupVersion,
    text: &str,
) -> Result<CgroupValue, ParseError> {
    let spec = resource.spec();
    if spec.domain == Domain::Cpus {
        return CpuSet::parse(text).map(CgroupValue::Cpus);
    }
    let trimmed = text.trim();
    let v = match (spec.codec, version) {
        (Codec::Structured, _) => {
            return Err(ParseError::new(
                spec.name,
                "structured file: use the stat readers",
            ));
        }
        (Codec::CpuUsage, CgroupVersion::V2) => {
            let [usec] = scan_flat_keyed(text, &["usage_usec"]);
            let usec = usec.ok_or_else(|| ParseError::new("cpu.stat", "no usage_usec"))?;
            i64::try_from(usec.saturating_mul(1000)).unwrap_or(i64::MAX)
        }
        (Codec::CpuMaxQuota, CgroupVersion::V2) => {
            parse_int_or_max(trimmed.split_whitespace().next().unwrap_or(""), spec.name)?
        }
        (Codec::CpuMaxPeriod, CgroupVersion::V2) => {
            parse_int_or_max(trimmed.split_whitespace().nth(1).unwrap_or(""), spec.name)?
        }
        (Codec::SharesWeight, CgroupVersion::V2) => weight_to_shares(parse_int_or_max(trimmed, spec.name)?),
        (Codec::MaxWhenUnlimited, CgroupVersion::V1) => {
            let v = parse_int_or_max(trimmed, spec.name)?;
            if v >= V1_MEMORY_UNLIMITED_FLOOR { -1 } else { v }
        }
        _ => parse_int_or_max(trimmed, spec.name)?,
    };
    Ok(CgroupValue::Int(v))
}

/// Parses a decimal integer or `max` (-1).
fn parse_int_or_max(text: &str, what: &'static str) -> Result<i64, ParseError> {
    if text == "max" {
        return Ok(-1);
    }
    text.parse::<i64>().map_err(|e| {
        ParseError::new(
            what,
            format!("{:?}: {e}", text.chars().take(40).collect::<String>()),
        )
    })
}

/// Looks up `keys` in a flat keyed file in one pass without allocating: `found[i]` is the
/// value of the last well-formed `<keys[i]> <u64>` line. Lines are judged as in
/// [`parse_flat_keyed`].
pub fn scan_flat_keyed<const N: usize>(text: &str, keys: &[&str; N]) -> [Option<u64>; N] {
    let mut found = [None; N];
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(key), Some(value), None) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if let Some(index) = keys.iter().position(|wanted| *wanted == key)
            && let Ok(value) = value.parse::<u64>()
        {
            found[index] = Some(value);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::{DEFAULT_CFS_PERIOD_US, MAX_CFS_QUOTA_US, R};
    use CgroupVersion::{V1, V2};

    #[test]
    fn table_is_in_variant_order() {
        for r in CgroupResource::ALL {
            assert_eq!(r.spec().resource, r);
            assert_eq!(CgroupResource::from_name(r.name()), Some(r));
        }
        assert_eq!(CgroupResource::from_name("cpu.weight"), Some(R::CpuShares));
        assert_eq!(
            CgroupResource::from_name("cpu.max"),
            None,
            "ambiguous: quota and period"
        );
    }

    #[test]
    fn shares_weight_boundaries() {
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(262_144), 10_000);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(weight_to_shares(1), 2);
        assert_eq!(weight_to_shares(10_000), 262_144);
        assert_eq!(encode(R::CpuShares, V2, &CgroupValue::Int(2), None).unwrap(), "1");
        assert_eq!(
            encode(R::CpuShares, V2, &CgroupValue::Int(262_144), None).unwrap(),
            "10000"
        );
        assert_eq!(
            decode(R::CpuShares, V2, "10000\n").unwrap(),
            CgroupValue::Int(262_144)
        );
        for bad in [1, 262_145, -1] {
            assert!(
                encode(R::CpuShares, V1, &CgroupValue::Int(bad), None).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn quota_period_and_cpu_max() {
        let q = |v| CgroupValue::Int(v);
        assert_eq!(encode(R::CpuCfsQuota, V1, &q(-1), None).unwrap(), "-1");
        assert_eq!(
            encode(R::CpuCfsQuota, V2, &q(-1), Some("50000 100000\n")).unwrap(),
            "max 100000"
        );
        assert_eq!(
            encode(R::CpuCfsQuota, V2, &q(50_000), Some("max 200000\n")).unwrap(),
            "50000 200000"
        );
        assert_eq!(
            encode(R::CpuCfsPeriod, V2, &q(200_000), Some("max 100000")).unwrap(),
            "max 200000"
        );
        assert_eq!(encode(R::CpuCfsQuota, V2, &q(1000), None).unwrap(), "1000 100000");
        assert!(encode(R::CpuCfsQuota, V1, &q(999), None).is_err());
        assert!(encode(R::CpuCfsQuota, V1, &q(MAX_CFS_QUOTA_US + 1), None).is_err());
        assert!(encode(R::CpuCfsPeriod, V1, &q(-1), None).is_err());
        assert_eq!(decode(R::CpuCfsQuota, V2, "max 100000\n").unwrap(), q(-1));
        assert_eq!(decode(R::CpuCfsPeriod, V2, "max 100000\n").unwrap(), q(100_000));
        assert_eq!(decode(R::CpuCfsQuota, V1, "-1\n").unwrap(), q(-1));
        assert_eq!(encode(R::CpuCfsBurst, V2, &q(0), None).unwrap(), "0");
        assert!(encode(R::CpuCfsBurst, V2, &q(-1), None).is_err());
    }

    #[test]
    fn memory_limit_unlimited_both_ways() {
        let m = |v| CgroupValue::Int(v);
        assert_eq!(encode(R::MemoryLimit, V2, &m(-1), None).unwrap(), "max");
        assert_eq!(encode(R::MemoryLimit, V1, &m(-1), None).unwrap(), "-1");
        assert_eq!(
            decode(R::MemoryLimit, V1, "9223372036854771712\n").unwrap(),
            m(-1)
        );
        assert_eq!(decode(R::MemoryLimit, V2, "max\n").unwrap(), m(-1));
        assert_eq!(decode(R::MemoryLimit, V2, "1048576\n").unwrap(), m(1_048_576));
        assert!(encode(R::MemoryLimit, V1, &m(-2), None).is_err());
        assert_eq!(
            encode(R::MemoryUsage, V1, &m(1), None),
            Err(DomainError::ReadOnly)
        );
        assert_eq!(
            encode(R::CpusetCpus, V1, &m(1), None),
            Err(DomainError::WrongKind)
        );
    }

    #[test]
    fn milli_cpu_conversions_at_their_boundaries() {
        for (milli, shares) in [
            (-5, 2),
            (0, 2),
            (1, 2),
            (2, 2),
            (1000, 1024),
            (500, 512),
            (256_000, 262_144),
            (1_000_000, 262_144),
        ] {
            assert_eq!(milli_cpu_to_shares(milli), shares, "{milli}");
        }
        for (milli, quota) in [
            (0, -1),
            (-1, -1),
            (1, 1000),
            (9, 1000),
            (10, 1000),
            (500, 50_000),
            (4000, 400_000),
        ] {
            assert_eq!(milli_cpu_to_quota(milli, DEFAULT_CFS_PERIOD_US), quota, "{milli}");
        }
        assert_eq!(
            milli_cpu_to_quota(i64::MAX, DEFAULT_CFS_PERIOD_US),
            MAX_CFS_QUOTA_US
        );
    }

    #[test]
    fn cpu_usage_from_either_version() {
        assert_eq!(
            decode(R::CpuUsage, V1, "123456789\n").unwrap(),
            CgroupValue::Int(123_456_789)
        );
        let stat = "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n";
        assert_eq!(
            decode(R::CpuUsage, V2, stat).unwrap(),
            CgroupValue::Int(1_500_000)
        );
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..128)) {
            let text = String::from_utf8_lossy(&bytes);
            for r in CgroupResource::ALL {
                let _ = decode(r, V1, &text);
                let _ = decode(r, V2, &text);
            }
        }

        #[test]
        fn weight_conversion_is_monotonic(shares in 2i64..262_144, w in 1i64..10_000) {
            proptest::prop_assert!((1..=10_000).contains(&shares_to_weight(shares)));
            proptest::prop_assert!(shares_to_weight(shares) <= shares_to_weight(shares + 1));
            // Strictly increasing, so two weights compare equal exactly when their shares do.
            proptest::prop_assert!(weight_to_shares(w) < weight_to_shares(w + 1));
        }
    }
}
