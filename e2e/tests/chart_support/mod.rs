//! Helpers of `tests/chart.rs`: finding helm, rendering the chart, reading the rendered objects,
//! container argv and environment, and an RBAC evaluator over the rendered roles and bindings
//! (the subset of Kubernetes' RBAC authorizer the chart uses: rules with apiGroups, resources,
//! resourceNames and verbs, bound through ClusterRoleBindings and RoleBindings to
//! ServiceAccounts).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// The release namespace every rendering uses.
pub const NAMESPACE: &str = "koordinator-system";

/// The chart directory.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/koordinator")
}

/// helm: `$HELM`, else `<repo>/target/tools/helm/helm` (what `scripts/install-helm.sh`
/// installs), else `helm` on `PATH`. `None` prints `skipped: helm not found`.
pub fn helm() -> Option<PathBuf> {
    let candidates = std::env::var_os("HELM")
        .map(PathBuf::from)
        .into_iter()
        .chain(std::env::var_os("KOORD_TOOLS_DIR").map(|d| PathBuf::from(d).join("helm/helm")))
        .chain([Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/helm/helm")])
        .chain(
            std::env::var_os("PATH")
                .map(|p| {
                    std::env::split_paths(&p)
                        .map(|d| d.join("helm"))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        );
    for candidate in candidates {
        if candidate.is_file()
            && Command::new(&candidate)
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success())
        {
            return Some(candidate);
        }
    }
    println!("skipped: helm not found (run scripts/install-helm.sh or set HELM)");
    None
}

/// Runs helm with `args`; returns (success, stdout, stderr).
pub fn run_helm(helm: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(helm)
        .args(args)
        // No user configuration or cache leaks into the run.
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("koord-chart-test-helm"),
        )
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("koord-chart-test-helm"),
        )
        .env(
            "HELM_DATA_HOME",
            std::env::temp_dir().join("koord-chart-test-helm"),
        )
        .output()
        .expect("running helm");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `helm template` with `--include-crds` and `set` values; panics with helm's message on failure.
pub fn render(helm: &Path, set: &[&str]) -> Rendered {
    let chart = chart_dir();
    let mut args = vec![
        "template",
        "koord",
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        "--include-crds",
    ];
    for value in set {
        args.push("--set");
        args.push(value);
    }
    let (ok, stdout, stderr) = run_helm(helm, &args);
    assert!(ok, "helm template {set:?} failed: {stderr}");
    let objects = koord_testcluster::parse_documents(&stdout)
        .unwrap_or_else(|e| panic!("rendered YAML {set:?} does not parse: {e}"))
        .into_iter()
        .filter(|o| !o.is_null())
        .collect();
    Rendered { objects }
}

/// `helm template` with a values file holding `values` (YAML).
pub fn render_values(helm: &Path, values: &str) -> Rendered {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values).expect("writing values");
    let chart = chart_dir();
    let args = [
        "template",
        "koord",
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        "-f",
        file.to_str().unwrap(),
    ];
    let (ok, stdout, stderr) = run_helm(helm, &args);
    assert!(ok, "helm template -f {values}: {stderr}");
    let objects = koord_testcluster::parse_documents(&stdout)
        .unwrap_or_else(|e| panic!("rendered YAML does not parse: {e}"))
        .into_iter()
        .filter(|o| !o.is_null())
        .collect();
    Rendered { objects }
}

/// The objects one rendering produced.
pub struct Rendered {
    /// Every document, in helm's order.
    pub objects: Vec<Value>,
}

impl Rendered {
    /// All objects of `kind`.
    pub fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| o["kind"] == kind).collect()
    }

    /// The slo-controller-config ConfigMap(s): every ConfigMap but koord-scheduler's
    /// KubeSchedulerConfiguration.
    pub fn slo_config_maps(&self) -> Vec<&Value> {
        self.of_kind("ConfigMap")
            .into_iter()
            .filter(|c| c["metadata"]["name"] != "koord-scheduler-config")
            .collect()
    }

    /// The one object of `kind` named `name`.
    pub fn get(&self, kind: &str, name: &str) -> &Value {
        self.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
    }

    /// Whether an object of `kind` named `name` was rendered.
    pub fn has(&self, kind: &str, name: &str) -> bool {
        self.objects
            .iter()
            .any(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    /// Count per kind.
    pub fn kinds(&self) -> BTreeMap<String, usize> {
        let mut kinds = BTreeMap::new();
        for object in &self.objects {
            *kinds
                .entry(object["kind"].as_str().unwrap_or("").to_string())
                .or_default() += 1;
        }
        kinds
    }
}

/// The first container of a Deployment or DaemonSet.
pub fn container(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]["containers"][0]
}

