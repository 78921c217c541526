//! Object-level semantics shared by every write: server-set metadata, generation, status
//! isolation, per-kind defaulting, and the events.k8s.io <-> core/v1 Event conversion.

use serde_json::{Map, Value, json};

use super::error::{ApiError, ApiResult, Cause};
use super::resource::{GroupResource, ResourceInfo, StatusOnCreate};

/// RFC 3339 timestamp (seconds) as the API server writes `creationTimestamp`.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// RFC 3339 with microseconds (MicroTime).
pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

/// `metadata` of an object (empty map if missing or not an object).
pub fn meta(v: &Value) -> &Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    v.get("metadata")
        .and_then(Value::as_object)
        .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

/// Mutable `metadata`, created when missing. Errors if the object is not a JSON object.
pub fn meta_mut(v: &mut Value) -> ApiResult<&mut Map<String, Value>> {
    let obj = v
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the body must be a JSON object"))?;
    let m = obj.entry("metadata").or_insert_with(|| json!({}));
    if !m.is_object() {
        *m = json!({});
    }
    m.as_object_mut()
        .ok_or_else(|| ApiError::internal("metadata is not an object"))
}

/// `metadata.<field>` as a string.
pub fn meta_str<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    meta(v).get(field).and_then(Value::as_str)
}

/// Parse `metadata.resourceVersion`; empty means "unconditional".
pub fn resource_version(v: &Value) -> ApiResult<Option<u64>> {
    match meta_str(v, "resourceVersion") {
        None | Some("") => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {s:?}"))),
    }
}

/// Storage key of a resource: events.k8s.io events share core/v1 event storage.
pub fn storage_key(info: &ResourceInfo) -> GroupResource {
    if info.group == "events.k8s.io" && info.plural == "events" {
        GroupResource::new("", "events")
    } else {
        info.group_resource()
    }
}

/// Does serving `info` at `version` need a conversion from the stored bytes?
pub fn needs_conversion(info: &ResourceInfo, version: &str) -> bool {
    info.group == "events.k8s.io" || version != info.storage_version()
}

const EVENT_RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

fn rename_fields(mut v: Value, to_core: bool) -> Value {
    if let Some(obj) = v.as_object_mut() {
        for (new, core) in EVENT_RENAMES {
            let (from, to) = if to_core { (new, core) } else { (core, new) };
            if let Some(x) = obj.remove(*from) {
                obj.insert(to.to_string(), x);
            }
        }
    }
    v
}

/// Stored form -> the form served at `version`.
pub fn to_view(info: &ResourceInfo, version: &str, stored: &Value) -> Value {
    let mut v = stored.clone();
    if info.group == "events.k8s.io" {
        v = rename_fields(v, false);
    }
    if let Some(obj) = v.as_object_mut() {
        obj.insert("apiVersion".into(), Value::String(info.api_version(version)));
        obj.insert("kind".into(), Value::String(info.kind.clone()));
    }
    v
}

/// Served form -> stored form: storage apiVersion, pruned and defaulted custom resources,
/// canonical quantities in built-in kinds (400 when one is not a quantity).
pub fn to_storage(info: &ResourceInfo, view: Value) -> ApiResult<Value> {
    let mut v = if info.group == "events.k8s.io" {
        rename_fields(view, true)
    } else {
        view
    };
    if let Some(obj) = v.as_object_mut() {
        let (api_version, kind) = if info.group == "events.k8s.io" {
            ("v1".to_string(), "Event".to_string())
        } else {
            (info.api_version(info.storage_version()), info.kind.clone())
        };
        obj.insert("apiVersion".into(), Value::String(api_version));
        obj.insert("kind".into(), Value::String(kind));
    }
    if let Some(schema) = &info.schema {
        super::schema::prune_and_default(&mut v, schema);
    }
    super::quantities::canonicalize(info, &mut v)?;
    Ok(v)
}

/// Check apiVersion/kind of a request body against the target resource.
pub fn check_type(info: &ResourceInfo, version: &str, body: &Value) -> ApiResult<()> {
    if !body.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    if let Some(kind) = body.get("kind").and_then(Value::as_str)
        && !kind.is_empty()
        && kind != info.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind {kind:?} does not match {:?}",
            info.kind
        )));
    }
    if let Some(av) = body.get("apiVersion").and_then(Value::as_str)
        && !av.is_empty()
        && av != info.api_version(version)
        && !info.versions.iter().any(|v| info.api_version(v) == av)
    {
        return Err(ApiError::bad_request(format!(
            "the apiVersion {av:?} does not match {:?}",
            info.api_version(version)
        )));
    }
    Ok(())
}

