//! The `zones` of a NodeResourceTopology as JSON: what the NUMA-level formula reads from them
//! (each zone's cpu / memory allocatable and the batch entries it carries) and the one edit the
//! manager makes (its batch entries). Zones are kept as JSON so that everything else other
//! writers put there (costs, attributes, other resources) goes back untouched.
//!
//! A zone entry looks like
//! `{"name": "node-0", "type": "Node", "resources": [{"name": "cpu", "capacity": "32",
//! "allocatable": "32", "available": "30"}, ...]}`; quantities are strings or integers.

use std::collections::BTreeMap;

use koord_api::{
    names::{RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY},
    quantity::{ExactQuantity, RESOURCE_CPU, RESOURCE_MEMORY, amount_of},
};
use serde_json::{Value, json};

use super::{Amounts, PublishedValues, ZoneEntries, ZoneFacts};

/// What the formula and the update decision read from an object's zones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopologyZones {
    /// The zones the formula counts, in the object's order.
    pub zones: Vec<ZoneFacts>,
    /// The batch entries every named zone carries now (unreadable zones included: their
    /// entries are set to 0, as for any zone without a result).
    pub entries: BTreeMap<String, ZoneEntries>,
    /// Zones left out of the formula, with the reason.
    pub skipped: Vec<String>,
}

fn quantity(value: &Value) -> Result<ExactQuantity, String> {
    match value {
        Value::String(text) => ExactQuantity::parse(text).map_err(|e| e.to_string()),
        Value::Number(number) => match number.as_i64() {
            Some(integer) => Ok(ExactQuantity::from_units(integer)),
            None => ExactQuantity::parse(&number.to_string()).map_err(|e| e.to_string()),
        },
        other => Err(format!("{other} is not a quantity")),
    }
}

fn resources_of(zone: &Value) -> Result<&[Value], String> {
    match zone.get("resources") {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(resources)) => Ok(resources),
        Some(_) => Err("resources is not a list".to_owned()),
    }
}

fn entry_name(entry: &Value) -> Option<&str> {
    entry.get("name").and_then(Value::as_str)
}

/// One zone's cpu/memory allocatable and whether it lists either.
fn zone_facts(name: &str, resources: &[Value]) -> Result<ZoneFacts, String> {
    let mut facts = ZoneFacts {
        name: name.to_owned(),
        ..ZoneFacts::default()
    };
    for entry in resources {
        let resource = match entry_name(entry) {
            Some(resource @ (RESOURCE_CPU | RESOURCE_MEMORY)) => resource,
            _ => continue,
        };
        facts.lists_cpu_or_memory = true;
        let field = format!("resources[{resource}].allocatable");
        let value = entry
            .get("allocatable")
            .ok_or_else(|| format!("{field}: missing"))?;
        let exact = quantity(value).map_err(|e| format!("{field}: {e}"))?;
        let amount = amount_of(resource, exact).map_err(|e| format!("{field}: {e}"))?;
        if resource == RESOURCE_CPU {
            facts.allocatable.cpu = amount;
        } else {
            facts.allocatable.memory = amount;
        }
    }
    Ok(facts)
}

/// The batch entries a zone carries; an unreadable value counts as absent (it is rewritten).
fn entries_of(resources: &[Value]) -> ZoneEntries {
    let mut entries = ZoneEntries::default();
    for entry in resources {
        let Some(name) = entry_name(entry) else { continue };
        let read = |field: &str| {
            entry
                .get(field)
                .and_then(|v| quantity(v).ok())
                .map(ExactQuantity::value)
        };
        let set = |values: &mut PublishedValues, value: Option<i64>| match name {
            RESOURCE_BATCH_CPU => values.cpu = value,
            RESOURCE_BATCH_MEMORY => values.memory = value,
            _ => {}
        };
        set(&mut entries.capacity, read("capacity"));
        set(&mut entries.allocatable, read("allocatable"));
        set(&mut entries.available, read("available"));
    }
    entries
}

