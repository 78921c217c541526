//! Discovery documents (`/version`, `/api`, `/apis`, group and group-version resource lists)
//! in the legacy (non-aggregated) format, which kubectl and kube-rs fall back to.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::resource::{Registry, ResourceInfo};

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": "v1.33.0-koord-testcluster",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64"
    })
}

/// `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

/// Versions per group (group -> served versions, preferred first).
fn groups(reg: &Registry) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for info in reg.all() {
        if info.group.is_empty() {
            continue;
        }
        let vs = out.entry(info.group.clone()).or_default();
        for v in &info.versions {
            if !vs.contains(v) {
                vs.push(v.clone());
            }
        }
    }
    out
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// `/apis`.
pub fn group_list(reg: &Registry) -> Value {
    let gs: Vec<Value> = groups(reg)
        .iter()
        .map(|(n, vs)| {
            let mut g = group_doc(n, vs);
            if let Some(o) = g.as_object_mut() {
                o.remove("kind");
                o.remove("apiVersion");
            }
            g
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

/// `/apis/{group}`.
pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    groups(reg).get(name).map(|vs| group_doc(name, vs))
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn subresource_entries(info: &ResourceInfo, eviction_version: &str) -> Vec<Value> {
    let mut out = Vec::new();
    if info.status_subresource {
        out.push(json!({"name": format!("{}/status", info.plural), "singularName": "", "namespaced": info.namespaced,
                        "kind": info.kind, "verbs": ["get", "patch", "update"]}));
    }
    for sub in &info.extra_subresources {
        let (kind, group, verbs) = match *sub {
            "eviction" => ("Eviction", Some("policy"), vec!["create"]),
            "binding" => ("Binding", None, vec!["create"]),
            _ => (info.kind.as_str(), None, vec!["update"]),
        };
        let mut e = json!({"name": format!("{}/{sub}", info.plural), "singularName": "", "namespaced": info.namespaced,
                           "kind": kind, "verbs": verbs});
        if let (Some(g), Some(o)) = (group, e.as_object_mut()) {
            o.insert("group".into(), json!(g));
            o.insert("version".into(), json!(eviction_version));
        }
        out.push(e);
    }
    out
}

/// `/api/v1` or `/apis/{group}/{version}`; `None` if nothing is served there. The
/// `pods/eviction` entry names `eviction_version` of group `policy`, which is how clients learn
/// which Eviction body the server takes (a real 1.20 server says `v1beta1`, 1.22+ `v1`).
pub fn resource_list(reg: &Registry, group: &str, version: &str, eviction_version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for info in reg
        .all()
        .filter(|i| i.group == group && i.versions.iter().any(|v| v == version))
    {
        resources.push(json!({
            "name": info.plural,
            "singularName": info.singular,
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": VERBS,
            "shortNames": info.short_names,
            "categories": info.categories,
        }));
        resources.extend(subresource_entries(info, eviction_version));
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}
