//! The embedded test API server's request parsing: selector query strings and patch bodies
//! applied to stored objects, as its HTTP handlers do.

use std::sync::{Arc, OnceLock};

use koord_testcluster::apiserver::object::check_type;
use koord_testcluster::apiserver::patch::{PatchKind, apply_patch, parse_body, server_side_apply};
use koord_testcluster::apiserver::resource::{Registry, ResourceInfo};
use koord_testcluster::apiserver::schema::prune_and_default;
use koord_testcluster::apiserver::selector::{FieldSelector, LabelSelector};
use serde_json::{Value, json};

use crate::{choose, text};

struct Fixtures {
    pod: Arc<ResourceInfo>,
    node_slo: Option<Arc<ResourceInfo>>,
}

fn fixtures() -> &'static Option<Fixtures> {
    static FIXTURES: OnceLock<Option<Fixtures>> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        let mut registry = Registry::with_builtins();
        let pod = registry.lookup("", "v1", "pods")?;
        let node_slo = koord_api::crds::crds().ok().and_then(|crds| {
            let crd = crds.into_iter().find(|c| c.spec.names.kind == "NodeSLO")?;
            let value = serde_json::to_value(crd).ok()?;
            registry.install_crd(&value).ok()?;
            registry.lookup("slo.koordinator.sh", "v1alpha1", "nodeslos")
        });
        Some(Fixtures { pod, node_slo })
    })
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"},
            "resourceVersion": "5"},
        "spec": {"nodeName": "n1", "containers": [
            {"name": "c", "image": "nginx", "ports": [{"containerPort": 80}],
             "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running"}
    })
}

fn node_slo() -> Value {
    json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
        "metadata": {"name": "n1", "resourceVersion": "3"},
        "spec": {"resourceUsedThresholdWithBE": {"enable": true, "cpuSuppressThresholdPercent": 65}}
    })
}

/// Input: a selector byte, then a `labelSelector`/`fieldSelector` query value or a patch body
/// of one of the four content types.
pub fn requests(data: &[u8]) {
    let (which, rest) = choose(data, 6);
    match which {
        0 => {
            if let Ok(selector) = LabelSelector::parse(&text(rest)) {
                let _ = selector.matches(pod().pointer("/metadata/labels"));
                let _ = selector.matches(None);
            }
        }
        1 => {
            if let Ok(selector) = FieldSelector::parse(&text(rest)) {
                let _ = selector.matches(&pod());
            }
        }
        n => {
            let kind = [
                PatchKind::Merge,
                PatchKind::Json,
                PatchKind::Strategic,
                PatchKind::Apply,
            ][usize::from(n - 2)];
            patch(kind, rest);
        }
    }
}

fn patch(kind: PatchKind, body: &[u8]) {
    let Some(fixtures) = fixtures() else {
        return;
    };
    let Ok(patch) = parse_body(kind, body) else {
        return;
    };
    let mut targets = vec![(&fixtures.pod, pod())];
    if let Some(info) = &fixtures.node_slo {
        targets.push((info, node_slo()));
    }
    for (info, current) in targets {
        let result = if kind == PatchKind::Apply {
            server_side_apply(info, &current, &patch, "fuzz", "", false)
        } else {
            apply_patch(info, &current, kind, &patch)
        };
        if let Ok(mut out) = result {
            let _ = check_type(info, info.storage_version(), &out);
            if let Some(schema) = &info.schema {
                let _ = prune_and_default(&mut out, schema);
            }
        }
    }
}
