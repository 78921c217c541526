//! Per-kind behaviour a real API server gets from its registry strategies and built-in
//! admission plugins: pod defaults (phase, QoS class, priority from PriorityClass), namespace
//! phase, service cluster IPs, CRD status and serving, cascading deletes.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use super::error::{ApiError, ApiResult, Cause};
use super::object::{label_namespace_name, meta_str, now_rfc3339};
use super::resource::{GroupResource, ResourceInfo, info_from_crd};
use super::server::ApiServer;

/// The pod QoS class, computed as the kubelet and API server do (cpu and memory only; one
/// rule shared with the simulated kubelet).
pub fn qos_class(spec: &Value) -> &'static str {
    match serde_json::from_value::<k8s_openapi::api::core::v1::PodSpec>(spec.clone()) {
        Ok(spec) => crate::node::qos::compute_qos(&spec).as_str(),
        Err(_) => "BestEffort",
    }
}

/// A real API server's defaulting: a container limit without a request sets the request.
fn default_requests_from_limits(spec: &mut Value) {
    for key in ["containers", "initContainers"] {
        let Some(list) = spec.get_mut(key).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in list {
            let Some(limits) = c.pointer("/resources/limits").and_then(Value::as_object).cloned() else {
                continue;
            };
            let Some(res) = c.get_mut("resources").and_then(Value::as_object_mut) else {
                continue;
            };
            let requests = res.entry("requests").or_insert_with(|| json!({}));
            if let Some(r) = requests.as_object_mut() {
                for (name, q) in limits {
                    r.entry(name).or_insert(q);
                }
            }
        }
    }
}

/// What a real server does after mutating admission, before validation and storage: defaults
/// the (possibly rewritten) object again and, for a new pod, derives `status.qosClass` from the
/// final spec (a webhook that rewrote cpu/memory to batch resources makes the pod BestEffort).
pub fn after_admission_create(info: &ResourceInfo, obj: &mut Value) {
    if (info.group.as_str(), info.plural.as_str()) != ("", "pods") {
        return;
    }
    if let Some(spec) = obj.get_mut("spec") {
        default_requests_from_limits(spec);
    }
    let qos = obj.get("spec").map(qos_class).unwrap_or("BestEffort");
    set(obj, "/status/qosClass", json!(qos));
}

fn set(obj: &mut Value, pointer: &str, value: Value) {
    let mut cur = obj;
    for seg in pointer.split('/').filter(|s| !s.is_empty()) {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(m) = cur.as_object_mut() else { return };
        cur = m.entry(seg.to_string()).or_insert(Value::Null);
    }
    *cur = value;
}

fn set_default(obj: &mut Value, pointer: &str, value: Value) {
    if obj.pointer(pointer).is_none_or(Value::is_null) {
        set(obj, pointer, value);
    }
}

