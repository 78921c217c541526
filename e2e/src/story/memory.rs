//! Sizing the memory act. A simulated node's memory usage is the host's (`/proc/meminfo`: the
//! pods' processes are real and share one machine), so the first node's memory capacity is
//! sized from what the host uses at start: the seed's 70 % eviction threshold is then crossed
//! by the LS cache pod of the memory act and not before, with a wide margin on both sides.
//! Other nodes get twice that capacity, so the first node's pressure stays its own.

/// Share of the first node's capacity in use before the memory act (host + pods + BE cache).
const BASE_PERCENT: u64 = 55;
/// Share the BE cache executor holds: enough that evicting it brings usage back below the
/// lower bound (threshold − 2).
const BE_CACHE_PERCENT: u64 = 23;
/// Share the LS cache pod is planned to add: usage goes to about 90 %.
const LS_CACHE_PERCENT: u64 = 35;
/// Where the LS cache pod brings the host's usage when the act starts: evicting the BE cache
/// then lands below the lower bound (68 %).
const TARGET_PERCENT: u64 = 88;
// Evicting the BE cache alone must bring the act's usage below the seed's lower bound.
const _: () = assert!(TARGET_PERCENT - BE_CACHE_PERCENT < 68);
/// What the pods other than the two cache holders use per node: three python workers and
/// their small allocations.
const PODS_PER_NODE_BYTES: u64 = 180 << 20;
/// Capacity granularity.
const ROUND: u64 = 256 << 20;
/// Smallest node.
const MIN_CAPACITY: u64 = 2 << 30;

/// The memory act's figures, all in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Host memory in use at start (MemTotal − MemAvailable).
    pub host_used: u64,
    /// The first node's memory capacity.
    pub first_node_capacity: u64,
    /// What the BE cache executor holds.
    pub be_cache_bytes: u64,
    /// What the LS cache pod holds during the memory act.
    pub ls_cache_bytes: u64,
    /// Why the memory act is left out, when it is.
    pub skipped: Option<String>,
}

/// (MemTotal, MemAvailable) of the host, bytes.
pub fn host_memory() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse::<u64>()
            .ok()
            .map(|kib| kib * 1024)
    };
    Some((field("MemTotal:")?, field("MemAvailable:")?))
}

impl MemoryPlan {
    /// Sizes the act from the host's memory now, for `nodes` nodes.
    pub fn from_host(nodes: usize) -> MemoryPlan {
        match host_memory() {
            Some((total, available)) => MemoryPlan::size(total, available, nodes as u64),
            None => MemoryPlan {
                host_used: 0,
                first_node_capacity: 8 << 30,
                be_cache_bytes: 0,
                ls_cache_bytes: 0,
                skipped: Some("/proc/meminfo unreadable".into()),
            },
        }
    }

    /// The sizing as a pure function of the host's memory.
    pub fn size(total: u64, available: u64, nodes: u64) -> MemoryPlan {
        let host_used = total.saturating_sub(available);
        let others = host_used + nodes * PODS_PER_NODE_BYTES;
        // others + BE cache = BASE % of capacity.
        let raw = others * 100 / (BASE_PERCENT - BE_CACHE_PERCENT);
        let capacity = raw.div_ceil(ROUND).max(1) * ROUND;
        let capacity = capacity.max(MIN_CAPACITY);
        let be_cache_bytes = capacity * BE_CACHE_PERCENT / 100;
        let ls_cache_bytes = capacity * LS_CACHE_PERCENT / 100;
        let needed = be_cache_bytes + ls_cache_bytes;
        let skipped = (needed > available * 7 / 10).then(|| {
            format!(
                "the host has {} MiB available; the memory act needs {} MiB",
                available >> 20,
                needed >> 20
            )
        });
        MemoryPlan {
            host_used,
            first_node_capacity: capacity,
            be_cache_bytes: if skipped.is_some() { 0 } else { be_cache_bytes },
            ls_cache_bytes: if skipped.is_some() { 0 } else { ls_cache_bytes },
            skipped,
        }
    }

    /// Memory capacity of node `index` (0 is the first).
    pub fn node_capacity(&self, index: usize) -> u64 {
        if index == 0 {
            self.first_node_capacity
        } else {
            self.first_node_capacity * 2
        }
    }

    /// The most memory one pod of the story may hold: the first node's capacity.
    pub fn largest_pod_bytes(&self) -> u64 {
        self.first_node_capacity
    }

    /// What the LS cache pod fills when the memory act starts: enough to bring the host's
    /// memory in use to about 88 % of the first node's capacity now (the host's usage drifts
    /// while the story plays), at least the planned share's third, at most 70 % of what is
    /// available.
    pub fn ls_cache_now(&self) -> u64 {
        match host_memory() {
            Some((total, available)) => self.ls_cache_for(total.saturating_sub(available), available),
            None => self.ls_cache_bytes,
        }
    }

    /// [`Self::ls_cache_now`] for a host using `used` bytes with `available` left.
    pub fn ls_cache_for(&self, used: u64, available: u64) -> u64 {
        let target = self.first_node_capacity * TARGET_PERCENT / 100;
        target
            .saturating_sub(used)
            .max(self.ls_cache_bytes / 3)
            .min(available * 7 / 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: u64 = 1 << 30;

    #[test]
    fn threshold_is_crossed_by_the_ls_cache_and_not_before() {
        let plan = MemoryPlan::size(24 * GI, 22 * GI, 2);
        assert_eq!(plan.skipped, None);
        let c = plan.first_node_capacity;
        let before = plan.host_used + 2 * PODS_PER_NODE_BYTES + plan.be_cache_bytes;
        assert!(before * 100 / c <= 55, "{plan:?}");
        let during = before + plan.ls_cache_bytes;
        assert!(during * 100 / c >= 85, "{plan:?}");
        // Evicting the BE cache brings usage below the lower bound (68 %).
        assert!((during - plan.be_cache_bytes) * 100 / c < 68, "{plan:?}");
        assert_eq!(plan.node_capacity(1), 2 * c);
        // The act fills what brings the host to 90 % when it starts.
        assert_eq!(
            plan.ls_cache_for(c / 2, 20 * GI),
            c * TARGET_PERCENT / 100 - c / 2
        );
        assert_eq!(plan.ls_cache_for(c, 20 * GI), plan.ls_cache_bytes / 3);
    }

    #[test]
    fn a_host_without_room_skips_the_act() {
        let plan = MemoryPlan::size(8 * GI, GI, 1);
        assert!(plan.skipped.is_some());
        assert_eq!(plan.ls_cache_bytes, 0);
    }
}
