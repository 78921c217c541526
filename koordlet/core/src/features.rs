//! Feature gates: upstream's names and defaults (`--feature-gates=K=V,...`).

use std::collections::BTreeMap;

/// Every gate koordlet accepts, with upstream's default.
pub const GATES: &[(&str, bool)] = &[
    ("BECPUSuppress", true),
    ("BECPUManager", false),
    ("BECPUEvict", false),
    ("CPUEvict", false),
    ("CPUAllocatableEvict", false),
    ("BEMemoryEvict", false),
    ("MemoryEvict", false),
    ("MemoryAllocatableEvict", false),
    ("CPUBurst", true),
    ("SystemConfig", false),
    ("RdtResctrl", true),
    ("ResctrlCollector", false),
    ("CgroupReconcile", false),
    ("NodeTopologyReport", true),
    ("Accelerators", false),
    ("RDMADevices", false),
    ("CPICollector", false),
    ("Libpfm4", false),
    ("PSICollector", false),
    ("BlkIOReconcile", false),
    ("ColdPageCollector", false),
    ("HugePageReport", false),
    ("PodResourcesProxy", false),
    ("HamiCoreVGPUMonitor", false),
    ("PerCPUMetric", false),
    ("NodeMetricPromMetrics", false),
    ("AuditEvents", false),
    ("AuditEventsHTTPHandler", false),
    ("GroupIdentity", true),
    ("CPUSetAllocator", true),
    ("BatchResource", true),
    ("GPUEnvInject", false),
    ("RDMADeviceInject", false),
    ("CPUNormalization", false),
    ("CoreSched", false),
    ("TerwayQoS", false),
    ("TCNetworkQoS", false),
    ("Resctrl", false),
    ("OOMScoreAdj", false),
];

/// The gates with code behind them: turning one of these on or off changes what koordlet does.
/// Every other gate is accepted for compatibility with upstream's flags and does nothing; the
/// agent names the enabled ones in one warning at start and in the
/// `koordlet_feature_gate_enabled{gate,implemented}` metric.
pub const IMPLEMENTED: &[&str] = &[
    "BECPUSuppress",
    "BECPUEvict",
    "BEMemoryEvict",
    "MemoryEvict",
    "CPUBurst",
    "BatchResource",
    "GroupIdentity",
    "CoreSched",
    "RdtResctrl",
    "CPUSetAllocator",
    "CgroupReconcile",
    "SystemConfig",
    "NodeTopologyReport",
];

/// `koordlet --help` text of `--feature-gates` (kept equal to [`IMPLEMENTED`] by a test).
pub const HELP: &str = "Feature gates, `Name=true|false,...` (upstream names and defaults). \
Implemented: BECPUSuppress, BECPUEvict, BEMemoryEvict, MemoryEvict (pods labelled koordinator.sh/eviction-enabled=true), CPUBurst, BatchResource, GroupIdentity \
(cpu.idle, or cpu.bvt_warp_ns where the kernel has it), CoreSched, RdtResctrl, CPUSetAllocator (LSE/LSR cpusets of the scheduler), CgroupReconcile (memory QoS), SystemConfig, NodeTopologyReport (cpu-basic-info only). Every other upstream gate is \
accepted and does nothing; the enabled ones are named in a warning at start.";

/// Whether `name` has code behind it (see [`IMPLEMENTED`]).
pub fn is_implemented(name: &str) -> bool {
    IMPLEMENTED.contains(&name)
}

/// A bad `--feature-gates` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGateError {
    /// Not `K=V`.
    #[error("feature gate {0:?}: expected Name=true|false")]
    Syntax(String),
    /// Unknown name.
    #[error("unknown feature gate {0:?} (known: {known})", known = GATES.iter().map(|g| g.0).collect::<Vec<_>>().join(", "))]
    Unknown(String),
    /// Value not a bool.
    #[error("feature gate {name}: {value:?} is not true or false")]
    Value {
        /// Gate.
        name: String,
        /// Value given.
        value: String,
    },
}

/// The gates in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureGates(BTreeMap<&'static str, bool>);

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates(GATES.iter().copied().collect())
    }
}

impl FeatureGates {
    /// Parses `K=V,K=V` over the defaults (empty text: defaults).
    pub fn parse(text: &str) -> Result<Self, FeatureGateError> {
        let mut gates = Self::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| FeatureGateError::Syntax(item.to_string()))?;
            let (name, value) = (name.trim(), value.trim());
            let key = GATES
                .iter()
                .find(|g| g.0 == name)
                .map(|g| g.0)
                .ok_or_else(|| FeatureGateError::Unknown(name.to_string()))?;
            let on = match value.to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => {
                    return Err(FeatureGateError::Value {
                        name: name.to_string(),
                        value: value.to_string(),
                    });
                }
            };
            gates.0.insert(key, on);
        }
        Ok(gates)
    }

    /// Whether `name` is on (unknown names are off).
    pub fn enabled(&self, name: &str) -> bool {
        self.0.get(name).copied().unwrap_or(false)
    }

    /// Every gate with whether it is on, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, bool)> + '_ {
        self.0.iter().map(|(name, on)| (*name, *on))
    }

    /// The gates that are on but do nothing in this koordlet (the start-up warning's list).
    pub fn enabled_without_effect(&self) -> Vec<&'static str> {
        self.iter()
            .filter(|(name, on)| *on && !is_implemented(name))
            .map(|(name, _)| name)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let g = FeatureGates::parse("").unwrap();
        assert!(g.enabled("BECPUSuppress") && g.enabled("CPUBurst") && g.enabled("BatchResource"));
        assert!(!g.enabled("BECPUEvict") && !g.enabled("BEMemoryEvict"));
        let g = FeatureGates::parse("BECPUEvict=true, CPUBurst=False").unwrap();
        assert!(g.enabled("BECPUEvict") && !g.enabled("CPUBurst"));
        assert!(matches!(
            FeatureGates::parse("Nope=true"),
            Err(FeatureGateError::Unknown(_))
        ));
        assert!(matches!(
            FeatureGates::parse("CPUBurst"),
            Err(FeatureGateError::Syntax(_))
        ));
        assert!(matches!(
            FeatureGates::parse("CPUBurst=yes"),
            Err(FeatureGateError::Value { .. })
        ));
    }

    #[test]
    fn implemented_gates_are_known_and_named_in_the_help() {
        for name in IMPLEMENTED {
            assert!(GATES.iter().any(|g| g.0 == *name), "{name} is not a gate");
            assert!(HELP.contains(name), "--help does not name {name}");
        }
        for (name, _) in GATES.iter().filter(|g| !is_implemented(g.0)) {
            let listed = HELP.split(['(', ')', ',', ' ', '.']).any(|w| w == *name);
            assert!(!listed, "--help names {name} as implemented");
        }
        // Upstream's defaults: every gate on by default has an effect here.
        assert!(FeatureGates::default().enabled_without_effect().is_empty());
        let g = FeatureGates::parse("Accelerators=true").unwrap();
        assert_eq!(g.enabled_without_effect(), vec!["Accelerators"]);
        assert_eq!(g.iter().count(), GATES.len());
    }
}
