//! Quantities of built-in objects in canonical form, as a real API server stores them.
//!
//! A real server decodes a Pod or Node into Go types, so every quantity it holds comes back in
//! canonical form (`1000` as `1k`, `1024Mi` as `1Gi`), and a string that is not a quantity fails
//! decoding with a 400. Custom resources are stored as sent (they are never decoded into Go
//! types), so only the quantity fields of built-in kinds are rewritten here.

use koord_api::canonical_quantity;
use serde_json::Value;

use super::error::{ApiError, ApiResult};
use super::resource::ResourceInfo;

/// The regular expression Go quotes when a quantity does not parse.
const QUANTITY_PATTERN: &str = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// Rewrites every quantity of a Pod or Node to its canonical form; 400 when one is not a
/// quantity. Other kinds are left alone.
pub fn canonicalize(info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
    if !info.group.is_empty() {
        return Ok(());
    }
    let result = match info.plural.as_str() {
        "pods" => pod(obj),
        "nodes" => ["capacity", "allocatable"]
            .into_iter()
            .try_for_each(|field| map_at(obj, &["status", field])),
        _ => Ok(()),
    };
    result.map_err(|QuantityField(field)| {
        tracing::debug!(kind = %info.kind, field, "not a quantity");
        ApiError::bad_request(format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: quantities must match the regular expression '{QUANTITY_PATTERN}'",
            kind = info.kind
        ))
    })
}

/// A field that holds something other than a quantity (its path, for tests and logs).
#[derive(Debug)]
struct QuantityField(String);

fn pod(obj: &mut Value) -> Result<(), QuantityField> {
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for_each(obj, &["spec", list], resources)?;
    }
    map_at(obj, &["spec", "overhead"])?;
    for_each(obj, &["spec", "volumes"], |v| {
        one_at(v, &["emptyDir", "sizeLimit"])
    })?;
    for list in [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ] {
        for_each(obj, &["status", list], |s| {
            map_at(s, &["allocatedResources"])?;
            resources(s)
        })?;
    }
    Ok(())
}

fn resources(container: &mut Value) -> Result<(), QuantityField> {
    map_at(container, &["resources", "limits"])?;
    map_at(container, &["resources", "requests"])
}

fn at<'a>(obj: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter().try_fold(obj, |cur, key| cur.get_mut(*key))
}

fn for_each(
    obj: &mut Value,
    path: &[&str],
    mut each: impl FnMut(&mut Value) -> Result<(), QuantityField>,
) -> Result<(), QuantityField> {
    match at(obj, path).and_then(Value::as_array_mut) {
        Some(items) => items.iter_mut().try_for_each(&mut each),
        None => Ok(()),
    }
}

fn map_at(obj: &mut Value, path: &[&str]) -> Result<(), QuantityField> {
    match at(obj, path).and_then(Value::as_object_mut) {
        Some(map) => map.iter_mut().try_for_each(|(name, v)| canonical(name, v)),
        None => Ok(()),
    }
}

fn one_at(obj: &mut Value, path: &[&str]) -> Result<(), QuantityField> {
    match at(obj, path) {
        Some(v) if !v.is_null() => canonical(path.last().copied().unwrap_or_default(), v),
        _ => Ok(()),
    }
}

fn canonical(name: &str, v: &mut Value) -> Result<(), QuantityField> {
    // Go also decodes a JSON number as a quantity.
    let text = match v {
        Value::String(s) => s.trim().to_owned(),
        Value::Number(n) => n.to_string(),
        _ => return Err(QuantityField(name.to_owned())),
    };
    let canonical = canonical_quantity(&text).map_err(|_| QuantityField(name.to_owned()))?;
    *v = Value::String(canonical);
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::apiserver::resource::{GroupResource, Registry};

    fn info(plural: &str) -> ResourceInfo {
        Registry::with_builtins()
            .get(&GroupResource::new("", plural))
            .map(|i| (*i).clone())
            .expect("built-in kind")
    }

    #[test]
    fn pod_and_node_quantities_are_stored_canonical() {
        let mut pod = json!({"spec": {
            "containers": [{"name": "a", "resources": {
                "requests": {"cpu": "1000m", "kubernetes.io/batch-cpu": "1000", "memory": 1073741824},
                "limits": {"memory": "1024Mi"}}}],
            "overhead": {"cpu": "0.5"},
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "2048Mi"}}, {"name": "w", "emptyDir": {}}]
        }});
        canonicalize(&info("pods"), &mut pod).expect("valid quantities");
        let requests = &pod["spec"]["containers"][0]["resources"]["requests"];
        assert_eq!(requests["cpu"], "1");
        assert_eq!(requests["kubernetes.io/batch-cpu"], "1k");
        assert_eq!(requests["memory"], "1073741824");
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["limits"]["memory"],
            "1Gi"
        );
        assert_eq!(pod["spec"]["overhead"]["cpu"], "500m");
        assert_eq!(pod["spec"]["volumes"][0]["emptyDir"]["sizeLimit"], "2Gi");

        let mut node = json!({"status": {"allocatable": {"kubernetes.io/batch-memory": "2000000"}, "capacity": {"pods": "110"}}});
        canonicalize(&info("nodes"), &mut node).expect("valid quantities");
        assert_eq!(node["status"]["allocatable"]["kubernetes.io/batch-memory"], "2M");
        assert_eq!(node["status"]["capacity"]["pods"], "110");
    }

    #[test]
    fn a_non_quantity_is_a_bad_request() {
        let mut pod =
            json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]}});
        let err = canonicalize(&info("pods"), &mut pod).expect_err("not a quantity");
        assert_eq!((err.code, err.reason), (400, "BadRequest"));
        assert!(
            err.message.contains("cannot be handled as a Pod"),
            "{}",
            err.message
        );
        // Other kinds are stored as sent.
        let mut cm = json!({"data": {"cpu": "lots"}});
        assert!(canonicalize(&info("configmaps"), &mut cm).is_ok());
    }
}
