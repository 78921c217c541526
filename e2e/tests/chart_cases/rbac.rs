//! RBAC: the audited calls of each component against the rendered roles, both ways.

use super::*;

/// The calls each component makes (audited from its source: every `Api<...>` and verb), as
/// (group, resource, verb, namespace, name). `CONFIG` and `RELEASE` stand for the config and
/// release namespaces; `ANY` for any namespace (e.g. Events next to the object they are about).
const CONFIG: &str = "$config";
const RELEASE: &str = "$release";
const ANY: &str = "$any";

type Call = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
);

const MANAGER_CALLS: &[Call] = &[
    ("", "nodes", "list", None, None),
    ("", "nodes", "watch", None, None),
    ("", "nodes", "patch", None, None),
    ("", "nodes/status", "patch", None, None),
    ("", "pods", "list", None, None),
    ("", "pods", "watch", None, None),
    ("slo.koordinator.sh", "nodeslos", "get", None, None),
    ("slo.koordinator.sh", "nodeslos", "list", None, None),
    ("slo.koordinator.sh", "nodeslos", "watch", None, None),
    ("slo.koordinator.sh", "nodeslos", "create", None, None),
    ("slo.koordinator.sh", "nodeslos", "patch", None, None),
    ("slo.koordinator.sh", "nodeslos", "delete", None, None),
    ("slo.koordinator.sh", "nodemetrics", "get", None, None),
    ("slo.koordinator.sh", "nodemetrics", "list", None, None),
    ("slo.koordinator.sh", "nodemetrics", "watch", None, None),
    ("slo.koordinator.sh", "nodemetrics", "create", None, None),
    ("slo.koordinator.sh", "nodemetrics", "patch", None, None),
    ("slo.koordinator.sh", "nodemetrics", "delete", None, None),
    (
        "topology.node.k8s.io",
        "noderesourcetopologies",
        "list",
        None,
        None,
    ),
    (
        "topology.node.k8s.io",
        "noderesourcetopologies",
        "watch",
        None,
        None,
    ),
    (
        "topology.node.k8s.io",
        "noderesourcetopologies",
        "get",
        None,
        None,
    ),
    (
        "topology.node.k8s.io",
        "noderesourcetopologies",
        "update",
        None,
        None,
    ),
    ("events.k8s.io", "events", "create", Some(ANY), None),
    ("events.k8s.io", "events", "patch", Some(ANY), None),
    ("", "configmaps", "list", Some(CONFIG), None),
    ("", "configmaps", "watch", Some(CONFIG), None),
    ("coordination.k8s.io", "leases", "create", Some(CONFIG), None),
    (
        "coordination.k8s.io",
        "leases",
        "get",
        Some(CONFIG),
        Some("koordinator-manager"),
    ),
    (
        "coordination.k8s.io",
        "leases",
        "patch",
        Some(CONFIG),
        Some("koordinator-manager"),
    ),
];

const WEBHOOK_CALLS: &[Call] = &[
    (
        "config.koordinator.sh",
        "clustercolocationprofiles",
        "list",
        None,
        None,
    ),
    (
        "config.koordinator.sh",
        "clustercolocationprofiles",
        "watch",
        None,
        None,
    ),
    ("", "namespaces", "list", None, None),
    ("", "namespaces", "watch", None, None),
    ("", "nodes", "list", None, None),
    ("", "nodes", "watch", None, None),
    ("scheduling.k8s.io", "priorityclasses", "list", None, None),
    ("scheduling.k8s.io", "priorityclasses", "watch", None, None),
    ("", "secrets", "create", Some(RELEASE), None),
    (
        "",
        "secrets",
        "get",
        Some(RELEASE),
        Some("koordinator-webhook-certs"),
    ),
    (
        "",
        "secrets",
        "update",
        Some(RELEASE),
        Some("koordinator-webhook-certs"),
    ),
    // The certificate Secret's watch (field selector metadata.name).
    (
        "",
        "secrets",
        "list",
        Some(RELEASE),
        Some("koordinator-webhook-certs"),
    ),
    (
        "",
        "secrets",
        "watch",
        Some(RELEASE),
        Some("koordinator-webhook-certs"),
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "get",
        None,
        Some("koordinator-mutating-webhook-configuration"),
    ),
    (
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "update",
        None,
        Some("koordinator-mutating-webhook-configuration"),
    ),
    (
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "get",
        None,
        Some("koordinator-validating-webhook-configuration"),
    ),
    (
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "update",
        None,
        Some("koordinator-validating-webhook-configuration"),
    ),
];

const KOORDLET_CALLS: &[Call] = &[
    ("", "nodes", "list", None, None),
    ("", "nodes", "watch", None, None),
    ("", "nodes/proxy", "get", None, Some("any-node")),
    ("", "pods/eviction", "create", Some(ANY), Some("any-pod")),
    ("slo.koordinator.sh", "nodeslos", "list", None, None),
    ("slo.koordinator.sh", "nodeslos", "watch", None, None),
    ("slo.koordinator.sh", "nodemetrics", "list", None, None),
    ("slo.koordinator.sh", "nodemetrics", "watch", None, None),
    (
        "slo.koordinator.sh",
        "nodemetrics/status",
        "patch",
        None,
        Some("any-node"),
    ),
    ("events.k8s.io", "events", "create", Some(ANY), None),
    ("events.k8s.io", "events", "patch", Some(ANY), None),
    // koordlet/src/report/topology.rs: get, create when absent, merge-patch the annotation.
    (
        "topology.node.k8s.io",
        "noderesourcetopologies",
        "get",
        None,
        Some("any-node"),
    ),
    (
        "topology.node.k8s.io",
        "noderesourcetopologies",
        "create",
        None,
        None,
    ),
    (
        "topology.node.k8s.io",
        "noderesourcetopologies",
        "patch",
        None,
        Some("any-node"),
    ),
    (
        "topology.node.k8s.io",
        "noderesourcetopologies",
        "update",
        None,
        Some("any-node"),
    ),
];

