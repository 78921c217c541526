//! The resource registry: which group/version/resource paths exist, their kind, scope and
//! subresources. Built-in resources are fixed; every CRD created adds its own entry.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// Storage identity of a resource: group plus plural, independent of the served version.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupResource {
    /// API group, `""` for core.
    pub group: String,
    /// Plural resource name, e.g. `pods`.
    pub resource: String,
}

impl GroupResource {
    /// Build from string slices.
    pub fn new(group: &str, resource: &str) -> Self {
        Self {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }
}

/// What happens to `.status` sent in a create request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusOnCreate {
    /// Keep what the client sent (nodes: the kubelet creates them with status).
    Keep,
    /// Drop it (custom resources with a status subresource, PDBs, services).
    Drop,
}

/// An additional printer column (CRD `additionalPrinterColumns` or a built-in equivalent).
#[derive(Debug, Clone)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// OpenAPI type (`string`, `integer`, `date`, ...).
    pub type_: String,
    /// Simple JSON path, e.g. `.spec.nodeName`.
    pub json_path: String,
}

/// Everything the server needs to know to serve one resource.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    /// API group, `""` for core.
    pub group: String,
    /// Served versions; the first one is the storage and preferred version.
    pub versions: Vec<String>,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Plural name used in paths.
    pub plural: String,
    /// Singular name (kubectl accepts it).
    pub singular: String,
    /// Short names (`po`, `no`, ...).
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Namespace-scoped (`true`) or cluster-scoped.
    pub namespaced: bool,
    /// Has a `/status` subresource (status isolation applies).
    pub status_subresource: bool,
    /// Create-time handling of `.status`.
    pub status_on_create: StatusOnCreate,
    /// Other subresources (`eviction`, `binding`, `finalize`).
    pub extra_subresources: Vec<&'static str>,
    /// Served from a CustomResourceDefinition (strategic merge patch is unsupported).
    pub custom: bool,
    /// Columns for `kubectl get` tables beyond Name and Age.
    pub printer_columns: Vec<PrinterColumn>,
    /// The CRD's structural schema (`openAPIV3Schema` of the storage version): unknown fields
    /// are pruned and defaults applied on every write. `None` for built-in kinds.
    pub schema: Option<Arc<Value>>,
}

impl ResourceInfo {
    /// Storage key.
    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.plural)
    }

    /// `apiVersion` for a served version.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// The storage (preferred) version.
    pub fn storage_version(&self) -> &str {
        self.versions.first().map(String::as_str).unwrap_or("v1")
    }

    /// Name used in error messages, e.g. `pods` or `leases.coordination.k8s.io`.
    pub fn qualified_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// Compact description of a built-in resource.
struct Builtin {
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    short: &'static [&'static str],
    namespaced: bool,
    status: bool,
    keep_status: bool,
    extra: &'static [&'static str],
    columns: &'static [(&'static str, &'static str, &'static str)],
}

const fn b(
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    short: &'static [&'static str],
    namespaced: bool,
) -> Builtin {
    Builtin {
        group,
        kind,
        plural,
        short,
        namespaced,
        status: false,
        keep_status: false,
        extra: &[],
        columns: &[],
    }
}

