//! HTTP front end: parses Kubernetes REST paths and query parameters, dispatches to the
//! operations, and turns every failure (including a panic) into a `Status` response.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use futures::FutureExt;
use http::{Method, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use super::discovery;
use super::error::{ApiError, ApiResult};
use super::field_validation::{self, FieldValidation, Warnings};
use super::object::{needs_conversion, storage_key};
use super::openapi;
use super::ops::{DeleteParams, Target, WriteParams};
use super::partial;
use super::patch::PatchKind;
use super::selector::{FieldSelector, LabelSelector};
use super::server::ApiServer;
use super::store::ObjectKey;
use super::table;
use super::watch::{self, WatchParams};

/// Largest request body accepted (CRDs are big).
const MAX_BODY: usize = 32 << 20;

/// Shared state of the HTTP layer.
#[derive(Clone)]
pub struct HttpState {
    /// The API server.
    pub server: Arc<ApiServer>,
    /// `host:port` clients use.
    pub address: String,
    /// Bookmark period for watches.
    pub bookmark_every: Duration,
}

/// The axum router serving the whole API.
pub fn router(state: HttpState) -> Router {
    Router::new().fallback(handle).with_state(state)
}

async fn handle(State(st): State<HttpState>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    match AssertUnwindSafe(dispatch(st, req)).catch_unwind().await {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => {
            tracing::debug!(%method, %path, code = e.code, reason = e.reason, "request failed");
            e.into_response()
        }
        Err(_) => ApiError::internal(format!("internal error serving {method} {path}")).into_response(),
    }
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_vec(v).unwrap_or_default(),
    )
        .into_response()
}

fn ok(v: &Value) -> Response {
    json_response(StatusCode::OK, v)
}

struct Query(HashMap<String, String>);

impl Query {
    fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str).filter(|s| !s.is_empty())
    }
    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
}

