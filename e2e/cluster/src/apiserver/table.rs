//! `meta.k8s.io/v1 Table` rendering for `kubectl get` (Name, printer columns, Age).

use serde_json::{Value, json};

use super::object::meta;
use super::resource::ResourceInfo;

/// Does the Accept header ask for a Table?
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// `5s`, `3m`, `2h`, `4d` like kubectl's age column.
pub fn human_age(created: Option<&str>) -> String {
    let Some(ts) = created.and_then(|c| c.parse::<jiff::Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - ts.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn cell(obj: &Value, json_path: &str) -> Value {
    let path = json_path.trim_start_matches('.');
    let v = path
        .split('.')
        .filter(|s| !s.is_empty())
        .try_fold(obj, |v, k| v.get(k));
    match v {
        None | Some(Value::Null) => json!("<none>"),
        Some(Value::String(s)) => json!(s),
        Some(Value::Number(n)) => json!(n),
        Some(Value::Bool(b)) => json!(b),
        Some(other) => json!(other.to_string()),
    }
}

/// A real server adds its own Age column to built-in kinds and to custom resources without
/// `additionalPrinterColumns`; a CRD that defines columns gets Name plus exactly those.
fn default_age_column(info: &ResourceInfo) -> bool {
    !info.custom || info.printer_columns.is_empty()
}

fn column_defs(info: &ResourceInfo) -> Vec<Value> {
    let mut cols = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}),
    ];
    for c in &info.printer_columns {
        let ty = if c.type_ == "date" {
            "string"
        } else {
            c.type_.as_str()
        };
        cols.push(json!({"name": c.name, "type": ty, "format": "", "description": c.name, "priority": 0}));
    }
    if default_age_column(info) {
        cols.push(
            json!({"name": "Age", "type": "string", "format": "", "description": "Age", "priority": 0}),
        );
    }
    cols
}

/// One row; `include_object` puts the full object (else PartialObjectMetadata).
pub fn row(info: &ResourceInfo, obj: &Value, include_object: bool) -> Value {
    let m = meta(obj);
    let mut cells = vec![json!(m.get("name").and_then(Value::as_str).unwrap_or(""))];
    for c in &info.printer_columns {
        if c.type_ == "date" {
            cells.push(json!(human_age(cell(obj, &c.json_path).as_str())));
        } else {
            cells.push(cell(obj, &c.json_path));
        }
    }
    if default_age_column(info) {
        cells.push(json!(human_age(
            m.get("creationTimestamp").and_then(Value::as_str)
        )));
    }
    let object = if include_object {
        obj.clone()
    } else {
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": m})
    };
    json!({"cells": cells, "object": object})
}

/// A whole Table.
pub fn table(
    info: &ResourceInfo,
    objs: &[Value],
    rv: &str,
    cont: Option<&str>,
    include_object: bool,
) -> Value {
    let mut metadata = json!({"resourceVersion": rv});
    if let (Some(c), Some(m)) = (cont, metadata.as_object_mut()) {
        m.insert("continue".into(), json!(c));
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": column_defs(info),
        "rows": objs.iter().map(|o| row(info, o, include_object)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resource::{GroupResource, Registry, info_from_crd};

    fn crd(columns: Option<Value>) -> ResourceInfo {
        let mut version = json!({"name": "v1alpha1", "served": true, "storage": true,
                                 "schema": {"openAPIV3Schema": {"type": "object"}}});
        if let Some(c) = columns {
            version["additionalPrinterColumns"] = c;
        }
        info_from_crd(&json!({
            "metadata": {"name": "nodeslos.slo.koordinator.sh"},
            "spec": {"group": "slo.koordinator.sh", "scope": "Cluster",
                     "names": {"kind": "NodeSLO", "plural": "nodeslos", "singular": "nodeslo"},
                     "versions": [version]}
        }))
        .unwrap()
    }

    fn names(info: &ResourceInfo) -> Vec<String> {
        column_defs(info)
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn crd_columns_replace_the_default_age() {
        let with = crd(Some(
            json!([{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]),
        ));
        assert_eq!(names(&with), ["Name", "Age"]);
        let obj = json!({"metadata": {"name": "n", "creationTimestamp": "2020-01-01T00:00:00Z"}});
        assert_eq!(row(&with, &obj, false)["cells"].as_array().unwrap().len(), 2);
        assert_eq!(names(&crd(None)), ["Name", "Age"]);
        let pods = Registry::with_builtins()
            .get(&GroupResource::new("", "pods"))
            .unwrap();
        assert_eq!(names(&pods).last().map(String::as_str), Some("Age"));
    }
}