/// The real server's detail for a name that is not a DNS subdomain.
const RFC1123_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
     '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for \
     validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn valid_name(name: &str, info: &ResourceInfo) -> bool {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let ok_ends = name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.chars().last().is_some_and(|c| c.is_ascii_alphanumeric());
    // Events and leases carry arbitrary-looking names in practice; keep the check to the charset.
    (ok_chars && ok_ends && name.len() <= 253)
        || (info.kind == "Event" && !name.contains('/') && !name.is_empty())
}

fn random_suffix() -> String {
    let alphabet = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes
        .iter()
        .take(5)
        .map(|b| alphabet[(*b as usize) % alphabet.len()] as char)
        .collect()
}

/// Fill the server-owned metadata of a new object and check its name and namespace.
pub fn prepare_create(info: &ResourceInfo, namespace: Option<&str>, obj: &mut Value) -> ApiResult<()> {
    let m = meta_mut(obj)?;
    let name = match m.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
        Some(n) => n.to_string(),
        None => match m
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|g| !g.is_empty())
        {
            Some(g) => format!("{g}{}", random_suffix()),
            None => {
                return Err(ApiError::invalid(
                    &info.kind,
                    &info.group,
                    "",
                    vec![Cause::required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                ));
            }
        },
    };
    if !valid_name(&name, info) {
        return Err(ApiError::invalid(
            &info.kind,
            &info.group,
            &name,
            vec![Cause::invalid(
                "metadata.name",
                &super::schema_validation::go_quote(&name),
                RFC1123_SUBDOMAIN,
            )],
        ));
    }
    m.insert("name".into(), Value::String(name.clone()));
    if info.namespaced {
        let ns = namespace
            .ok_or_else(|| ApiError::bad_request("a namespace is required for a namespaced resource"))?;
        match m.get("namespace").and_then(Value::as_str) {
            Some(given) if !given.is_empty() && given != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {}
        }
        m.insert("namespace".into(), Value::String(ns.to_string()));
    } else {
        m.remove("namespace");
    }
    for k in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        m.remove(k);
    }
    m.insert("uid".into(), Value::String(uuid::Uuid::new_v4().to_string()));
    m.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
    m.insert("generation".into(), json!(1));
    if info.status_subresource
        && info.status_on_create == StatusOnCreate::Drop
        && let Some(o) = obj.as_object_mut()
    {
        o.remove("status");
    }
    Ok(())
}

/// Everything outside `metadata` and `status`, for generation tracking.
fn spec_part(v: &Value) -> Map<String, Value> {
    v.as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Merge an update onto the stored object: keep immutable metadata, isolate status (or
/// everything but status for `/status`), bump the generation when the spec changed.
pub fn prepare_update(
    info: &ResourceInfo,
    subresource: Option<&str>,
    old: &Value,
    mut new: Value,
) -> ApiResult<Value> {
    if !new.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    if subresource == Some("status") {
        let mut out = old.clone();
        if let (Some(o), Some(status)) = (out.as_object_mut(), new.get("status")) {
            o.insert("status".into(), status.clone());
        }
        if let Some(rv) = meta(&new).get("resourceVersion") {
            meta_mut(&mut out)?.insert("resourceVersion".into(), rv.clone());
        }
        // The ownership a status apply just recorded stays (a real server keeps the new
        // object's managedFields on status updates too).
        match meta(&new).get("managedFields") {
            Some(managed) => meta_mut(&mut out)?.insert("managedFields".into(), managed.clone()),
            None => meta_mut(&mut out)?.remove("managedFields"),
        };
        return Ok(out);
    }
    if info.status_subresource
        && let Some(o) = new.as_object_mut()
    {
        match old.get("status") {
            Some(s) => o.insert("status".into(), s.clone()),
            None => o.remove("status"),
        };
    }
    let old_meta = meta(old).clone();
    let m = meta_mut(&mut new)?;
    for k in [
        "uid",
        "creationTimestamp",
        "name",
        "namespace",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old_meta.get(k) {
            Some(v) => m.insert(k.into(), v.clone()),
            None => m.remove(k),
        };
    }
    if spec_part(old) != spec_part(&new) {
        let g = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
        meta_mut(&mut new)?.insert("generation".into(), json!(g + 1));
    }
    Ok(new)
}

/// Finalizers still pending on an object.
pub fn has_finalizers(v: &Value) -> bool {
    meta(v)
        .get("finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// Is the object marked for deletion?
pub fn is_deleting(v: &Value) -> bool {
    meta(v).get("deletionTimestamp").is_some_and(|t| !t.is_null())
}

/// Label every Namespace carries on a real API server (since 1.21), which namespace selectors
/// of webhook configurations rely on.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Sets `kubernetes.io/metadata.name` to the namespace's name, as the API server does.
pub fn label_namespace_name(obj: &mut Value) {
    let Some(name) = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return;
    };
    let Some(metadata) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let labels = metadata.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(NAMESPACE_NAME_LABEL.to_string(), json!(name));
    }
}
