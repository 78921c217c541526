//! The write paths (create, update, patch, delete) shared by every resource: validation,
//! server-set metadata, admission, optimistic concurrency and finalizers.

use std::sync::Arc;

use serde_json::{Value, json};

use super::admission::Phase;
use super::admission::matching::Operation;
use super::error::{ApiError, ApiResult, Cause};
use super::field_validation::{self, FieldValidation, Warnings};
use super::kinds;
use super::object::{
    check_type, has_finalizers, is_deleting, meta_mut, meta_str, now_rfc3339, prepare_create, prepare_update,
    resource_version, storage_key, to_storage, to_view,
};
use super::patch::{self, PatchKind, managed};
use super::resource::ResourceInfo;
use super::server::ApiServer;
use super::store::StoredObject;

/// Which resource (and object / subresource) a request addresses.
#[derive(Debug, Clone)]
pub struct Target {
    /// Resource description.
    pub info: Arc<ResourceInfo>,
    /// Served version in the path.
    pub version: String,
    /// Namespace from the path (None: cluster-scoped, or all namespaces for lists).
    pub namespace: Option<String>,
    /// Object name from the path.
    pub name: Option<String>,
    /// Subresource from the path (`status`, `eviction`, ...).
    pub subresource: Option<String>,
}

impl Target {
    /// Namespace part of the storage key.
    pub fn ns(&self) -> &str {
        if self.info.namespaced {
            self.namespace.as_deref().unwrap_or("")
        } else {
            ""
        }
    }

    /// Name, or 405 when the path has none.
    pub fn name(&self) -> ApiResult<&str> {
        self.name
            .as_deref()
            .ok_or_else(|| ApiError::method_not_allowed("this verb needs an object name"))
    }

    /// Served form of a stored object.
    pub fn view(&self, stored: &Value) -> Value {
        to_view(&self.info, &self.version, stored)
    }
}

/// Query/body parameters of a write.
#[derive(Debug, Clone, Default)]
pub struct WriteParams {
    /// `dryRun=All`: validate and admit, do not persist.
    pub dry_run: bool,
    /// `fieldManager` (defaults from the User-Agent).
    pub field_manager: String,
    /// Did the client name the field manager (required for apply)?
    pub explicit_manager: bool,
    /// `force` for server-side apply.
    pub force: bool,
    /// `fieldValidation` (Warn when absent).
    pub field_validation: FieldValidation,
    /// Fields the raw request body repeated (create, update and apply bodies).
    pub duplicates: Vec<String>,
    /// Where `Warn` puts its warnings for the response headers.
    pub warnings: Warnings,
}

/// `DeleteOptions` that matter here.
#[derive(Debug, Clone, Default)]
pub struct DeleteParams {
    /// Precondition on uid.
    pub uid: Option<String>,
    /// Precondition on resourceVersion.
    pub resource_version: Option<String>,
    /// Do not persist.
    pub dry_run: bool,
}

impl DeleteParams {
    /// Read a `DeleteOptions` body.
    pub fn from_body(body: &Value, dry_run: bool) -> Self {
        let dry_body = body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        Self {
            uid: body
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(String::from),
            resource_version: body
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
                .map(String::from),
            dry_run: dry_run || dry_body,
        }
    }
}

/// How an update treats the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateMode {
    /// A client write: status isolation, admission.
    Client,
    /// A server-internal write (binding, finalizer bookkeeping): no isolation, no admission.
    Internal,
}

impl ApiServer {
    fn object(&self, t: &Target, name: &str) -> ApiResult<Arc<StoredObject>> {
        self.store
            .get(&storage_key(&t.info), t.ns(), name)
            .ok_or_else(|| ApiError::not_found(&t.info.group_resource(), name))
    }

    /// GET one object.
    pub fn get_object(&self, t: &Target) -> ApiResult<Value> {
        Ok(t.view(&self.object(t, t.name()?)?.value))
    }