/// The container's environment as name -> value; `fieldRef`s become a placeholder naming the
/// field (what the kubelet would put there), e.g. `fieldRef:spec.nodeName`.
pub fn container_env(container: &Value) -> BTreeMap<String, String> {
    container["env"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_string();
            let value = match e["value"].as_str() {
                Some(v) => v.to_string(),
                None => match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some("status.hostIP") => "10.0.0.1".to_string(),
                    Some(path) => format!("fieldref-{}", path.replace('.', "-").to_lowercase()),
                    None => String::new(),
                },
            };
            (name, value)
        })
        .collect()
}

/// argv as the kubelet would start the container's entrypoint: `program`, then the args with
/// `$(VAR)` expanded from the container's environment.
pub fn container_argv(program: &str, container: &Value) -> Vec<String> {
    let env = container_env(container);
    let mut argv = vec![program.to_string()];
    for arg in container["args"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let mut text = arg.as_str().unwrap().to_string();
        for (name, value) in &env {
            text = text.replace(&format!("$({name})"), value);
        }
        argv.push(text);
    }
    argv
}

/// The port number of the container port named `name`.
pub fn named_port(container: &Value, name: &str) -> u16 {
    container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("container has no port {name}")) as u16
}

/// One API request, as RBAC sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    /// API group (`""` for core).
    pub group: String,
    /// Resource, with `/subresource` when there is one.
    pub resource: String,
    /// RBAC verb.
    pub verb: String,
    /// Namespace of a namespaced request.
    pub namespace: Option<String>,
    /// Object name, when the request names one.
    pub name: Option<String>,
}

impl Access {
    /// A request in `namespace` (None: cluster-wide), optionally naming an object.
    pub fn new(group: &str, resource: &str, verb: &str, namespace: Option<&str>, name: Option<&str>) -> Self {
        Access {
            group: group.into(),
            resource: resource.into(),
            verb: verb.into(),
            namespace: namespace.map(Into::into),
            name: name.map(Into::into),
        }
    }

    /// The access an HTTP request to the API server needs; `None` for discovery and
    /// non-resource paths (every authenticated user may read them).
    pub fn from_request(method: &str, path_and_query: &str) -> Option<Self> {
        let (path, query) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, rest) = match segments.as_slice() {
            ["api", "v1", rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(*ns), rest),
            _ => (None, rest),
        };
        let (resource, name, sub) = match rest {
            [] => return None,
            [resource] => (*resource, None, None),
            [resource, name] => (*resource, Some(*name), None),
            [resource, name, sub, ..] => (*resource, Some(*name), Some(*sub)),
        };
        let watch = query.split('&').any(|kv| kv == "watch=true" || kv == "watch=1");
        let verb = match (method, name) {
            ("GET", Some(_)) => "get",
            ("GET", None) if watch => "watch",
            ("GET", None) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", Some(_)) => "delete",
            ("DELETE", None) => "deletecollection",
            _ => return None,
        };
        let resource = match sub {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_string(),
        };
        // A create names no object for RBAC: the name is in the body. A list or watch with the
        // field selector `metadata.name=X` names X, as the API server's request info does.
        let selected = (verb == "list" || verb == "watch")
            .then(|| selected_name(query))
            .flatten();
        let name = if verb == "create" && sub.is_none() {
            None
        } else {
            name.map(str::to_string).or(selected)
        };
        Some(Access::new(group, &resource, verb, namespace, name.as_deref()))
    }
}

