//! CPU lists as the kernel writes them (`cpuset.cpus`, `/sys/devices/system/cpu/online`):
//! `"0-3,5,8-9"`, empty for none.
//!
//! Stored as sorted, merged, inclusive ranges, so a hostile `"0-4294967295"` costs 8 bytes, not
//! four billion entries.

use std::fmt;

use super::ParseError;

/// A set of CPU ids. Equality is semantic: `"0,1,2"` equals `"0-2"`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    /// Sorted, non-overlapping, non-adjacent inclusive ranges.
    ranges: Vec<(u32, u32)>,
}

impl CpuSet {
    /// The empty set (an empty `cpuset.cpus`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a set from CPU ids in any order.
    pub fn from_cpus(cpus: impl IntoIterator<Item = u32>) -> Self {
        let mut set = Self::new();
        for cpu in cpus {
            set.insert_range(cpu, cpu);
        }
        set
    }

    /// Parses the kernel list format. Whitespace around the list (the trailing newline) is
    /// ignored; anything else malformed is an error.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        const WHAT: &str = "cpu list";
        let text = text.trim();
        let mut set = Self::new();
        if text.is_empty() {
            return Ok(set);
        }
        for part in text.split(',') {
            let part = part.trim();
            let (lo, hi) = match part.split_once('-') {
                Some((lo, hi)) => (parse_cpu(lo)?, parse_cpu(hi)?),
                None => {
                    let cpu = parse_cpu(part)?;
                    (cpu, cpu)
                }
            };
            if lo > hi {
                return Err(ParseError::new(WHAT, format!("descending range {part:?}")));
            }
            set.insert_range(lo, hi);
        }
        Ok(set)
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|&(lo, hi)| u64::from(hi - lo) + 1).sum()
    }

    /// True when no CPU is in the set.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// True when `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        self.ranges.iter().any(|&(lo, hi)| lo <= cpu && cpu <= hi)
    }

    /// True when every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.ranges
            .iter()
            .all(|&(lo, hi)| other.ranges.iter().any(|&(olo, ohi)| olo <= lo && hi <= ohi))
    }

    /// The union, used to widen a parent before its children move.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let mut out = self.clone();
        for &(lo, hi) in &other.ranges {
            out.insert_range(lo, hi);
        }
        out
    }

    /// Iterates the CPU ids in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.ranges.iter().flat_map(|&(lo, hi)| lo..=hi)
    }

    fn insert_range(&mut self, lo: u32, hi: u32) {
        let (mut lo, mut hi) = (lo, hi);
        let mut merged = Vec::with_capacity(self.ranges.len() + 1);
        let mut placed = false;
        for &(a, b) in &self.ranges {
            if b.saturating_add(1) < lo {
                merged.push((a, b));
            } else if hi.saturating_add(1) < a {
                if !placed {
                    merged.push((lo, hi));
                    placed = true;
                }
                merged.push((a, b));
            } else {
                lo = lo.min(a);
                hi = hi.max(b);
            }
        }
        if !placed {
            merged.push((lo, hi));
            merged.sort_unstable();
        }
        self.ranges = merged;
    }
}

fn parse_cpu(text: &str) -> Result<u32, ParseError> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::new("cpu list", format!("not a cpu id: {text:?}")));
    }
    text.parse::<u32>()
        .map_err(|e| ParseError::new("cpu list", format!("{text:?}: {e}")))
}

impl fmt::Display for CpuSet {
    /// The canonical kernel form: ranges of 2+ CPUs as `a-b`, single CPUs alone.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(lo, hi)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_canonically() {
        for (input, canonical, len) in [
            ("", "", 0),
            ("\n", "", 0),
            ("0-3,5\n", "0-3,5", 5),
            ("5,0,1,2,3", "0-3,5", 5),
            ("0-1,2-3", "0-3", 4),
            ("7", "7", 1),
            ("0-4294967295", "0-4294967295", 1 << 32),
        ] {
            let set = CpuSet::parse(input).unwrap();
            assert_eq!(set.to_string(), canonical, "{input:?}");
            assert_eq!(set.len(), len, "{input:?}");
        }
    }

    #[test]
    fn rejects_malformed_lists() {
        for bad in ["a", "1-", "-1", "3-1", "1,,2", "1 2", "+1", "99999999999"] {
            assert!(CpuSet::parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn subset_and_union() {
        let a = CpuSet::parse("0-3").unwrap();
        let b = CpuSet::parse("2-5").unwrap();
        assert!(!a.is_subset(&b));
        assert!(CpuSet::parse("1-2").unwrap().is_subset(&a));
        assert!(CpuSet::new().is_subset(&a));
        assert_eq!(a.union(&b).to_string(), "0-5");
        assert!(a.contains(3) && !a.contains(4));
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_text_never_panics(text in ".{0,64}") {
            let _ = CpuSet::parse(&text);
        }

        #[test]
        fn canonical_form_round_trips(cpus in proptest::collection::vec(0u32..300, 0..40)) {
            let set = CpuSet::from_cpus(cpus.iter().copied());
            let again = CpuSet::parse(&set.to_string()).unwrap();
            proptest::prop_assert_eq!(&again, &set);
            let mut sorted = cpus.clone();
            sorted.sort_unstable();
            sorted.dedup();
            proptest::prop_assert_eq!(set.iter().collect::<Vec<_>>(), sorted);
        }
    }
}