/// Reads an object's zones. A zone without a name, with `resources` not a list, with an
/// unreadable cpu/memory allocatable, or named like an earlier zone is left out with a reason
/// (never a failure of the whole object).
pub fn zone_entries_of(zones: &[Value]) -> TopologyZones {
    let mut read = TopologyZones::default();
    for (index, zone) in zones.iter().enumerate() {
        let Some(name) = zone.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) else {
            read.skipped.push(format!("zone {index}: no name"));
            continue;
        };
        let resources = match resources_of(zone) {
            Ok(resources) => resources,
            Err(reason) => {
                read.skipped.push(format!("zone {name}: {reason}"));
                continue;
            }
        };
        if read.entries.contains_key(name) {
            read.skipped
                .push(format!("zone {name}: named like an earlier zone"));
            continue;
        }
        read.entries.insert(name.to_owned(), entries_of(resources));
        match zone_facts(name, resources) {
            Ok(facts) => read.zones.push(facts),
            Err(reason) => read.skipped.push(format!("zone {name}: {reason}")),
        }
    }
    read
}

/// Sets each zone's batch entries (`capacity` = `allocatable` = `available`) to its target;
/// a zone without a target has the batch entries it carries set to 0 (none added). Entries are
/// added in name order, as upstream keeps them; other entries and zones are not touched.
/// Returns whether anything changed.
pub fn set_zone_entries(zones: &mut [Value], targets: &BTreeMap<String, Amounts>) -> bool {
    let mut changed = false;
    for zone in zones.iter_mut() {
        let Some(name) = zone.get("name").and_then(Value::as_str).map(str::to_owned) else {
            continue;
        };
        let Some(object) = zone.as_object_mut() else {
            continue;
        };
        let target = targets.get(&name);
        if target.is_some() && object.get("resources").is_none_or(Value::is_null) {
            object.insert("resources".to_owned(), Value::Array(Vec::new()));
        }
        let Some(resources) = object.get_mut("resources").and_then(Value::as_array_mut) else {
            continue;
        };
        let wanted: [(&str, Option<i64>); 2] = match target {
            Some(amounts) => [
                (RESOURCE_BATCH_CPU, Some(amounts.cpu)),
                (RESOURCE_BATCH_MEMORY, Some(amounts.memory)),
            ],
            None => [(RESOURCE_BATCH_CPU, None), (RESOURCE_BATCH_MEMORY, None)],
        };
        for (resource, value) in wanted {
            let existing = resources
                .iter_mut()
                .find(|e| entry_name(e) == Some(resource))
                .and_then(Value::as_object_mut);
            if let Some(entry) = existing {
                // With no target, what is there becomes 0.
                let value = value.unwrap_or(0);
                for field in ["capacity", "allocatable", "available"] {
                    let current = entry
                        .get(field)
                        .and_then(|v| quantity(v).ok())
                        .map(ExactQuantity::value);
                    if current != Some(value) {
                        entry.insert(field.to_owned(), Value::String(value.to_string()));
                        changed = true;
                    }
                }
            } else if let Some(value) = value {
                let text = value.to_string();
                resources.push(json!({
                    "name": resource,
                    "capacity": text,
                    "allocatable": text,
                    "available": text,
                }));
                resources.sort_by(|a, b| entry_name(a).cmp(&entry_name(b)));
                changed = true;
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn zone(name: &str, resources: Value) -> Value {
        json!({"name": name, "type": "Node", "resources": resources})
    }

    #[test]
    fn reads_allocatable_and_batch_entries() {
        let zones = [
            zone(
                "node-0",
                json!([
                    {"name": "cpu", "capacity": "32", "allocatable": "30", "available": "20"},
                    {"name": "kubernetes.io/batch-cpu", "capacity": "5k", "allocatable": 5000, "available": "5000"},
                    {"name": "memory", "capacity": "64Gi", "allocatable": "60Gi", "available": "50Gi"},
                ]),
            ),
            zone(
                "node-1",
                json!([{"name": "memory", "capacity": "8Gi", "allocatable": "8Gi", "available": "8Gi"}]),
            ),
            json!({"name": "socket-0", "type": "Socket"}),
        ];
        let read = zone_entries_of(&zones);
        assert_eq!(
            read.zones,
            vec![
                ZoneFacts {
                    name: "node-0".into(),
                    allocatable: Amounts::new(30_000, 60 << 30),
                    lists_cpu_or_memory: true,
                },
                ZoneFacts {
                    name: "node-1".into(),
                    allocatable: Amounts::new(0, 8 << 30),
                    lists_cpu_or_memory: true,
                },
                ZoneFacts {
                    name: "socket-0".into(),
                    allocatable: Amounts::ZERO,
                    lists_cpu_or_memory: false,
                },
            ]
        );
        let batch_cpu = PublishedValues {
            cpu: Some(5000),
            memory: None,
        };
        assert_eq!(
            read.entries.get("node-0"),
            Some(&ZoneEntries {
                capacity: batch_cpu,
                allocatable: batch_cpu,
                available: batch_cpu,
            })
        );
        assert_eq!(read.entries.get("node-1"), Some(&ZoneEntries::default()));
        assert!(read.skipped.is_empty());
    }

    #[test]
    fn malformed_zones_are_skipped_with_a_reason() {
        let zones = [
            json!({"type": "Node"}),
            json!("not an object"),
            zone("node-0", json!({"cpu": "3"})),
            zone(
                "node-1",
                json!([{"name": "cpu", "capacity": "1", "allocatable": "lots", "available": "1"}]),
            ),
            zone(
                "node-2",
                json!([{"name": "cpu", "capacity": "1", "available": "1"}]),
            ),
            zone("node-3", json!([])),
            zone("node-3", json!([])),
        ];
        let read = zone_entries_of(&zones);
        assert_eq!(
            read.zones.iter().map(|z| z.name.as_str()).collect::<Vec<_>>(),
            ["node-3"]
        );
        assert_eq!(read.skipped.len(), 6, "{:?}", read.skipped);
        assert_eq!(read.skipped[0], "zone 0: no name");
        assert_eq!(read.skipped[2], "zone node-0: resources is not a list");
        assert!(
            read.skipped[3].starts_with("zone node-1: resources[cpu].allocatable: "),
            "{}",
            read.skipped[3]
        );
        assert_eq!(
            read.skipped[4],
            "zone node-2: resources[cpu].allocatable: missing"
        );
        assert_eq!(read.skipped[5], "zone node-3: named like an earlier zone");
        // Named zones with unreadable resources still have entries (so their batch entries
        // can be zeroed).
        assert!(read.entries.contains_key("node-1"));
    }

    #[test]
    fn sets_batch_entries_in_name_order_and_keeps_everything_else() {
        let mut zones = vec![
            zone(
                "node-0",
                json!([
                    {"name": "cpu", "capacity": "32", "allocatable": "30", "available": "20"},
                    {"name": "example.com/gpu", "capacity": "1", "allocatable": "1", "available": "1"},
                    {"name": "memory", "capacity": "64Gi", "allocatable": "60Gi", "available": "50Gi"},
                ]),
            ),
            json!({"name": "node-1", "type": "Node", "costs": [{"name": "node-0", "value": 20}]}),
            zone(
                "node-2",
                json!([{"name": "kubernetes.io/batch-cpu", "capacity": "7", "allocatable": "7", "available": "7"}]),
            ),
        ];
        let targets = BTreeMap::from([
            ("node-0".to_owned(), Amounts::new(12_000, 20 << 30)),
            ("node-1".to_owned(), Amounts::new(0, 1 << 30)),
        ]);
        assert!(set_zone_entries(&mut zones, &targets));
        let names = |zone: &Value| -> Vec<String> {
            zone["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["name"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(
            names(&zones[0]),
            [
                "cpu",
                "example.com/gpu",
                "kubernetes.io/batch-cpu",
                "kubernetes.io/batch-memory",
                "memory"
            ]
        );
        assert_eq!(
            zones[0]["resources"][2],
            json!({"name": "kubernetes.io/batch-cpu", "capacity": "12000", "allocatable": "12000", "available": "12000"})
        );
        assert_eq!(
            zones[0]["resources"][3]["available"],
            json!((20i64 << 30).to_string())
        );
        assert_eq!(zones[1]["costs"], json!([{"name": "node-0", "value": 20}]));
        assert_eq!(
            names(&zones[1]),
            ["kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"]
        );
        // No target: what is there becomes 0, nothing is added.
        assert_eq!(
            zones[2]["resources"],
            json!([{"name": "kubernetes.io/batch-cpu", "capacity": "0", "allocatable": "0", "available": "0"}])
        );

        // Applying the same targets again changes nothing, whatever the spelling on the object.
        zones[0]["resources"][2]["capacity"] = json!("12k");
        zones[0]["resources"][2]["allocatable"] = json!(12000);
        let before = zones.clone();
        assert!(!set_zone_entries(&mut zones, &targets));
        assert_eq!(zones, before);
    }
}