/// koord-scheduler-extender's caches (scheduler-extender/src/cluster.rs); it writes nothing.
const EXTENDER_CALLS: &[Call] = &[
    ("", "nodes", "list", None, None),
    ("", "nodes", "watch", None, None),
    ("", "pods", "list", None, None),
    ("", "pods", "watch", None, None),
    ("slo.koordinator.sh", "nodemetrics", "list", None, None),
    ("slo.koordinator.sh", "nodemetrics", "watch", None, None),
    ("", "configmaps", "list", Some(CONFIG), None),
    ("", "configmaps", "watch", Some(CONFIG), None),
];

/// With `--pods-source=apiserver` koordlet watches pods instead of asking the kubelet.
const KOORDLET_APISERVER_CALLS: &[Call] = &[
    ("", "pods", "list", None, None),
    ("", "pods", "watch", None, None),
];

fn concrete(call: &Call, config: &str) -> Access {
    let namespace = call.3.map(|ns| match ns {
        CONFIG => config,
        RELEASE => NAMESPACE,
        ANY => "some-namespace",
        other => other,
    });
    Access::new(call.0, call.1, call.2, namespace, call.4)
}

/// Every audited call is allowed, and every granted (resource, verb) is an audited call.
fn assert_rbac_exact(rendered: &Rendered, sa: &str, calls: &[Call], config: &str) {
    for call in calls {
        let access = concrete(call, config);
        assert!(
            chart_support::allowed(rendered, NAMESPACE, sa, &access),
            "{sa} may not {access:?}"
        );
    }
    for (role, group, resource, verb) in chart_support::granted(rendered, sa) {
        assert!(
            calls
                .iter()
                .any(|c| c.0 == group && c.1 == resource && c.2 == verb),
            "{role} grants {verb} on {group}/{resource}, which {sa} never calls"
        );
    }
}

#[test]
fn rbac_grants_exactly_the_calls_each_component_makes() {
    let Some(helm) = chart_support::helm() else { return };
    let rendered = render(&helm, &[]);
    assert_rbac_exact(&rendered, "koord-manager", MANAGER_CALLS, NAMESPACE);
    assert_rbac_exact(&rendered, "koord-webhook", WEBHOOK_CALLS, NAMESPACE);
    assert_rbac_exact(&rendered, "koordlet", KOORDLET_CALLS, NAMESPACE);
    assert_rbac_exact(&rendered, "koord-scheduler-extender", EXTENDER_CALLS, NAMESPACE);

    // Least privilege: names are enforced where the API allows it, nothing is a wildcard.
    let deny = [
        (
            "koord-webhook",
            Access::new("", "secrets", "get", Some(NAMESPACE), Some("other-secret")),
        ),
        (
            "koord-webhook",
            Access::new(
                "",
                "secrets",
                "get",
                Some("default"),
                Some("koordinator-webhook-certs"),
            ),
        ),
        (
            "koord-webhook",
            Access::new(
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations",
                "update",
                None,
                Some("someone-elses"),
            ),
        ),
        (
            "koord-manager",
            Access::new(
                "coordination.k8s.io",
                "leases",
                "patch",
                Some(NAMESPACE),
                Some("other-lease"),
            ),
        ),
        (
            "koord-manager",
            Access::new("coordination.k8s.io", "leases", "create", Some("default"), None),
        ),
        (
            "koord-manager",
            Access::new("", "configmaps", "list", Some("default"), None),
        ),
        ("koord-manager", Access::new("", "secrets", "list", None, None)),
        ("koordlet", Access::new("", "nodes", "patch", None, Some("n1"))),
        (
            "koordlet",
            Access::new("", "pods", "delete", Some("default"), Some("p")),
        ),
    ];
    for (sa, access) in deny {
        assert!(
            !chart_support::allowed(&rendered, NAMESPACE, sa, &access),
            "{sa} may {access:?}"
        );
    }
    for role in rendered
        .of_kind("ClusterRole")
        .into_iter()
        .chain(rendered.of_kind("Role"))
    {
        for rule in role["rules"].as_array().unwrap() {
            for field in ["apiGroups", "resources", "verbs"] {
                assert!(
                    !rule[field].as_array().unwrap().contains(&json!("*")),
                    "{} has a wildcard",
                    role["metadata"]["name"]
                );
            }
        }
    }

    // Variants: a separate config namespace, no leader election, API-server pods, cert-manager.
    let rendered = render(&helm, VARIANTS[2]);
    let without_leases: Vec<Call> = MANAGER_CALLS
        .iter()
        .copied()
        .filter(|c| c.1 != "leases")
        .collect();
    assert_rbac_exact(&rendered, "koord-manager", &without_leases, "koord-config");
    let koordlet: Vec<Call> = KOORDLET_CALLS
        .iter()
        .chain(KOORDLET_APISERVER_CALLS)
        .copied()
        .filter(|c| c.1 != "nodes/proxy")
        .collect();
    assert_rbac_exact(&rendered, "koordlet", &koordlet, "koord-config");
    assert_rbac_exact(
        &rendered,
        "koord-scheduler-extender",
        EXTENDER_CALLS,
        "koord-config",
    );
    let rendered = render(&helm, &["webhook.certs.mode=certManager"]);
    let readers: Vec<Call> = WEBHOOK_CALLS
        .iter()
        .copied()
        .filter(|c| c.1 != "secrets" && !c.1.ends_with("webhookconfigurations"))
        .collect();
    assert_rbac_exact(&rendered, "koord-webhook", &readers, NAMESPACE);
}
