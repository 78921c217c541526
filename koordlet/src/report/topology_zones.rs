//! The NUMA zones of the node's NodeResourceTopology, as upstream koordlet reports them: one
//! zone per NUMA node, named `node-<id>`, type `Node`, with `cpu` (the node's CPU count) and
//! `memory` (its `MemTotal`) where `capacity` = `allocatable` = `available`. koord-manager
//! reads those zones for NUMA-level batch resources and writes its `kubernetes.io/batch-*`
//! entries into them.
//!
//! koordlet owns the zone list (as upstream: a zone that is not one of this node's NUMA nodes
//! is dropped) and, in each zone, its `type` and the `cpu` and `memory` entries; every other
//! entry (the manager's batch entries, a device plugin's) and field of a zone is kept. A node
//! without NUMA information in sysfs reports no zones: the list is then left as it is.
//!
//! `zones` is an atomic list in the schema, so it is written by an update with the
//! `resourceVersion` read (retried on a 409 Conflict), never by a server-side apply that would
//! take over the whole list.

use serde_json::{Map, Value, json};

use crate::system::numa::NumaNode;

/// What koordlet reports for one NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedZone {
    /// `node-<id>`.
    pub name: String,
    /// CPUs of the NUMA node.
    pub cpus: u64,
    /// `MemTotal` of the NUMA node, bytes.
    pub memory_bytes: u64,
}

/// The zones of `nodes` (sorted by NUMA id, as `read_numa_nodes` returns them).
pub fn reported_zones(nodes: &[NumaNode]) -> Vec<ReportedZone> {
    nodes
        .iter()
        .map(|node| ReportedZone {
            name: format!("node-{}", node.id),
            cpus: u64::try_from(node.cpus.len()).unwrap_or(u64::MAX),
            memory_bytes: node.memory.mem_total,
        })
        .collect()
}

fn entry_name(entry: &Value) -> Option<&str> {
    entry.get("name").and_then(Value::as_str)
}

/// Sets `resource` of a zone's `resources` to `amount` (all three fields), keeping the entry's
/// other fields; a new entry goes in name order.
fn set_resource(resources: &mut Vec<Value>, resource: &str, amount: u64) {
    let text = Value::String(amount.to_string());
    match resources
        .iter_mut()
        .find(|e| entry_name(e) == Some(resource))
        .and_then(Value::as_object_mut)
    {
        Some(entry) => {
            for field in ["capacity", "allocatable", "available"] {
                entry.insert(field.to_owned(), text.clone());
            }
        }
        None => {
            resources.push(json!({
                "name": resource,
                "capacity": text,
                "allocatable": text,
                "available": text,
            }));
            resources.sort_by(|a, b| entry_name(a).cmp(&entry_name(b)));
        }
    }
}

/// The zone list to write: one zone per reported NUMA node, in NUMA order, each starting from
/// the existing zone of that name; `None` when the object already says exactly that (or
/// nothing is reported). Entries whose value is equal but spelled otherwise (`2k` for `2000`)
/// are rewritten only when another change is written anyway.
pub fn merge_zones(existing: &[Value], reported: &[ReportedZone]) -> Option<Vec<Value>> {
    if reported.is_empty() {
        return None;
    }
    let merged: Vec<Value> = reported
        .iter()
        .map(|zone| {
            let mut object = existing
                .iter()
                .find(|z| z.get("name").and_then(Value::as_str) == Some(zone.name.as_str()))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_else(Map::new);
            object.insert("name".to_owned(), Value::String(zone.name.clone()));
            object.insert("type".to_owned(), Value::String("Node".to_owned()));
            let mut resources = match object.remove("resources") {
                Some(Value::Array(resources)) => resources,
                _ => Vec::new(),
            };
            set_resource(&mut resources, "cpu", zone.cpus);
            set_resource(&mut resources, "memory", zone.memory_bytes);
            object.insert("resources".to_owned(), Value::Array(resources));
            Value::Object(object)
        })
        .collect();
    (!same_zones(existing, &merged)).then_some(merged)
}

/// Equal, reading quantities by value (the API server may store `2000` as `2k`).
fn same_zones(a: &[Value], b: &[Value]) -> bool {
    fn normalized(value: &Value) -> Value {
        match value {
            Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        let v = match (k.as_str(), v) {
                            ("capacity" | "allocatable" | "available", Value::String(text)) => {
                                koord_api::canonical_quantity(text)
                                    .map(Value::String)
                                    .unwrap_or_else(|_| v.clone())
                            }
                            _ => normalized(v),
                        };
                        (k.clone(), v)
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| normalized(x) == normalized(y))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::system::CpuSet;
    use crate::system::numa::NumaMeminfo;

    fn numa(id: u32, cpus: &str, mem_total: u64) -> NumaNode {
        NumaNode {
            id,
            cpus: CpuSet::parse(cpus).unwrap(),
            memory: NumaMeminfo {
                mem_total,
                ..NumaMeminfo::default()
            },
        }
    }

    fn resource(name: &str, amount: &str) -> Value {
        json!({"name": name, "capacity": amount, "allocatable": amount, "available": amount})
    }

    #[test]
    fn one_zone_per_numa_node() {
        let zones = reported_zones(&[numa(0, "0-3", 8 << 30), numa(1, "4-7", 4 << 30)]);
        assert_eq!(
            zones,
            vec![
                ReportedZone {
                    name: "node-0".into(),
                    cpus: 4,
                    memory_bytes: 8 << 30,
                },
                ReportedZone {
                    name: "node-1".into(),
                    cpus: 4,
                    memory_bytes: 4 << 30,
                },
            ]
        );
        let merged = merge_zones(&[], &zones).unwrap();
        assert_eq!(
            merged[0],
            json!({"name": "node-0", "type": "Node", "resources": [
                resource("cpu", "4"), resource("memory", &(8u64 << 30).to_string())]})
        );
        // Written as is: nothing more to do.
        assert_eq!(merge_zones(&merged, &zones), None);
    }

    #[test]
    fn other_writers_entries_and_fields_stay_and_foreign_zones_go() {
        let zones = reported_zones(&[numa(0, "0-1", 1000)]);
        let existing = vec![
            json!({"name": "node-0", "type": "Node", "costs": [{"name": "node-0", "value": 10}],
            "resources": [
                resource("cpu", "4"),
                resource("kubernetes.io/batch-cpu", "1500"),
                resource("memory", "1000"),
            ]}),
            json!({"name": "node-7", "type": "Node", "resources": [resource("cpu", "2")]}),
        ];
        let merged = merge_zones(&existing, &zones).unwrap();
        assert_eq!(
            merged,
            vec![
                json!({"name": "node-0", "type": "Node", "costs": [{"name": "node-0", "value": 10}],
                "resources": [
                    resource("cpu", "2"),
                    resource("kubernetes.io/batch-cpu", "1500"),
                    resource("memory", "1000"),
                ]})
            ]
        );
    }

    #[test]
    fn equal_values_spelled_otherwise_are_no_change_and_no_numa_info_changes_nothing() {
        let zones = reported_zones(&[numa(0, "0-1", 2000)]);
        let existing = vec![json!({"name": "node-0", "type": "Node", "resources": [
            resource("cpu", "2"), resource("memory", "2k")]})];
        assert_eq!(merge_zones(&existing, &zones), None);
        assert_eq!(merge_zones(&existing, &[]), None);
    }
}
