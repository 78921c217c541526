//! Availability during node drains and rollouts: the manager's and the webhook's
//! PodDisruptionBudgets and preferred anti-affinity, koordlet's `minReadySeconds`.

use super::*;

fn pod_labels(workload: &Value) -> &serde_json::Map<String, Value> {
    workload["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap()
}

fn selects(selector: &Value, workload: &Value) -> bool {
    let selector = selector.as_object().unwrap();
    let pod = pod_labels(workload);
    !selector.is_empty() && selector.iter().all(|(k, v)| pod.get(k) == Some(v))
}

#[test]
fn manager_and_webhook_keep_one_replica_through_drains_and_spread_over_nodes() {
    let Some(helm) = chart_support::helm() else { return };
    for style in ["chart", "upstream"] {
        let set = format!("selectorStyle={style}");
        let rendered = render(&helm, &[set.as_str()]);
        for name in ["koord-manager", "koord-webhook", "koord-scheduler-extender"] {
            let workload = rendered.get("Deployment", name);
            let pdb = rendered.get("PodDisruptionBudget", name);
            assert_eq!(pdb["apiVersion"], "policy/v1", "{name}");
            serde_json::from_value::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(pdb.clone()).unwrap();
            assert_eq!(pdb["spec"]["minAvailable"], 1, "{name}");
            assert!(
                selects(&pdb["spec"]["selector"]["matchLabels"], workload),
                "{name}"
            );

            let preferred = workload["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
                ["preferredDuringSchedulingIgnoredDuringExecution"]
                .as_array()
                .unwrap_or_else(|| panic!("{name} has no preferred anti-affinity"));
            assert_eq!(preferred.len(), 1, "{name}");
            let term = &preferred[0]["podAffinityTerm"];
            assert_eq!(term["topologyKey"], "kubernetes.io/hostname", "{name}");
            assert!(selects(&term["labelSelector"]["matchLabels"], workload), "{name}");
            // preferred, never required: a one-node cluster still runs both replicas
            assert!(
                workload["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
                    .get("requiredDuringSchedulingIgnoredDuringExecution")
                    .is_none()
            );
        }
    }

    // One replica: a PDB with minAvailable 1 would block every drain, so none is rendered.
    let single = render(&helm, &["manager.replicas=1", "webhook.replicas=1"]);
    assert!(!single.has("PodDisruptionBudget", "koord-manager"));
    assert!(!single.has("PodDisruptionBudget", "koord-webhook"));
    let off = render(&helm, &["manager.podDisruptionBudget=false"]);
    assert!(!off.has("PodDisruptionBudget", "koord-manager"));
    assert!(off.has("PodDisruptionBudget", "koord-webhook"));

    // A user's affinity replaces the default spread.
    let custom = render(
        &helm,
        &[
            "manager.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
            "manager.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].key=infra",
            "manager.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].operator=Exists",
        ],
    );
    let affinity = &custom.get("Deployment", "koord-manager")["spec"]["template"]["spec"]["affinity"];
    assert!(affinity.get("podAntiAffinity").is_none(), "{affinity}");
    assert_eq!(
        affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"],
        1
    );
}

#[test]
fn the_manager_pdb_api_follows_the_cluster_version() {
    let Some(helm) = chart_support::helm() else { return };
    let chart = chart_support::chart_dir();
    for (version, expected) in [("1.20.2", "policy/v1beta1"), ("1.21.0", "policy/v1")] {
        let (ok, stdout, stderr) = chart_support::run_helm(
            &helm,
            &[
                "template",
                "koord",
                chart.to_str().unwrap(),
                "--kube-version",
                version,
            ],
        );
        assert!(ok, "{stderr}");
        let rendered = Rendered {
            objects: koord_testcluster::parse_documents(&stdout)
                .unwrap()
                .into_iter()
                .filter(|o| !o.is_null())
                .collect(),
        };
        assert_eq!(
            rendered.get("PodDisruptionBudget", "koord-manager")["apiVersion"],
            expected,
            "{version}"
        );
    }
}

#[test]
fn koordlet_rollouts_wait_min_ready_seconds_per_pod() {
    let Some(helm) = chart_support::helm() else { return };
    let default = render(&helm, &[]);
    assert_eq!(
        default.get("DaemonSet", "koordlet")["spec"]["minReadySeconds"],
        10
    );
    let set = render(&helm, &["koordlet.minReadySeconds=30"]);
    let daemonset = set.get("DaemonSet", "koordlet");
    assert_eq!(daemonset["spec"]["minReadySeconds"], 30);
    serde_json::from_value::<k8s_openapi::api::apps::v1::DaemonSet>(daemonset.clone()).unwrap();
}
