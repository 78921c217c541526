//! NodeSLO, NodeMetric and ClusterColocationProfile field tables from the CRD schemas.

use std::fmt::Write as _;

use super::fields::SchemaDoc;
use super::{ReferenceError, field_table};
use crate::crds::crds;

/// One section per CRD: group, version, scope, then spec and status fields.
pub(super) fn crd_sections() -> Result<String, ReferenceError> {
    let mut out = String::new();
    for crd in crds()? {
        let value = serde_json::to_value(&crd).map_err(|source| ReferenceError::Json {
            what: "a CRD",
            source,
        })?;
        let spec = &value["spec"];
        let kind = spec["names"]["kind"].as_str().unwrap_or("?");
        let group = spec["group"].as_str().unwrap_or("?");
        let scope = spec["scope"].as_str().unwrap_or("?");
        let _ = writeln!(out, "## {kind}\n");
        for version in spec["versions"].as_array().into_iter().flatten() {
            let name = version["name"].as_str().unwrap_or("?");
            let _ = writeln!(
                out,
                "`apiVersion: {group}/{name}`, {scope}. Schema: `charts/koordinator/crds/{}.yaml`.\n",
                crd.metadata.name.as_deref().unwrap_or("?")
            );
            let schema = &version["schema"]["openAPIV3Schema"];
            let doc = SchemaDoc::new(schema);
            for part in ["spec", "status"] {
                let Some(sub) = schema.get("properties").and_then(|p| p.get(part)) else {
                    continue;
                };
                let rows = doc.rows(sub, part, &[]);
                if rows.is_empty() {
                    continue;
                }
                let _ = writeln!(out, "### {kind} `{part}`\n\n{}", field_table(&rows));
            }
        }
    }
    Ok(out)
}
