//! The isolation policies compared, and how each is put in place on a node.

use serde_json::{Value, json};

/// One configuration of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Row name.
    pub name: &'static str,
    /// Whether BE runs next to LS.
    pub be: bool,
    /// Whether koordlet runs (embedded mode; a real cluster always has it).
    pub koordlet: bool,
    /// The NodeSLO spec (embedded mode) and, as `clusterStrategy` of the matching ConfigMap
    /// keys, the slo-controller-config (real cluster).
    pub node_slo: Value,
    /// Whether it needs `cpu.idle` in the cpu controller.
    pub needs_cpu_idle: bool,
}

fn suppress(policy: &str) -> Value {
    json!({"enable": true, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": policy})
}

fn be_idle() -> Value {
    json!({"lsClass": {"cpuQOS": {"enable": true}}, "beClass": {"cpuQOS": {"enable": true}}})
}

/// Every policy, in table order: LS alone (the reference), plain Kubernetes (BE at cpu.shares 2,
/// no koordlet), koordlet's two suppress policies at the chart's 65 % threshold, `cpu.idle` for
/// BE, and cpuset suppress with `cpu.idle` combined.
pub fn all() -> Vec<Policy> {
    let off = json!({"resourceUsedThresholdWithBE": {"enable": false}});
    vec![
        Policy {
            name: "ls-alone",
            be: false,
            koordlet: false,
            node_slo: off.clone(),
            needs_cpu_idle: false,
        },
        Policy {
            name: "k8s",
            be: true,
            koordlet: false,
            node_slo: off,
            needs_cpu_idle: false,
        },
        Policy {
            name: "cfs-quota",
            be: true,
            koordlet: true,
            node_slo: json!({"resourceUsedThresholdWithBE": suppress("cfsQuota")}),
            needs_cpu_idle: false,
        },
        Policy {
            name: "cpuset",
            be: true,
            koordlet: true,
            node_slo: json!({"resourceUsedThresholdWithBE": suppress("cpuset")}),
            needs_cpu_idle: false,
        },
        Policy {
            name: "cpu-idle",
            be: true,
            koordlet: true,
            node_slo: json!({"resourceUsedThresholdWithBE": {"enable": false}, "resourceQOSStrategy": be_idle()}),
            needs_cpu_idle: true,
        },
        Policy {
            name: "cpuset+idle",
            be: true,
            koordlet: true,
            node_slo: json!({"resourceUsedThresholdWithBE": suppress("cpuset"), "resourceQOSStrategy": be_idle()}),
            needs_cpu_idle: true,
        },
    ]
}

/// The slo-controller-config data that makes the manager render `policy.node_slo` for every node.
pub fn config_map_data(policy: &Policy) -> serde_json::Map<String, Value> {
    let mut data = serde_json::Map::new();
    data.insert(
        "colocation-config".into(),
        // The whole node may be reclaimed for batch (upstream's default keeps 35 % back), so BE
        // may fill the node as on the embedded node, whose batch-cpu is its CPU count, and the
        // isolation policy alone decides what BE gets.
        Value::String(json!({"enable": true, "cpuReclaimThresholdPercent": 100}).to_string()),
    );
    let threshold = policy
        .node_slo
        .get("resourceUsedThresholdWithBE")
        .cloned()
        .unwrap_or(json!({"enable": false}));
    data.insert(
        "resource-threshold-config".into(),
        Value::String(json!({"clusterStrategy": threshold}).to_string()),
    );
    let qos = policy
        .node_slo
        .get("resourceQOSStrategy")
        .cloned()
        .unwrap_or_else(
            || json!({"lsClass": {"cpuQOS": {"enable": false}}, "beClass": {"cpuQOS": {"enable": false}}}),
        );
    data.insert(
        "resource-qos-config".into(),
        Value::String(json!({"clusterStrategy": qos}).to_string()),
    );
    data
}

/// Whether the cpu controller mounted at `cpu_root` has `cpu.idle`.
pub fn cpu_idle_available(cpu_root: &std::path::Path) -> bool {
    cpu_root.join("cpu.idle").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_as_node_slo_and_config_map() {
        for p in all() {
            let spec: koord_api::NodeSLOSpec = serde_json::from_value(p.node_slo.clone()).unwrap();
            let text = serde_json::to_string(&spec).unwrap();
            if p.name == "cpuset" {
                assert!(text.contains("cpuset"), "{text}");
            }
            let data = config_map_data(&p);
            assert_eq!(data.len(), 3);
        }
        assert_eq!(all()[0].name, "ls-alone");
    }
}