/// The name a query's `fieldSelector` requires exactly (`metadata.name=X` or `==X`).
fn selected_name(query: &str) -> Option<String> {
    let selector = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("fieldSelector="))?;
    let decoded = selector
        .replace("%3D", "=")
        .replace("%3d", "=")
        .replace("%2C", ",")
        .replace("%2c", ",");
    decoded.split(',').find_map(|term| {
        let value = term.strip_prefix("metadata.name")?;
        let value = value.strip_prefix("==").or_else(|| value.strip_prefix('='))?;
        (!value.is_empty()).then(|| value.to_string())
    })
}

fn list(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// Whether one PolicyRule allows `access`.
pub fn rule_allows(rule: &Value, access: &Access) -> bool {
    let groups = list(&rule["apiGroups"]);
    let resources = list(&rule["resources"]);
    let verbs = list(&rule["verbs"]);
    let names = list(&rule["resourceNames"]);
    (groups.contains(&"*") || groups.contains(&access.group.as_str()))
        && (resources.contains(&"*") || resources.contains(&access.resource.as_str()))
        && (verbs.contains(&"*") || verbs.contains(&access.verb.as_str()))
        && (names.is_empty() || access.name.as_deref().is_some_and(|n| names.contains(&n)))
}

/// The rules that apply to ServiceAccount `namespace/name` at `scope` (None: cluster-wide
/// requests, only ClusterRoleBindings count; Some(ns): RoleBindings in ns count too).
pub fn rules_for<'a>(
    rendered: &'a Rendered,
    sa_namespace: &str,
    sa_name: &str,
    scope: Option<&str>,
) -> Vec<&'a Value> {
    let bound = |binding: &Value| {
        binding["subjects"].as_array().is_some_and(|subjects| {
            subjects.iter().any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == sa_name && s["namespace"] == sa_namespace
            })
        })
    };
    let role = |kind: &str, name: &str, namespace: Option<&str>| {
        rendered.objects.iter().find(|o| {
            o["kind"] == kind
                && o["metadata"]["name"] == name
                && namespace.is_none_or(|ns| o["metadata"]["namespace"] == ns)
        })
    };
    let mut rules = Vec::new();
    for binding in rendered
        .of_kind("ClusterRoleBinding")
        .into_iter()
        .filter(|b| bound(b))
    {
        let target =
            role("ClusterRole", binding["roleRef"]["name"].as_str().unwrap(), None).unwrap_or_else(|| {
                panic!(
                    "ClusterRoleBinding {} refers to a missing ClusterRole",
                    binding["metadata"]["name"]
                )
            });
        rules.extend(target["rules"].as_array().unwrap());
    }
    if let Some(ns) = scope {
        for binding in rendered
            .of_kind("RoleBinding")
            .into_iter()
            .filter(|b| b["metadata"]["namespace"] == ns && bound(b))
        {
            let name = binding["roleRef"]["name"].as_str().unwrap();
            let target = match binding["roleRef"]["kind"].as_str() {
                Some("ClusterRole") => role("ClusterRole", name, None),
                _ => role("Role", name, Some(ns)),
            }
            .unwrap_or_else(|| panic!("RoleBinding {ns}/{name} refers to a missing role"));
            rules.extend(target["rules"].as_array().unwrap());
        }
    }
    rules
}

/// Whether ServiceAccount `namespace/name` may perform `access`.
pub fn allowed(rendered: &Rendered, sa_namespace: &str, sa_name: &str, access: &Access) -> bool {
    rules_for(rendered, sa_namespace, sa_name, access.namespace.as_deref())
        .into_iter()
        .any(|rule| rule_allows(rule, access))
}

