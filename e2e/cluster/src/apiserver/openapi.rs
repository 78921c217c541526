//! A minimal OpenAPI v3 document per group-version: paths with their operations, the
//! `x-kubernetes-group-version-kind` extension and the `fieldValidation` / `dryRun` query
//! parameters, which is what kubectl inspects to decide that the server validates fields and
//! supports dry-run. No schemas are published (kubectl falls back to its built-in type
//! knowledge for strategic merge patches, and to JSON merge patches for custom resources).
//! `/openapi/v2` is not served (404), as on servers that disable it.

use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};
use serde_json::{Map, Value, json};

use super::error::{ApiError, ApiResult};
use super::resource::Registry;

fn group_versions(reg: &Registry) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for info in reg.all() {
        for v in &info.versions {
            let gv = (info.group.clone(), v.clone());
            if !out.contains(&gv) {
                out.push(gv);
            }
        }
    }
    out
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn operation(gvk: &Value, params: &[&str]) -> Value {
    let parameters: Vec<Value> = params
        .iter()
        .map(|p| json!({"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": true}}))
        .collect();
    json!({"parameters": parameters, "x-kubernetes-group-version-kind": gvk, "responses": {"200": {"description": "OK"}}})
}

/// The document for one group-version.
pub fn gv_document(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut paths = Map::new();
    for info in reg
        .all()
        .filter(|i| i.group == group && i.versions.iter().any(|v| v == version))
    {
        let gvk = json!({"group": group, "version": version, "kind": info.kind});
        let base = format!("/{}", gv_path(group, version));
        let scope = if info.namespaced {
            format!("{base}/namespaces/{{namespace}}")
        } else {
            base.clone()
        };
        let write = ["fieldValidation", "dryRun", "fieldManager"];
        paths.insert(
            format!("{scope}/{}", info.plural),
            json!({"get": operation(&gvk, &["labelSelector", "fieldSelector", "limit", "continue", "watch"]),
                   "post": operation(&gvk, &write), "delete": operation(&gvk, &["dryRun"])}),
        );
        let item = json!({"get": operation(&gvk, &[]), "put": operation(&gvk, &write),
                          "patch": operation(&gvk, &["fieldValidation", "dryRun", "fieldManager", "force"]),
                          "delete": operation(&gvk, &["dryRun"])});
        paths.insert(format!("{scope}/{}/{{name}}", info.plural), item.clone());
        if info.status_subresource {
            paths.insert(format!("{scope}/{}/{{name}}/status", info.plural), item);
        }
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (koord-testcluster)", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

/// Serve `/openapi/...`.
pub fn serve(reg: &Registry, rest: &[&str], _accept: &str) -> ApiResult<Response> {
    let doc = match rest {
        ["v3"] => {
            let mut paths = Map::new();
            for (g, v) in group_versions(reg) {
                let p = gv_path(&g, &v);
                paths.insert(
                    p.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=0")}),
                );
            }
            json!({"paths": paths})
        }
        ["v3", "api", v] => gv_document(reg, "", v).ok_or_else(|| ApiError::no_route("openapi"))?,
        ["v3", "apis", g, v] => gv_document(reg, g, v).ok_or_else(|| ApiError::no_route("openapi"))?,
        _ => return Err(ApiError::no_route("/openapi")),
    };
    let body = serde_json::to_vec(&doc).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response())
}