async fn dispatch(st: HttpState, req: Request) -> ApiResult<Response> {
    let (parts, body) = req.into_parts();
    let query = Query(
        axum::extract::Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
            .map(|q| q.0)
            .map_err(|e| ApiError::bad_request(format!("bad query string: {e}")))?,
    );
    let body = http_body_util::Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map_err(|e| ApiError::bad_request(format!("reading body: {e}")))?
        .to_bytes();
    let header = |h: header::HeaderName| {
        parts
            .headers
            .get(h)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let accept = header(header::ACCEPT);
    let content_type = header(header::CONTENT_TYPE);
    let body = if !body.is_empty() && (content_type.contains("protobuf") || content_type.contains("cbor")) {
        // kubectl's typed clients send protobuf; decode the few kinds they create.
        let decoded = super::proto::decode(&body).ok_or_else(|| {
            ApiError::unsupported_media_type(format!(
                "the body content type {content_type:?} is not supported for this kind; send JSON"
            ))
        })?;
        Bytes::from(serde_json::to_vec(&decoded).map_err(|e| ApiError::internal(e.to_string()))?)
    } else {
        body
    };
    let segs: Vec<&str> = parts.uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let reg = st.server.store.registry();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Ok(ok(&discovery::version())),
        ["healthz" | "readyz" | "livez"] => return Ok((StatusCode::OK, "ok").into_response()),
        ["api"] => return Ok(ok(&discovery::core_versions(&st.address))),
        ["apis"] => return Ok(ok(&discovery::group_list(&reg))),
        ["openapi", ..] => return openapi::serve(&reg, &segs[1..], &accept),
        ["api", "v1"] => {
            return discovery::resource_list(&reg, "", "v1", st.server.eviction_api.discovery_version())
                .map(|v| ok(&v))
                .ok_or_else(|| ApiError::no_route("/api/v1"));
        }
        ["apis", g] => {
            return discovery::group(&reg, g)
                .map(|v| ok(&v))
                .ok_or_else(|| ApiError::no_route(g));
        }
        ["apis", g, v] => {
            return discovery::resource_list(&reg, g, v, st.server.eviction_api.discovery_version())
                .map(|d| ok(&d))
                .ok_or_else(|| ApiError::no_route(parts.uri.path()));
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::no_route(parts.uri.path())),
    };
    let (legacy_watch, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let namespaced_path = rest.len() >= 3
        && rest[0] == "namespaces"
        && reg.lookup(group, version, rest[2]).is_some_and(|i| i.namespaced);
    let (namespace, rest) = if namespaced_path {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    let (plural, name, sub) = match rest {
        [r] => (*r, None, None),
        [r, n] => (*r, Some(n.to_string()), None),
        [r, n, s] => (*r, Some(n.to_string()), Some(s.to_string())),
        _ => return Err(ApiError::no_route(parts.uri.path())),
    };
    let info = reg
        .lookup(group, version, plural)
        .ok_or_else(|| ApiError::no_route(parts.uri.path()))?;
    if info.namespaced && namespace.is_none() && name.is_some() {
        return Err(ApiError::no_route(parts.uri.path()));
    }
    if let Some(s) = &sub
        && !(s == "status" && info.status_subresource)
        && !info.extra_subresources.contains(&s.as_str())
    {
        return Err(ApiError::no_route(parts.uri.path()));
    }
    let t = Target {
        info,
        version: version.to_string(),
        namespace,
        name,
        subresource: sub,
    };
    let ua = header(header::USER_AGENT);
    let explicit_manager = query.get("fieldManager").is_some();
    let options_kind = match parts.method {
        Method::POST => "CreateOptions",
        Method::PUT => "UpdateOptions",
        _ => "PatchOptions",
    };
    let writes_body = matches!(parts.method, Method::POST | Method::PUT | Method::PATCH);
    let field_validation = if writes_body && t.subresource.as_deref().is_none_or(|s| s == "status") {
        FieldValidation::parse(query.get("fieldValidation"), options_kind)?
    } else {
        FieldValidation::Ignore
    };
    // A strict decode reports repeated keys of the object sent: create, update and apply
    // bodies (a merge or JSON patch is applied first and the result has none).
    let whole_object = parts.method != Method::PATCH || content_type.starts_with("application/apply-patch");
    let duplicates = if field_validation != FieldValidation::Ignore && whole_object {
        field_validation::duplicate_fields(&body)
    } else {
        Vec::new()
    };
    let wp = WriteParams {
        dry_run: query.get("dryRun").is_some(),
        field_manager: query.get("fieldManager").map(String::from).unwrap_or_else(|| {
            ua.split('/')
                .next()
                .filter(|s| !s.is_empty())
                .unwrap_or("unknown")
                .to_string()
        }),
        explicit_manager,
        force: query.flag("force"),
        field_validation,
        duplicates,
        warnings: Warnings::default(),
    };
    let server = &st.server;
    let created = |v: Value| with_warnings(json_response(StatusCode::CREATED, &v), &wp.warnings);
    match (parts.method.clone(), t.name.is_some(), t.subresource.as_deref()) {
        (Method::GET, false, _) if legacy_watch || query.flag("watch") => {
            watch_request(&st, t, &query, &accept)
        }
        (Method::GET, false, _) => list(server, &t, &query, &accept),
        (Method::GET, true, _) if legacy_watch || query.flag("watch") => {
            let mut q = query.0.clone();
            let name = t.name.clone().unwrap_or_default();
            let fs = q
                .get("fieldSelector")
                .filter(|s| !s.is_empty())
                .map(|s| format!("{s},metadata.name={name}"));
            q.insert(
                "fieldSelector".into(),
                fs.unwrap_or(format!("metadata.name={name}")),
            );
            watch_request(&st, Target { name: None, ..t }, &Query(q), &accept)
        }
        (Method::GET, true, _) => {
            let obj = server.get_object(&t)?;
            if let Some(form) = partial::wants_metadata(&accept)? {
                return Ok(ok(&form.for_object()?.object(&obj)));
            }
            if table::wants_table(&accept) {
                let rv = obj
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                return Ok(ok(&table::table(
                    &t.info,
                    &[obj],
                    &rv,
                    None,
                    query.get("includeObject") == Some("Object"),
                )));
            }
            Ok(ok(&obj))
        }
        (Method::POST, false, None) => Ok(created(server.create(&t, parse_json(&body)?, &wp).await?)),
        (Method::POST, true, Some("eviction")) => Ok(created(server.evict(&t, &parse_json(&body)?).await?)),
        (Method::POST, true, Some("binding")) => Ok(created(server.bind(&t, &parse_json(&body)?).await?)),
        (Method::PUT, true, None | Some("status") | Some("finalize")) => {
            let replaced = server.replace(&t, parse_json(&body)?, &wp).await?;
            Ok(with_warnings(ok(&replaced), &wp.warnings))
        }
        (Method::PATCH, true, None | Some("status")) => {
            let kind = PatchKind::from_content_type(&header(header::CONTENT_TYPE))?;
            let patched = server.patch(&t, kind, &body, &wp).await?;
            Ok(with_warnings(ok(&patched), &wp.warnings))
        }
        (Method::DELETE, true, None) => {
            let opts = if body.is_empty() {
                json!({})
            } else {
                parse_json(&body)?
            };
            Ok(ok(&server
                .delete(&t, &DeleteParams::from_body(&opts, wp.dry_run))
                .await?))
        }
        (Method::DELETE, false, None) => delete_collection(server, &t, &query, wp.dry_run).await,
        (m, _, _) => Err(ApiError::method_not_allowed(format!(
            "{m} is not supported on {}",
            parts.uri.path()
        ))),
    }
}

/// Adds one `Warning: 299 - "..."` header per warning of the request.
fn with_warnings(mut resp: Response, warnings: &Warnings) -> Response {
    for w in warnings.get() {
        if let Ok(v) = http::HeaderValue::from_str(&field_validation::warning_header(&w)) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

fn parse_json(body: &Bytes) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    serde_json::from_slice(body)
        .or_else(|e| {
            // kubectl and curl users sometimes send YAML; a real server accepts it with the right Content-Type.
            std::str::from_utf8(body)
                .ok()
                .and_then(|s| serde_yaml::from_str::<Value>(s).ok())
                .filter(Value::is_object)
                .ok_or(e)
        })
        .map_err(|e| ApiError::bad_request(format!("error decoding body: {e}")))
}

fn selectors(q: &Query) -> ApiResult<(LabelSelector, FieldSelector)> {
    let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((labels, fields))
}

fn encode_continue(rv: u64, key: &ObjectKey) -> String {
    let raw = serde_json::to_vec(&json!({"rv": rv, "ns": key.0, "name": key.1})).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_continue(token: &str) -> ApiResult<(u64, ObjectKey)> {
    let bad = || ApiError::bad_request("continue key is not valid");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(String::from).ok_or_else(bad);
    Ok((rv, (s("ns")?, s("name")?)))
}

fn list(server: &ApiServer, t: &Target, q: &Query, accept: &str) -> ApiResult<Response> {
    let (labels, fields) = selectors(q)?;
    let metadata_only = partial::wants_metadata(accept)?
        .map(partial::MetadataAs::for_list)
        .transpose()?;
    let limit = q
        .get("limit")
        .map(|l| {
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request("limit must be a number"))
        })
        .transpose()?;
    let cont = q.get("continue").map(decode_continue).transpose()?;
    let filter = |v: &Value| labels.matches(v.pointer("/metadata/labels")) && fields.matches(v);
    let ns = if t.info.namespaced {
        t.namespace.as_deref()
    } else {
        None
    };
    let page = server.store.list(
        &storage_key(&t.info),
        ns,
        cont.as_ref().map(|c| &c.1),
        limit,
        &filter,
    );
    let rv = cont.as_ref().map(|c| c.0).unwrap_or(page.rv);
    let next = page.next.as_ref().map(|k| encode_continue(rv, k));
    if table::wants_table(accept) {
        let objs: Vec<Value> = page.items.iter().map(|o| t.view(&o.value)).collect();
        let include = q.get("includeObject") == Some("Object");
        return Ok(ok(&table::table(
            &t.info,
            &objs,
            &rv.to_string(),
            next.as_deref(),
            include,
        )));
    }
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let (Some(n), Some(m)) = (&next, metadata.as_object_mut()) {
        m.insert("continue".into(), json!(n));
    }
    let head = match metadata_only {
        Some(form) => form.list_head(metadata),
        None => {
            json!({"kind": format!("{}List", t.info.kind), "apiVersion": t.info.api_version(&t.version), "metadata": metadata})
        }
    };
    let mut out = serde_json::to_vec(&head).map_err(|e| ApiError::internal(e.to_string()))?;
    out.pop(); // drop the closing brace, append items
    out.extend_from_slice(b",\"items\":[");
    let convert = needs_conversion(&t.info, &t.version);
    for (i, o) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if let Some(form) = metadata_only {
            out.extend(serde_json::to_vec(&form.object(&o.value)).unwrap_or_default());
        } else if convert {
            out.extend(serde_json::to_vec(&t.view(&o.value)).unwrap_or_default());
        } else {
            out.extend_from_slice(&o.json);
        }
    }
    out.extend_from_slice(b"]}");
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(out),
    )
        .into_response())
}