/// Every (rule, resource, verb) the component's roles grant, with the role it came from.
pub fn granted(rendered: &Rendered, sa_name: &str) -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    let bindings = rendered
        .of_kind("ClusterRoleBinding")
        .into_iter()
        .chain(rendered.of_kind("RoleBinding"))
        .filter(|b| {
            b["subjects"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["name"] == sa_name))
        });
    for binding in bindings {
        let kind = binding["roleRef"]["kind"].as_str().unwrap();
        let role = rendered.get(kind, binding["roleRef"]["name"].as_str().unwrap());
        for rule in role["rules"].as_array().unwrap() {
            for group in list(&rule["apiGroups"]) {
                for resource in list(&rule["resources"]) {
                    for verb in list(&rule["verbs"]) {
                        out.push((
                            format!("{kind}/{}", role["metadata"]["name"].as_str().unwrap()),
                            group.into(),
                            resource.into(),
                            verb.into(),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// Requests a client sent: (method, path with query).
pub type RequestLog = Arc<Mutex<Vec<(String, String)>>>;

/// A kube client that records every request it sends (method and path with query).
pub fn recording_client(config: kube::Config) -> (kube::Client, RequestLog) {
    let log: RequestLog = Arc::default();
    let sink = log.clone();
    let layer = tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
        let target = request
            .uri()
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default();
        sink.lock().unwrap().push((request.method().to_string(), target));
        request
    });
    let client = kube::client::ClientBuilder::try_from(config)
        .expect("client from config")
        .with_layer(&layer)
        .build();
    (client, log)
}

/// The distinct accesses in a request log.
pub fn accesses(log: &Mutex<Vec<(String, String)>>) -> Vec<Access> {
    let mut out: Vec<Access> = log
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(method, path)| Access::from_request(method, path))
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_map_to_rbac_accesses() {
        let cases = [
            (
                "GET",
                "/api/v1/nodes?watch=true&resourceVersion=1",
                Access::new("", "nodes", "watch", None, None),
            ),
            (
                "GET",
                "/api/v1/namespaces",
                Access::new("", "namespaces", "list", None, None),
            ),
            (
                "GET",
                "/api/v1/namespaces/ns1",
                Access::new("", "namespaces", "get", None, Some("ns1")),
            ),
            (
                "PATCH",
                "/api/v1/nodes/n1/status",
                Access::new("", "nodes/status", "patch", None, Some("n1")),
            ),
            (
                "POST",
                "/api/v1/namespaces/a/pods/p/eviction",
                Access::new("", "pods/eviction", "create", Some("a"), Some("p")),
            ),
            (
                "POST",
                "/api/v1/namespaces/a/secrets",
                Access::new("", "secrets", "create", Some("a"), None),
            ),
            (
                "GET",
                "/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Dcerts&watch=true",
                Access::new("", "secrets", "watch", Some("a"), Some("certs")),
            ),
            (
                "GET",
                "/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3D%3Dcerts",
                Access::new("", "secrets", "list", Some("a"), Some("certs")),
            ),
            (
                "GET",
                "/api/v1/namespaces/a/secrets?fieldSelector=type%3Dx",
                Access::new("", "secrets", "list", Some("a"), None),
            ),
            (
                "PUT",
                "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/m",
                Access::new(
                    "admissionregistration.k8s.io",
                    "mutatingwebhookconfigurations",
                    "update",
                    None,
                    Some("m"),
                ),
            ),
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/k/leases/l",
                Access::new("coordination.k8s.io", "leases", "get", Some("k"), Some("l")),
            ),
        ];
        for (method, path, expected) in cases {
            assert_eq!(
                Access::from_request(method, path),
                Some(expected),
                "{method} {path}"
            );
        }
        assert_eq!(
            Access::from_request("GET", "/apis/slo.koordinator.sh/v1alpha1"),
            None
        );
        assert_eq!(Access::from_request("GET", "/version"), None);
    }
}