    fn require_namespace(&self, t: &Target) -> ApiResult<()> {
        if !t.info.namespaced {
            return Ok(());
        }
        let ns = t.namespace.as_deref().unwrap_or("");
        match self
            .store
            .get(&super::resource::GroupResource::new("", "namespaces"), "", ns)
        {
            Some(n) if is_deleting(&n.value) => Err(ApiError::forbidden(format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ))),
            Some(_) => Ok(()),
            None => Err(ApiError::not_found(
                &super::resource::GroupResource::new("", "namespaces"),
                ns,
            )),
        }
    }

    /// POST: create an object.
    pub async fn create(&self, t: &Target, body: Value, p: &WriteParams) -> ApiResult<Value> {
        check_type(&t.info, &t.version, &body)?;
        field_validation::check(p.field_validation, &t.info, &body, &p.duplicates, &p.warnings)?;
        self.require_namespace(t)?;
        let mut obj = to_storage(&t.info, body)?;
        prepare_create(&t.info, t.namespace.as_deref(), &mut obj)?;
        kinds::default_create(self, &t.info, &mut obj)?;
        let api_version = t.info.api_version(&t.version);
        managed::record_update(None, &mut obj, &p.field_manager, "", &api_version);
        self.insert(t, obj, p.dry_run).await
    }

    async fn insert(&self, t: &Target, obj: Value, dry_run: bool) -> ApiResult<Value> {
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        let create = Operation::Create;
        let mutated = self
            .admit_phase(
                Phase::Mutating,
                create,
                t,
                &name,
                Some(t.view(&obj)),
                None,
                dry_run,
            )
            .await?;
        let mut obj = to_storage(&t.info, mutated)?;
        // Webhooks may not rename or move an object.
        meta_mut(&mut obj)?.insert("name".into(), Value::String(name.clone()));
        kinds::after_admission_create(&t.info, &mut obj);
        kinds::validate(&t.info, &obj)?;
        kinds::validate_schema(&t.info, &obj, None)?;
        self.admit_phase(
            Phase::Validating,
            create,
            t,
            &name,
            Some(t.view(&obj)),
            None,
            dry_run,
        )
        .await?;
        if dry_run {
            return Ok(t.view(&obj));
        }
        let stored = self
            .store
            .create(&storage_key(&t.info), (t.ns().to_string(), name), obj)?;
        kinds::after_write(self, &t.info, &stored.value);
        Ok(t.view(&stored.value))
    }

    /// PUT: replace an object (or its status).
    pub async fn replace(&self, t: &Target, body: Value, p: &WriteParams) -> ApiResult<Value> {
        check_type(&t.info, &t.version, &body)?;
        let name = t.name()?;
        if let Some(given) = meta_str(&body, "name")
            && given != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({given}) does not match the name on the URL ({name})"
            )));
        }
        let unconditional = resource_version(&body)?.is_none();
        self.write(
            t,
            p,
            UpdateMode::Client,
            unconditional,
            PatchKind::Merge,
            &|_cur| Ok(body.clone()),
        )
        .await
    }

    /// PATCH in any of the four flavours.
    pub async fn patch(&self, t: &Target, kind: PatchKind, body: &[u8], p: &WriteParams) -> ApiResult<Value> {
        let patch = patch::parse_body(kind, body)?;
        if kind != PatchKind::Apply {
            return self
                .write(t, p, UpdateMode::Client, true, kind, &|cur| {
                    patch::apply_patch(&t.info, cur, kind, &patch)
                })
                .await;
        }
        if !p.explicit_manager || p.field_manager.is_empty() {
            return Err(ApiError::invalid(
                "PatchOptions",
                "meta.k8s.io",
                "",
                vec![Cause::required("fieldManager", "is required for apply patch")],
            ));
        }
        check_type(&t.info, &t.version, &patch)?;
        field_validation::check(p.field_validation, &t.info, &patch, &p.duplicates, &p.warnings)?;
        if patch.get("apiVersion").is_none() || patch.get("kind").is_none() {
            return Err(ApiError::bad_request(
                "apiVersion and kind are required for apply",
            ));
        }
        let name = t.name()?;
        if meta_str(&patch, "name").is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(
                "the name of the applied object does not match the URL",
            ));
        }
        let sub = t.subresource.clone().unwrap_or_default();
        if self.store.get(&storage_key(&t.info), t.ns(), name).is_none() && sub.is_empty() {
            self.require_namespace(t)?;
            let mut obj = to_storage(&t.info, patch.clone())?;
            meta_mut(&mut obj)?.insert("name".into(), Value::String(name.to_string()));
            prepare_create(&t.info, t.namespace.as_deref(), &mut obj)?;
            kinds::default_create(self, &t.info, &mut obj)?;
            let entry = managed::ManagedEntry {
                manager: p.field_manager.clone(),
                operation: "Apply".into(),
                subresource: String::new(),
                api_version: t.info.api_version(&t.version),
                fields: managed::leaves(&patch),
            };
            managed::write(&mut obj, &[entry]);
            match self.insert(t, obj, p.dry_run).await {
                Err(e) if e.code == 409 && e.reason == "AlreadyExists" => {} // raced: apply as update
                other => return other,
            }
        }
        let (manager, force) = (p.field_manager.clone(), p.force);
        self.write(t, p, UpdateMode::Client, true, kind, &|cur| {
            patch::server_side_apply(&t.info, cur, &patch, &manager, &sub, force)
        })
        .await
    }

    /// The update loop: read, mutate, check resourceVersion, admit, commit (retrying when a
    /// concurrent writer won and the client did not pin a resourceVersion).
    pub async fn write(
        &self,
        t: &Target,
        p: &WriteParams,
        mode: UpdateMode,
        retry_on_race: bool,
        kind: PatchKind,
        mutate: &(dyn Fn(&Value) -> ApiResult<Value> + Send + Sync),
    ) -> ApiResult<Value> {
        let name = t.name()?.to_string();
        let key = storage_key(&t.info);
        let sub = t.subresource.clone().filter(|s| s == "status");
        for _attempt in 0..16 {
            let cur = self.object(t, &name)?;
            let cur_view = t.view(&cur.value);
            let new_view = mutate(&cur_view)?;
            if mode == UpdateMode::Client {
                field_validation::check(p.field_validation, &t.info, &new_view, &p.duplicates, &p.warnings)?;
            }
            if resource_version(&new_view)?.is_some_and(|rv| rv != cur.rv) {
                return Err(ApiError::stale(&t.info.group_resource(), &name));
            }
            let new = to_storage(&t.info, new_view)?;
            let mut new = match mode {
                UpdateMode::Client => prepare_update(&t.info, sub.as_deref(), &cur.value, new)?,
                UpdateMode::Internal => new,
            };
            if kind != PatchKind::Apply && mode == UpdateMode::Client {
                managed::record_update(
                    Some(&cur.value),
                    &mut new,
                    &p.field_manager,
                    sub.as_deref().unwrap_or(""),
                    &t.info.api_version(&t.version),
                );
            }
            let new = if mode == UpdateMode::Client {
                let update = Operation::Update;
                let old = Some(cur_view.clone());
                let mutated = self
                    .admit_phase(
                        Phase::Mutating,
                        update,
                        t,
                        &name,
                        Some(t.view(&new)),
                        old,
                        p.dry_run,
                    )
                    .await?;
                let new = to_storage(&t.info, mutated)?;
                kinds::validate(&t.info, &new)?;
                kinds::validate_schema(&t.info, &new, Some(&cur.value))?;
                let (view, old) = (Some(t.view(&new)), Some(cur_view));
                self.admit_phase(Phase::Validating, update, t, &name, view, old, p.dry_run)
                    .await?;
                new
            } else {
                kinds::validate(&t.info, &new)?;
                new
            };
            if p.dry_run {
                return Ok(t.view(&new));
            }
            let obj_key = (t.ns().to_string(), name.clone());
            let result = if is_deleting(&new) && !has_finalizers(&new) {
                self.store
                    .remove(&key, &obj_key, Some(cur.rv))
                    .inspect(|gone| kinds::after_delete(self, &t.info, &gone.value))
            } else {
                self.store
                    .replace(&key, &obj_key, cur.rv, new)
                    .inspect(|obj| kinds::after_write(self, &t.info, &obj.value))
            };
            match result {
                Ok(obj) => return Ok(t.view(&obj.value)),
                Err(e) if e.code == 409 && retry_on_race => continue,
                Err(e) => return Err(e),
            }
        }
        Err(ApiError::stale(&t.info.group_resource(), &name))
    }

    /// DELETE one object: finalizers first set deletionTimestamp, otherwise the object goes.
    pub async fn delete(&self, t: &Target, d: &DeleteParams) -> ApiResult<Value> {
        let name = t.name()?.to_string();
        let cur = self.object(t, &name)?;
        if d.uid
            .as_deref()
            .is_some_and(|u| Some(u) != meta_str(&cur.value, "uid"))
        {
            return Err(ApiError::conflict(
                &t.info.group_resource(),
                &name,
                "Precondition failed: UID in precondition does not match",
            ));
        }
        if d.resource_version
            .as_deref()
            .is_some_and(|rv| rv != cur.rv.to_string())
        {
            return Err(ApiError::conflict(
                &t.info.group_resource(),
                &name,
                "Precondition failed: ResourceVersion in precondition does not match",
            ));
        }
        let cur_view = t.view(&cur.value);
        self.admit(
            Operation::Delete,
            t,
            &name,
            None,
            Some(cur_view.clone()),
            d.dry_run,
        )
        .await?;
        if d.dry_run {
            return Ok(cur_view);
        }
        if has_finalizers(&cur.value) {
            if is_deleting(&cur.value) {
                return Ok(cur_view);
            }
            let p = WriteParams::default();
            return self
                .write(t, &p, UpdateMode::Internal, true, PatchKind::Merge, &|cur| {
                    let mut v = cur.clone();
                    let m = meta_mut(&mut v)?;
                    m.insert("deletionTimestamp".into(), Value::String(now_rfc3339()));
                    m.insert("deletionGracePeriodSeconds".into(), json!(0));
                    Ok(v)
                })
                .await;
        }
        let gone = self
            .store
            .remove(&storage_key(&t.info), &(t.ns().to_string(), name), Some(cur.rv))?;
        kinds::after_delete(self, &t.info, &gone.value);
        Ok(t.view(&gone.value))
    }
}