fn watch_request(st: &HttpState, t: Target, q: &Query, accept: &str) -> ApiResult<Response> {
    let (labels, fields) = selectors(q)?;
    let rv = match q.get("resourceVersion") {
        None => None,
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {s:?}")))?,
        ),
    };
    let timeout = q
        .get("timeoutSeconds")
        .map(|s| {
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request("timeoutSeconds must be a number"))
        })
        .transpose()?
        .map(Duration::from_secs);
    let p = WatchParams {
        resource_version: rv,
        labels,
        fields,
        bookmarks: q.flag("allowWatchBookmarks"),
        send_initial: q.flag("sendInitialEvents"),
        timeout,
        table: table::wants_table(accept),
        metadata_only: partial::wants_metadata(accept)?
            .map(partial::MetadataAs::for_object)
            .transpose()?,
        bookmark_every: st.bookmark_every,
    };
    Ok(watch::watch(st.server.clone(), t, p))
}

async fn delete_collection(server: &ApiServer, t: &Target, q: &Query, dry_run: bool) -> ApiResult<Response> {
    let (labels, fields) = selectors(q)?;
    let filter = |v: &Value| labels.matches(v.pointer("/metadata/labels")) && fields.matches(v);
    let ns = if t.info.namespaced {
        t.namespace.as_deref()
    } else {
        None
    };
    let page = server.store.list(&storage_key(&t.info), ns, None, None, &filter);
    let mut items = Vec::new();
    for o in page.items {
        let name = o
            .value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let ns = o
            .value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(String::from);
        let target = Target {
            name: Some(name),
            namespace: ns.or(t.namespace.clone()),
            ..t.clone()
        };
        match server
            .delete(
                &target,
                &DeleteParams {
                    dry_run,
                    ..Default::default()
                },
            )
            .await
        {
            Ok(v) => items.push(v),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let list = json!({"kind": format!("{}List", t.info.kind), "apiVersion": t.info.api_version(&t.version),
                      "metadata": {"resourceVersion": server.resource_version().to_string()}, "items": items});
    Ok(ok(&list))
}