fn builtins() -> Vec<Builtin> {
    vec![
        Builtin {
            status: true,
            keep_status: true,
            extra: &["finalize"],
            columns: &[("Status", "string", ".status.phase")],
            ..b("", "Namespace", "namespaces", &["ns"], false)
        },
        Builtin {
            status: true,
            keep_status: true,
            columns: &[("Version", "string", ".status.nodeInfo.kubeletVersion")],
            ..b("", "Node", "nodes", &["no"], false)
        },
        Builtin {
            status: true,
            keep_status: false,
            extra: &["eviction", "binding"],
            columns: &[
                ("Status", "string", ".status.phase"),
                ("Node", "string", ".spec.nodeName"),
            ],
            ..b("", "Pod", "pods", &["po"], true)
        },
        b("", "ConfigMap", "configmaps", &["cm"], true),
        Builtin {
            columns: &[("Type", "string", ".type")],
            ..b("", "Secret", "secrets", &[], true)
        },
        Builtin {
            columns: &[
                ("Type", "string", ".type"),
                ("Reason", "string", ".reason"),
                ("Message", "string", ".message"),
            ],
            ..b("", "Event", "events", &["ev"], true)
        },
        Builtin {
            status: true,
            columns: &[
                ("Type", "string", ".spec.type"),
                ("Cluster-IP", "string", ".spec.clusterIP"),
            ],
            ..b("", "Service", "services", &["svc"], true)
        },
        b("", "ServiceAccount", "serviceaccounts", &["sa"], true),
        Builtin {
            columns: &[("Type", "string", ".type"), ("Reason", "string", ".reason")],
            ..b("events.k8s.io", "Event", "events", &["ev"], true)
        },
        Builtin {
            columns: &[("Holder", "string", ".spec.holderIdentity")],
            ..b("coordination.k8s.io", "Lease", "leases", &[], true)
        },
        Builtin {
            status: true,
            columns: &[
                ("Min Available", "string", ".spec.minAvailable"),
                ("Max Unavailable", "string", ".spec.maxUnavailable"),
            ],
            ..b(
                "policy",
                "PodDisruptionBudget",
                "poddisruptionbudgets",
                &["pdb"],
                true,
            )
        },
        Builtin {
            columns: &[
                ("Value", "integer", ".value"),
                ("Global-Default", "boolean", ".globalDefault"),
            ],
            ..b(
                "scheduling.k8s.io",
                "PriorityClass",
                "priorityclasses",
                &["pc"],
                false,
            )
        },
        b(
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            &[],
            false,
        ),
        b(
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            &[],
            false,
        ),
        Builtin {
            status: true,
            columns: &[("Created At", "date", ".metadata.creationTimestamp")],
            ..b(
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                "customresourcedefinitions",
                &["crd", "crds"],
                false,
            )
        },
    ]
}

/// All resources the server currently serves.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    by_key: BTreeMap<GroupResource, Arc<ResourceInfo>>,
}

impl Registry {
    /// The built-in resources.
    pub fn with_builtins() -> Self {
        let mut reg = Self::default();
        for bi in builtins() {
            let info = ResourceInfo {
                group: bi.group.to_string(),
                versions: vec!["v1".to_string()],
                kind: bi.kind.to_string(),
                plural: bi.plural.to_string(),
                singular: bi.kind.to_lowercase(),
                short_names: bi.short.iter().map(|s| s.to_string()).collect(),
                categories: if matches!(bi.plural, "pods" | "services") {
                    vec!["all".into()]
                } else {
                    vec![]
                },
                namespaced: bi.namespaced,
                status_subresource: bi.status,
                status_on_create: if bi.keep_status {
                    StatusOnCreate::Keep
                } else {
                    StatusOnCreate::Drop
                },
                extra_subresources: bi.extra.to_vec(),
                custom: false,
                schema: None,
                printer_columns: bi
                    .columns
                    .iter()
                    .map(|(n, t, p)| PrinterColumn {
                        name: n.to_string(),
                        type_: t.to_string(),
                        json_path: p.to_string(),
                    })
                    .collect(),
            };
            reg.by_key.insert(info.group_resource(), Arc::new(info));
        }
        reg
    }

    /// Find a resource by group, version and plural.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.by_key
            .get(&GroupResource::new(group, plural))
            .filter(|info| info.versions.iter().any(|v| v == version))
            .cloned()
    }

    /// Find a resource by storage key.
    pub fn get(&self, key: &GroupResource) -> Option<Arc<ResourceInfo>> {
        self.by_key.get(key).cloned()
    }

    /// Every served resource.
    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceInfo>> {
        self.by_key.values()
    }

    /// Serve (or re-serve) a CRD; an unusable CRD is refused with the reason.
    pub fn install_crd(&mut self, crd: &Value) -> Result<GroupResource, CrdError> {
        let info = info_from_crd(crd)?;
        let key = info.group_resource();
        if self.by_key.get(&key).is_some_and(|old| !old.custom) {
            return Err(CrdError::BuiltIn(info.qualified_name()));
        }
        self.by_key.insert(key.clone(), Arc::new(info));
        Ok(key)
    }

    /// Stop serving a CRD's resource.
    pub fn remove_crd(&mut self, key: &GroupResource) {
        if self.by_key.get(key).is_some_and(|i| i.custom) {
            self.by_key.remove(key);
        }
    }
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_str)
}

/// Why a CustomResourceDefinition cannot be served: the API server answers 422 Invalid with
/// this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrdError {
    /// A required field is missing (its path).
    #[error("{0} is required")]
    Required(&'static str),
    /// `metadata.name` is not `<plural>.<group>` (the expected name).
    #[error("metadata.name must be spec.names.plural+\".\"+spec.group ({0})")]
    Name(String),
    /// `spec.scope` is neither Namespaced nor Cluster.
    #[error("spec.scope must be Namespaced or Cluster, got {0:?}")]
    Scope(Option<String>),
    /// No version has `served: true`.
    #[error("spec.versions must contain a served version")]
    NoServedVersion,
    /// The CRD would replace a built-in resource (its qualified name).
    #[error("{0} is a built-in resource")]
    BuiltIn(String),
}