/// Defaults and server-side fields for a new object of a given kind.
pub fn default_create(server: &ApiServer, info: &ResourceInfo, obj: &mut Value) -> ApiResult<()> {
    let name = meta_str(obj, "name").unwrap_or_default().to_string();
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => {
            let containers = obj
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map(Vec::len)
                .unwrap_or(0);
            if containers == 0 {
                return Err(ApiError::invalid(
                    "Pod",
                    "",
                    &name,
                    vec![Cause::required("spec.containers", "")],
                ));
            }
            for (p, v) in [
                ("/spec/restartPolicy", json!("Always")),
                ("/spec/schedulerName", json!("default-scheduler")),
                ("/spec/terminationGracePeriodSeconds", json!(30)),
                ("/spec/dnsPolicy", json!("ClusterFirst")),
            ] {
                set_default(obj, p, v);
            }
            resolve_priority(server, obj, &name)?;
            set(obj, "/status", json!({"phase": "Pending"}));
            after_admission_create(info, obj);
        }
        ("", "namespaces") => {
            set(obj, "/status", json!({"phase": "Active"}));
            label_namespace_name(obj);
        }
        ("scheduling.k8s.io", "priorityclasses") => {
            set_default(obj, "/preemptionPolicy", json!("PreemptLowerPriority"));
            set_default(obj, "/globalDefault", json!(false));
        }
        ("", "services") => {
            set_default(obj, "/spec/type", json!("ClusterIP"));
            if obj
                .pointer("/spec/clusterIP")
                .is_none_or(|v| v.is_null() || v == "")
            {
                let n = server.next_cluster_ip.fetch_add(1, Ordering::Relaxed);
                let ip = format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff);
                set(obj, "/spec/clusterIP", json!(ip));
                set(obj, "/spec/clusterIPs", json!([ip]));
            }
            set_default(obj, "/spec/sessionAffinity", json!("None"));
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            let served = info_from_crd(obj).map_err(|e| invalid_crd(&name, &e.to_string()))?;
            let names = obj.pointer("/spec/names").cloned().unwrap_or(json!({}));
            let now = now_rfc3339();
            let cond = |t: &str, reason: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": ""});
            set(
                obj,
                "/status",
                json!({
                    "acceptedNames": names,
                    "storedVersions": [served.storage_version()],
                    "conditions": [cond("NamesAccepted", "NoConflicts"), cond("Established", "InitialNamesAccepted")],
                }),
            );
        }
        _ => {}
    }
    Ok(())
}

/// A CRD our registry cannot serve, as a 422 on `CustomResourceDefinition.apiextensions.k8s.io`.
fn invalid_crd(name: &str, why: &str) -> ApiError {
    ApiError::invalid(
        "CustomResourceDefinition",
        "apiextensions.k8s.io",
        name,
        vec![Cause::new("FieldValueInvalid", "", why)],
    )
}

