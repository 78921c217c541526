//! CPU lists as the kernel writes them (`cpuset.cpus`, `/sys/devices/system/cpu/online`):
//! `"0-3,5,8-9"`, empty for none. The one CPU-set type of the crate: the system layer reads
//! and writes it, the QoS strategies (`qos::cpuset`, which re-exports it as `CpuList`) compute
//! with it.
//!
//! A bitset (one bit per CPU, no trailing zero words, so equality is set equality): suppress
//! compares and merges the cpusets of every BE cgroup each round, which must stay cheap. CPU ids
//! of 65536 and above are refused (no machine has them), so a hostile `"0-4294967295"` costs an
//! error, not half a gigabyte.

use std::fmt;

use crate::error::ParseError;

/// More CPUs than any machine has: an id beyond this is garbage, refused before it costs memory.
pub const MAX_CPUS: u32 = 65_536;

const WHAT: &str = "cpu list";

/// A set of CPU ids. Equality is semantic: `"0,1,2"` equals `"0-2"`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    words: Vec<u64>,
}

impl CpuSet {
    /// The empty set (an empty `cpuset.cpus`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a set from CPU ids in any order (ids ≥ [`MAX_CPUS`] are ignored: no such CPU).
    pub fn from_cpus(cpus: impl IntoIterator<Item = u32>) -> Self {
        let mut set = Self::new();
        for cpu in cpus.into_iter().filter(|c| *c < MAX_CPUS) {
            set.insert_range(cpu, cpu);
        }
        set
    }

    /// Parses the kernel list format. Whitespace around the list (the trailing newline) is
    /// ignored; anything else malformed (empty elements, signs, inner spaces, descending
    /// ranges, ids ≥ [`MAX_CPUS`]) is an error.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let text = text.trim();
        let mut set = Self::new();
        if text.is_empty() {
            return Ok(set);
        }
        for part in text.split(',') {
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
            if hi >= MAX_CPUS {
                return Err(ParseError::new(
                    WHAT,
                    format!("{part:?} names a CPU beyond 65535"),
                ));
            }
            set.insert_range(lo, hi);
        }
        Ok(set)
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True when no CPU is in the set.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// True when `cpu` is in the set.
    pub fn contains(&self, cpu: u32) -> bool {
        self.word((cpu / 64) as usize) & (1u64 << (cpu % 64)) != 0
    }

    /// True when every CPU of `self` is in `other` (a cpuset write that narrows nothing).
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, w)| w & !other.word(i) == 0)
    }

    /// CPUs in either set (used to widen a parent before its children move).
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        self.combine(other, |a, b| a | b)
    }

    /// CPUs of `self` not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        self.combine(other, |a, b| a & !b)
    }

    /// CPUs in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        self.combine(other, |a, b| a & b)
    }

    /// Iterates the CPU ids in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            (0..64u32)
                .filter(move |bit| w & (1u64 << bit) != 0)
                .map(move |bit| i as u32 * 64 + bit)
        })
    }

    /// Sets CPUs `a..=b` (`a <= b < MAX_CPUS`), a word at a time.
    fn insert_range(&mut self, a: u32, b: u32) {
        let (first, last) = ((a / 64) as usize, (b / 64) as usize);
        if self.words.len() <= last {
            self.words.resize(last + 1, 0);
        }
        for (i, word) in self.words.iter_mut().enumerate().take(last + 1).skip(first) {
            let lo = if i == first { a % 64 } else { 0 };
            let hi = if i == last { b % 64 } else { 63 };
            *word |= (u64::MAX >> (63 - hi)) & (u64::MAX << lo);
        }
    }

    fn word(&self, i: usize) -> u64 {
        self.words.get(i).copied().unwrap_or(0)
    }

    fn combine(&self, other: &CpuSet, op: impl Fn(u64, u64) -> u64) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let mut words: Vec<u64> = (0..n).map(|i| op(self.word(i), other.word(i))).collect();
        while words.last() == Some(&0) {
            words.pop();
        }
        CpuSet { words }
    }
}

fn parse_cpu(text: &str) -> Result<u32, ParseError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::new(WHAT, format!("not a cpu id: {text:?}")));
    }
    text.parse::<u32>()
        .map_err(|e| ParseError::new(WHAT, format!("{text:?}: {e}")))
}

impl fmt::Display for CpuSet {
    /// The canonical kernel form: runs of 2+ CPUs as `a-b`, single CPUs alone.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.iter().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end += 1;
                iter.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if end == start {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
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
            ("0-65535", "0-65535", 1 << 16),
        ] {
            let set = CpuSet::parse(input).unwrap();
            assert_eq!(set.to_string(), canonical, "{input:?}");
            assert_eq!(set.len(), len, "{input:?}");
        }
    }

    #[test]
    fn rejects_malformed_lists() {
        for bad in [
            "a",
            "1-",
            "-1",
            "3-1",
            "1,,2",
            "1 2",
            "+1",
            "99999999999",
            "0-4294967295",
            "65536",
        ] {
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
        assert_eq!(a.difference(&b).to_string(), "0-1");
        assert_eq!(a.intersection(&b).to_string(), "2-3");
        assert!(a.difference(&a).is_empty() && a.difference(&a) == CpuSet::new());
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
