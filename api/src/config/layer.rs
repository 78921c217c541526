//! Layering: built-in default ⊕ cluster strategy ⊕ node entry, as upstream's `MergeCfg` does it
//! (a JSON deep merge: set fields override, maps merge key by key, lists are replaced whole).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

use super::ConfigKey;
use super::error::{ConfigError, Rule};
use crate::selector::Selector;

/// One node entry after merging: its strategy is already cluster ⊕ entry.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeEntry<S> {
    /// Position in the key's node list (for error paths and logs).
    pub index: usize,
    /// The entry's optional name.
    pub name: Option<String>,
    /// The entry's selector; `None` matches no node.
    pub node_selector: Option<LabelSelector>,
    /// The merged strategy for nodes this entry selects.
    pub strategy: S,
}

/// A key's merged strategies: the cluster one and one per node entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Layered<S> {
    /// Built-in default ⊕ the user's cluster strategy.
    pub cluster: S,
    /// Node entries in list order, each already merged over `cluster`.
    pub nodes: Vec<NodeEntry<S>>,
}

impl<S> Layered<S> {
    /// Only the cluster strategy, no node entry.
    pub fn cluster_only(cluster: S) -> Self {
        Layered {
            cluster,
            nodes: Vec::new(),
        }
    }

    /// The first node entry whose selector matches `labels`. A missing selector matches
    /// nothing, `{}` matches every node, a selector that does not parse is skipped.
    pub fn matching_entry(&self, labels: &BTreeMap<String, String>) -> Option<&NodeEntry<S>> {
        self.nodes.iter().find(|e| {
            e.node_selector
                .as_ref()
                .is_some_and(|s| Selector::parse(s).is_ok_and(|s| s.matches(labels)))
        })
    }

    /// The strategy for a node with `labels` and the index of the entry that decided (None = cluster).
    pub fn for_labels(&self, labels: &BTreeMap<String, String>) -> (&S, Option<usize>) {
        match self.matching_entry(labels) {
            Some(e) => (&e.strategy, Some(e.index)),
            None => (&self.cluster, None),
        }
    }

    /// `(index, selector)` of every entry that has a selector, for overlap checks.
    pub fn selectors(&self) -> Vec<(usize, &LabelSelector)> {
        self.nodes
            .iter()
            .filter_map(|e| e.node_selector.as_ref().map(|s| (e.index, s)))
            .collect()
    }
}

/// `base` ⊕ `overlay`: objects merge recursively, `null` in the overlay leaves the base alone,
/// anything else (scalars, lists) replaces.
pub(crate) fn deep_merge(base: &mut Value, overlay: &Value) {
    match (base, overlay) {
        (_, Value::Null) => {}
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(existing) => deep_merge(existing, v),
                    None => {
                        if !v.is_null() {
                            b.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// How a key lays out its cluster strategy and node entries.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape {
    /// `clusterStrategy` + `nodeStrategies[]`; `nested` names the optional nested field of a
    /// node entry, `pods` moves the top-level `podStrategies` into the cluster layer.
    Envelope {
        nested: Option<&'static str>,
        pods: bool,
    },
    /// Strategy fields at the top level + `nodeConfigs[]`.
    Flat,
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn typed<T: DeserializeOwned>(key: ConfigKey, path: &str, v: Value) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let inner = e.path().to_string();
        let full = match (path.is_empty(), inner == ".") {
            (true, _) => inner,
            (false, true) => path.to_owned(),
            (false, false) => format!("{path}.{inner}"),
        };
        ConfigError::new(key, full, Rule::WrongType(e.into_inner().to_string()))
    })
}

/// Builds the merged strategies of a key from its canonical JSON `root`.
pub(crate) fn layer<S: Serialize + DeserializeOwned>(
    key: ConfigKey,
    default: &S,
    root: &Map<String, Value>,
    shape: Shape,
) -> Result<Layered<S>, Vec<ConfigError>> {
    let nodes_field = key.nodes_field();
    let mut cluster_v = match shape {
        Shape::Envelope { .. } => match root.get("clusterStrategy") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(v @ Value::Object(_)) => v.clone(),
            Some(other) => {
                return Err(vec![ConfigError::new(
                    key,
                    "clusterStrategy",
                    Rule::NotAnObject(json_type(other)),
                )]);
            }
        },
        Shape::Flat => {
            let mut m = root.clone();
            m.remove(nodes_field);
            Value::Object(m)
        }
    };
    let mut top_level_pods = false;
    if let (Shape::Envelope { pods: true, .. }, Some(pods)) = (shape, root.get("podStrategies"))
        && !pods.is_null()
        && let Value::Object(m) = &mut cluster_v
    {
        m.insert("podStrategies".to_owned(), pods.clone());
        top_level_pods = true;
    }
    let mut merged_cluster = serde_json::to_value(default)
        .map_err(|e| vec![ConfigError::new(key, "", Rule::WrongType(e.to_string()))])?;
    deep_merge(&mut merged_cluster, &cluster_v);
    let mut errors = Vec::new();
    let cluster: Option<S> = typed(key, key.cluster_path(), merged_cluster.clone())
        .map_err(|mut e| {
            // Name top-level pod strategies where the user wrote them.
            if top_level_pods && let Some(rest) = e.path.strip_prefix("clusterStrategy.podStrategies") {
                e.path = format!("podStrategies{rest}");
            }
            errors.push(e)
        })
        .ok();

    let mut nodes = Vec::new();
    let entries = match root.get(nodes_field) {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(a)) => a.as_slice(),
        Some(other) => {
            errors.push(ConfigError::new(
                key,
                nodes_field,
                Rule::WrongType(format!("expected an array, found {}", json_type(other))),
            ));
            &[][..]
        }
    };
    for (index, entry) in entries.iter().enumerate() {
        let path = format!("{nodes_field}[{index}]");
        let Value::Object(fields) = entry else {
            errors.push(ConfigError::new(key, path, Rule::NotAnObject(json_type(entry))));
            continue;
        };
        let mut inline = fields.clone();
        let name = inline.remove("name");
        let selector = inline.remove("nodeSelector");
        let nested = match shape {
            Shape::Envelope {
                nested: Some(field), ..
            } => inline.remove(field),
            _ => None,
        };
        let name: Option<String> = match typed(key, &format!("{path}.name"), name.unwrap_or(Value::Null)) {
            Ok(n) => n,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let node_selector: Option<LabelSelector> = match typed(
            key,
            &format!("{path}.nodeSelector"),
            selector.unwrap_or(Value::Null),
        ) {
            Ok(s) => s,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let mut node_v = merged_cluster.clone();
        deep_merge(&mut node_v, &Value::Object(inline));
        if let Some(nested) = nested {
            deep_merge(&mut node_v, &nested);
        }
        match typed(key, &path, node_v) {
            Ok(strategy) => nodes.push(NodeEntry {
                index,
                name,
                node_selector,
                strategy,
            }),
            Err(e) => errors.push(e),
        }
    }
    match cluster {
        Some(cluster) if errors.is_empty() => Ok(Layered { cluster, nodes }),
        _ => Err(errors),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deep_merge_overrides_merges_maps_replaces_lists() {
        let mut base = json!({"a": 1, "m": {"x": 1, "y": 2}, "l": [1, 2, 3], "keep": true});
        deep_merge(
            &mut base,
            &json!({"a": 2, "m": {"y": 3, "z": 4}, "l": [9], "keep": null}),
        );
        assert_eq!(
            base,
            json!({"a": 2, "m": {"x": 1, "y": 3, "z": 4}, "l": [9], "keep": true})
        );
    }
}