/// The `Priority` admission plugin: `spec.priority` from `spec.priorityClassName` (or the
/// global default class), before webhooks run.
fn resolve_priority(server: &ApiServer, pod: &mut Value, name: &str) -> ApiResult<()> {
    let pcs = GroupResource::new("scheduling.k8s.io", "priorityclasses");
    let class_name = pod
        .pointer("/spec/priorityClassName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(String::from);
    let class = match &class_name {
        Some(c) => Some(server.store.get(&pcs, "", c).ok_or_else(|| {
            ApiError::forbidden(format!(
                "pods \"{name}\" is forbidden: no PriorityClass with name {c} was found"
            ))
        })?),
        None => server
            .store
            .list(&pcs, None, None, None, &|v| {
                v.get("globalDefault").and_then(Value::as_bool) == Some(true)
            })
            .items
            .into_iter()
            .next(),
    };
    let value = class
        .as_ref()
        .and_then(|c| c.value.get("value").and_then(Value::as_i64))
        .unwrap_or(0);
    if let Some(given) = pod.pointer("/spec/priority").and_then(Value::as_i64)
        && class.is_some()
        && given != value
    {
        return Err(ApiError::forbidden(format!(
            "pods \"{name}\" is forbidden: the integer value of priority ({given}) must not be provided in pod spec; \
             priority admission controller computed {value} from the given PriorityClass name"
        )));
    }
    if pod.pointer("/spec/priority").is_none() {
        set(pod, "/spec/priority", json!(value));
    }
    if let Some(c) = class {
        if class_name.is_none()
            && let Some(n) = meta_str(&c.value, "name")
        {
            set(pod, "/spec/priorityClassName", json!(n));
        }
        if let Some(p) = c.value.get("preemptionPolicy") {
            set_default(pod, "/spec/preemptionPolicy", p.clone());
        }
    }
    Ok(())
}

/// Validation that must hold after admission (webhooks may have changed the object).
pub fn validate(info: &ResourceInfo, obj: &Value) -> ApiResult<()> {
    let name = meta_str(obj, "name").unwrap_or_default();
    match (info.group.as_str(), info.plural.as_str()) {
        ("scheduling.k8s.io", "priorityclasses") if obj.get("value").and_then(Value::as_i64).is_none() => {
            Err(ApiError::invalid(
                "PriorityClass",
                "scheduling.k8s.io",
                name,
                vec![Cause::required("value", "")],
            ))
        }
        ("coordination.k8s.io", "leases")
            if obj
                .pointer("/spec/leaseDurationSeconds")
                .is_some_and(|v| v.as_i64().is_none_or(|n| n < 0) && !v.is_null()) =>
        {
            Err(ApiError::invalid(
                "Lease",
                "coordination.k8s.io",
                name,
                vec![Cause::invalid(
                    "spec.leaseDurationSeconds",
                    &obj.pointer("/spec/leaseDurationSeconds")
                        .map(Value::to_string)
                        .unwrap_or_default(),
                    "must be a non-negative integer",
                )],
            ))
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => info_from_crd(obj)
            .map(|_| ())
            .map_err(|e| invalid_crd(name, &e.to_string())),
        _ => Ok(()),
    }
}

/// A custom resource against its CRD's structural schema (after mutating admission, before
/// validating admission, as apiextensions-apiserver does); `old` is the stored object of an
/// update, whose unchanged parts are not re-validated (ratcheting, as 1.33).
pub fn validate_schema(info: &ResourceInfo, obj: &Value, old: Option<&Value>) -> ApiResult<()> {
    let Some(schema) = &info.schema else {
        return Ok(());
    };
    let causes = super::schema_validation::validate(obj, schema, old);
    if causes.is_empty() {
        return Ok(());
    }
    let name = meta_str(obj, "name").unwrap_or_default();
    Err(ApiError::invalid(&info.kind, &info.group, name, causes))
}

/// After a committed create or update: a CRD starts (or keeps) being served.
pub fn after_write(server: &ApiServer, info: &ResourceInfo, obj: &Value) {
    if info.group == "apiextensions.k8s.io"
        && info.plural == "customresourcedefinitions"
        && let Err(e) = server.store.update_registry(|r| r.install_crd(obj))
    {
        tracing::warn!(error = %e, "CRD not served");
    }
}

/// After a committed delete: cascade namespace contents and CRD instances.
pub fn after_delete(server: &ApiServer, info: &ResourceInfo, obj: &Value) {
    let name = meta_str(obj, "name").unwrap_or_default().to_string();
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "namespaces") => {
            let registry = server.store.registry();
            for res in server.store.resources_with_objects() {
                if registry.get(&res).is_some_and(|i| !i.namespaced) {
                    continue;
                }
                for key in server.store.keys(&res, Some(&name)) {
                    let _ = server.store.remove(&res, &key, None);
                }
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            if let Ok(served) = info_from_crd(obj) {
                let res = served.group_resource();
                for key in server.store.keys(&res, None) {
                    let _ = server.store.remove(&res, &key, None);
                }
                server.store.update_registry(|r| r.remove_crd(&res));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_qos() {
        let be = json!({"containers": [{"name": "a"}]});
        assert_eq!(qos_class(&be), "BestEffort");
        let g = json!({"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1000m", "memory": "1Gi"}}}]});
        assert_eq!(qos_class(&g), "Guaranteed");
        let b = json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]});
        assert_eq!(qos_class(&b), "Burstable");
        let batch = json!({"containers": [{"name": "a", "resources": {"requests": {"kubernetes.io/batch-cpu": "1000"}}}]});
        assert_eq!(qos_class(&batch), "BestEffort");
        let mut limits_only =
            json!({"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]});
        default_requests_from_limits(&mut limits_only);
        assert_eq!(
            limits_only["containers"][0]["resources"]["requests"]["memory"],
            "1Gi"
        );
        assert_eq!(qos_class(&limits_only), "Guaranteed");
    }
}