/// Parse the served shape of a CRD (`apiextensions.k8s.io/v1`).
pub fn info_from_crd(crd: &Value) -> Result<ResourceInfo, CrdError> {
    let spec = crd.get("spec").ok_or(CrdError::Required("spec"))?;
    let group = str_at(spec, &["group"])
        .ok_or(CrdError::Required("spec.group"))?
        .to_string();
    let names = spec.get("names").ok_or(CrdError::Required("spec.names"))?;
    let plural = str_at(names, &["plural"])
        .ok_or(CrdError::Required("spec.names.plural"))?
        .to_string();
    let kind = str_at(names, &["kind"])
        .ok_or(CrdError::Required("spec.names.kind"))?
        .to_string();
    let name = str_at(crd, &["metadata", "name"]).unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(CrdError::Name(format!("{plural}.{group}")));
    }
    let namespaced = match str_at(spec, &["scope"]) {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => return Err(CrdError::Scope(other.map(str::to_owned))),
    };
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or(CrdError::Required("spec.versions"))?;
    let mut served: Vec<(bool, String, &Value)> = versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
        .filter_map(|v| {
            let storage = v.get("storage").and_then(Value::as_bool).unwrap_or(false);
            str_at(v, &["name"]).map(|n| (storage, n.to_string(), v))
        })
        .collect();
    if served.is_empty() {
        return Err(CrdError::NoServedVersion);
    }
    served.sort_by_key(|(storage, _, _)| !storage);
    let first = served[0].2;
    let status_subresource = first.pointer("/subresources/status").is_some();
    let printer_columns = first
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|cols| {
            cols.iter()
                .filter_map(|c| {
                    Some(PrinterColumn {
                        name: str_at(c, &["name"])?.to_string(),
                        type_: str_at(c, &["type"]).unwrap_or("string").to_string(),
                        json_path: str_at(c, &["jsonPath"])?.to_string(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let strings = |key: &str| -> Vec<String> {
        names
            .get(key)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|s| s.as_str().map(String::from)).collect())
            .unwrap_or_default()
    };
    Ok(ResourceInfo {
        group,
        versions: served.into_iter().map(|(_, n, _)| n).collect(),
        singular: str_at(names, &["singular"])
            .map(String::from)
            .unwrap_or_else(|| kind.to_lowercase()),
        kind,
        plural,
        short_names: strings("shortNames"),
        categories: strings("categories"),
        namespaced,
        status_subresource,
        status_on_create: StatusOnCreate::Drop,
        extra_subresources: vec![],
        custom: true,
        printer_columns,
        schema: first.pointer("/schema/openAPIV3Schema").cloned().map(Arc::new),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unusable_crds_are_refused_with_the_api_servers_words() {
        let crd = |name: &str, scope: Value, versions: Value| {
            json!({"metadata": {"name": name}, "spec": {"group": "x.io", "scope": scope,
                "names": {"plural": "things", "kind": "Thing"}, "versions": versions}})
        };
        let served = json!([{"name": "v1", "served": true, "storage": true}]);
        let cases = [
            (json!({}), "spec is required"),
            (json!({"spec": {"group": "x.io"}}), "spec.names is required"),
            (
                crd("things.y.io", json!("Namespaced"), served.clone()),
                r#"metadata.name must be spec.names.plural+"."+spec.group (things.x.io)"#,
            ),
            (
                crd("things.x.io", json!("Galaxy"), served.clone()),
                r#"spec.scope must be Namespaced or Cluster, got Some("Galaxy")"#,
            ),
            (
                crd("things.x.io", Value::Null, served.clone()),
                "spec.scope must be Namespaced or Cluster, got None",
            ),
            (
                crd(
                    "things.x.io",
                    json!("Cluster"),
                    json!([{"name": "v1", "served": false}]),
                ),
                "spec.versions must contain a served version",
            ),
        ];
        for (crd, message) in cases {
            assert_eq!(info_from_crd(&crd).unwrap_err().to_string(), message, "{crd}");
        }
        let ok = crd("things.x.io", json!("Cluster"), served);
        let info = info_from_crd(&ok).unwrap();
        assert_eq!((info.plural.as_str(), info.namespaced), ("things", false));
    }
}
