//! CPU and memory amounts in the units batch resources are published in: milli-cores and bytes.
//!
//! Every operation saturates instead of overflowing: a node object can claim any number, and a
//! nonsensical input must give a nonsensical-but-finite answer, never a panic.

use serde::Serialize;

/// A CPU amount in milli-cores and a memory amount in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Amounts {
    /// Milli-cores (`1` core = `1000`).
    pub cpu: i64,
    /// Bytes.
    pub memory: i64,
}

impl Amounts {
    /// Zero CPU and zero memory.
    pub const ZERO: Amounts = Amounts { cpu: 0, memory: 0 };

    /// Builds an amount from milli-cores and bytes.
    pub const fn new(cpu: i64, memory: i64) -> Self {
        Amounts { cpu, memory }
    }

    /// Per-resource sum.
    #[must_use]
    pub fn plus(self, other: Amounts) -> Amounts {
        Amounts::new(
            self.cpu.saturating_add(other.cpu),
            self.memory.saturating_add(other.memory),
        )
    }

    /// Per-resource difference (may be negative).
    #[must_use]
    pub fn minus(self, other: Amounts) -> Amounts {
        Amounts::new(
            self.cpu.saturating_sub(other.cpu),
            self.memory.saturating_sub(other.memory),
        )
    }

    /// Per-resource maximum.
    #[must_use]
    pub fn max(self, other: Amounts) -> Amounts {
        Amounts::new(self.cpu.max(other.cpu), self.memory.max(other.memory))
    }

    /// Per-resource minimum.
    #[must_use]
    pub fn min(self, other: Amounts) -> Amounts {
        Amounts::new(self.cpu.min(other.cpu), self.memory.min(other.memory))
    }

    /// Negative values become zero, per resource.
    #[must_use]
    pub fn floor_zero(self) -> Amounts {
        self.max(Amounts::ZERO)
    }

    /// The value of one resource.
    pub fn get(self, resource: Resource) -> i64 {
        match resource {
            Resource::Cpu => self.cpu,
            Resource::Memory => self.memory,
        }
    }

    /// Builds an amount from a function of the resource.
    pub fn from_fn(mut f: impl FnMut(Resource) -> i64) -> Amounts {
        Amounts::new(f(Resource::Cpu), f(Resource::Memory))
    }
}

impl std::iter::Sum for Amounts {
    fn sum<I: Iterator<Item = Amounts>>(iter: I) -> Amounts {
        iter.fold(Amounts::ZERO, Amounts::plus)
    }
}

/// The two resources batch allocatable is computed for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// CPU, in milli-cores.
    Cpu,
    /// Memory, in bytes.
    Memory,
}

impl Resource {
    /// Both resources, CPU first.
    pub const BOTH: [Resource; 2] = [Resource::Cpu, Resource::Memory];

    /// The batch resource name published on the Node.
    pub fn batch_name(self) -> &'static str {
        match self {
            Resource::Cpu => koord_api::names::RESOURCE_BATCH_CPU,
            Resource::Memory => koord_api::names::RESOURCE_BATCH_MEMORY,
        }
    }

    /// The mid resource name published on the Node.
    pub fn mid_name(self) -> &'static str {
        match self {
            Resource::Cpu => koord_api::names::RESOURCE_MID_CPU,
            Resource::Memory => koord_api::names::RESOURCE_MID_MEMORY,
        }
    }

    /// Short lowercase name used in metric labels and explanations.
    pub fn short_name(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
        }
    }
}

/// `value × percent / 100`, truncated toward zero, computed exactly (no float), saturating.
///
/// Upstream computes `int64(float64(value) × ratio)`; the exact form agrees with it except
/// where the float product lands a hair below an integer, where upstream loses one unit.
pub fn percent_of(value: i64, percent: i64) -> i64 {
    let exact = i128::from(value) * i128::from(percent) / 100;
    i64::try_from(exact).unwrap_or(if exact < 0 { i64::MIN } else { i64::MAX })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_of_truncates_toward_zero_and_allows_negative_percent() {
        assert_eq!(percent_of(100_000, 35), 35_000);
        assert_eq!(percent_of(999, 35), 349);
        assert_eq!(percent_of(100_000, -50), -50_000);
        assert_eq!(percent_of(-999, 35), -349);
    }

    #[test]
    fn percent_of_saturates_instead_of_overflowing() {
        assert_eq!(percent_of(i64::MAX, 1000), i64::MAX);
        assert_eq!(percent_of(i64::MAX, -1000), i64::MIN);
    }

    #[test]
    fn arithmetic_saturates() {
        let big = Amounts::new(i64::MAX, i64::MIN);
        assert_eq!(big.plus(Amounts::new(1, -1)), big);
        assert_eq!(Amounts::new(i64::MIN, 0).minus(Amounts::new(1, 0)).cpu, i64::MIN);
    }
}
