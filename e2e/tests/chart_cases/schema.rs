//! `values.schema.json`: it covers every value of `values.yaml` and nothing else, every
//! documented value renders when changed, and wrong values (a type, a misspelt key, a bad enum,
//! out of range) are refused by helm with a message naming the value.

use super::*;

/// The schema file.
fn schema() -> Value {
    let path = chart_support::chart_dir().join("values.schema.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The chart's `values.yaml` as JSON.
fn default_values() -> Value {
    let path = chart_support::chart_dir().join("values.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    koord_testcluster::parse_documents(&text)
        .unwrap()
        .into_iter()
        .next()
        .unwrap()
}

/// The schema of `node`, following a local `$ref`.
fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node["$ref"].as_str() {
        Some(reference) => {
            let name = reference.strip_prefix("#/definitions/").unwrap();
            &root["definitions"][name]
        }
        None => node,
    }
}

/// Every key path of `values` below objects the schema closes (`additionalProperties: false`)
/// must be a schema property, and every schema property of such an object a value.
fn compare(root: &Value, schema: &Value, values: &Value, path: &str, problems: &mut Vec<String>) {
    let schema = resolve(root, schema);
    let Some(values) = values.as_object() else { return };
    let Some(properties) = schema["properties"].as_object() else {
        return;
    };
    if schema["additionalProperties"] != false {
        // A Kubernetes object passed through: only its shape is checked.
        return;
    }
    for (key, value) in values {
        let child = format!("{path}{key}");
        match properties.get(key) {
            Some(sub) => compare(root, sub, value, &format!("{child}."), problems),
            None => problems.push(format!("{child} is in values.yaml but not in the schema")),
        }
    }
    for key in properties.keys() {
        if !values.contains_key(key) {
            problems.push(format!("{path}{key} is in the schema but not in values.yaml"));
        }
    }
}

#[test]
fn the_schema_covers_exactly_the_values_in_values_yaml() {
    let root = schema();
    let mut problems = Vec::new();
    compare(&root, &root, &default_values(), "", &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Every value changed from its default to another valid one (every enum member at least once
/// over the sets), as users would write them in a values file.
const CHANGED_VALUES: &[&str] = &[
    r#"
configNamespace: koord-config
logFormat: text
logLevel: info,koordlet=debug
imagePullSecrets: [{name: regcred}]
commonLabels: {team: platform}
commonAnnotations: {owner: sre}
manager:
  enabled: true
  image: {repository: registry.local/koord-manager, tag: "1.2.3", pullPolicy: Always}
  replicas: 3
  controllers: [nodeslo, nodemetric]
  leaderElection: {enabled: false, leaseDurationSeconds: 15}
  resyncSeconds: 120
  healthPort: 9000
  metricsPort: 9090
  resources: {requests: {cpu: 200m, memory: 256Mi}, limits: {memory: 1Gi}}
  priorityClassName: ""
  nodeSelector: {kubernetes.io/os: linux}
  tolerations: [{key: dedicated, operator: Equal, value: infra, effect: NoSchedule}]
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: infra, operator: Exists}]}]}}}
  podAnnotations: {a: b}
  podLabels: {c: d}
  podDisruptionBudget: false
  extraArgs: ["--slo-config-name=slo-controller-config"]
  extraEnv: [{name: EXTRA, value: "1"}]
webhook:
  enabled: true
  image: {repository: registry.local/koord-webhook, tag: "1.2.3", pullPolicy: Never}
  replicas: 3
  port: 9443
  healthPort: 9001
  metricsPort: 9091
  serviceName: koord-webhook-svc
  mutatingWebhookConfigurationName: koord-mutating
  validatingWebhookConfigurationName: koord-validating
  certs:
    mode: certManager
    secretName: koord-certs
    certDir: /certs
    syncInterval: 1m30s
    certManager: {issuerRef: {name: ca, kind: ClusterIssuer}, duration: 2160h, renewBefore: 720h}
  podWebhooks: {failurePolicy: Fail, timeoutSeconds: 10}
  configMapWebhook: {enabled: true, failurePolicy: Ignore, timeoutSeconds: 30}
  profileWebhook: {failurePolicy: Ignore, timeoutSeconds: 1}
  excludedNamespaces: [monitoring]
  skipMutatingResources: true
  disableExtendedResourceSpec: true
  allowPriorityLabelUpdate: true
  podDisruptionBudget: false
  resources: {}
  priorityClassName: system-node-critical
  nodeSelector: {}
  tolerations: []
  affinity: {}
  podAnnotations: {}
  podLabels: {}
  extraArgs: []
  extraEnv: []
koordlet:
  enabled: true
  image: {repository: registry.local/koordlet, tag: "1.2.3", pullPolicy: IfNotPresent}
  featureGates: {BECPUEvict: false, CPUBurst: true}
  cgroupDriver: systemd
  podsSource: apiserver
  kubeletUrl: http://127.0.0.1:10255
  collectInterval: 2
  suppressInterval: 100ms
  dryRun: true
  port: 9317
  hostPaths:
    {cgroup: /host/sys/fs/cgroup, proc: /host/proc, sys: /host/sys, kubeletRootDir: /data/kubelet, koordletState: /data/koordlet}
  privileged: false
  capabilities: [SYS_ADMIN]
  resources: {limits: {memory: 128Mi}}
  priorityClassName: ""
  nodeSelector: {kubernetes.io/os: linux}
  tolerations: []
  affinity: {}
  updateStrategy: {type: OnDelete}
  minReadySeconds: 0
  podAnnotations: {}
  podLabels: {}
  extraArgs: []
  extraEnv: []
metricsService: {enabled: true}
serviceMonitor: {enabled: true, interval: 1m, scrapeTimeout: 30s, labels: {release: prometheus}}
podMonitor: {enabled: true, interval: 15s, scrapeTimeout: 5s, labels: {release: prometheus}}
priorityClasses:
  create: true
  classes:
    - {name: koord-prod, value: 9000, description: prod, preemptionPolicy: Never}
sloConfig:
  create: true
  name: my-slo-config
  colocationConfig: {enable: false}
  resourceThresholdConfig: {}
  resourceQOSConfig: {}
  cpuBurstConfig: {}
  systemConfig: {}
  hostApplicationConfig: {}
"#,
    r#"
selectorStyle: upstream
manager: {enabled: false}
webhook:
  certs: {mode: secret}
  podWebhooks: {failurePolicy: Ignore}
koordlet: {cgroupDriver: cgroupfs, podsSource: kubelet, collectInterval: 500ms, updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}}
priorityClasses: {create: false}
sloConfig: {create: false}
"#,
    "koordlet: {cgroupDriver: auto}\nlogFormat: json\n",
];

#[test]
fn every_documented_value_renders_when_changed() {
    let Some(helm) = chart_support::helm() else { return };
    for values in CHANGED_VALUES {
        let rendered = chart_support::render_values(&helm, values);
        assert!(!rendered.objects.is_empty(), "{values}");
    }
    // The defaults pass `helm lint --strict` with the schema in place.
    let chart = chart_support::chart_dir();
    let (ok, stdout, stderr) = chart_support::run_helm(&helm, &["lint", "--strict", chart.to_str().unwrap()]);
    assert!(ok, "{stdout}{stderr}");
}

#[test]
fn wrong_values_are_refused_with_a_message_naming_them() {
    let Some(helm) = chart_support::helm() else { return };
    let chart = chart_support::chart_dir();
    // (--set value, the message helm prints)
    let cases: &[(&str, &str)] = &[
        (
            "manager.replicas=two",
            "manager.replicas: Invalid type. Expected: integer, given: string",
        ),
        (
            "koordlet.privilegd=false",
            "koordlet: Additional property privilegd is not allowed",
        ),
        ("logFormat=xml", "logFormat must be one of the following"),
        (
            "koordlet.cgroupDriver=cgroupv2",
            "koordlet.cgroupDriver must be one of the following",
        ),
        (
            "webhook.certs.mode=vault",
            "webhook.certs.mode must be one of the following",
        ),
        (
            "webhook.podWebhooks.failurePolicy=ignore",
            "webhook.podWebhooks.failurePolicy must be one of the following",
        ),
        (
            "webhook.profileWebhook.timeoutSeconds=60",
            "webhook.profileWebhook.timeoutSeconds: Must be less than or equal to 30",
        ),
        (
            "webhook.port=70000",
            "webhook.port: Must be less than or equal to 65535",
        ),
        (
            "manager.replicas=-1",
            "manager.replicas: Must be greater than or equal to 0",
        ),
        (
            "koordlet.collectInterval=1x",
            "koordlet.collectInterval: Does not match pattern",
        ),
        (
            "koordlet.featureGates.CPUBurst=yes",
            "koordlet.featureGates.CPUBurst: Invalid type. Expected: boolean, given: string",
        ),
        (
            "unknownTopLevel=1",
            "Additional property unknownTopLevel is not allowed",
        ),
        (
            "manager.leaderElection.enable=false",
            "manager.leaderElection: Additional property enable is not allowed",
        ),
        (
            "koordlet.image.pullPolicy=always",
            "koordlet.image.pullPolicy must be one of the following",
        ),
        (
            "koordlet.hostPaths.cgroup=sys/fs/cgroup",
            "koordlet.hostPaths.cgroup: Does not match pattern",
        ),
    ];
    for (value, message) in cases {
        let (ok, _, stderr) = chart_support::run_helm(
            &helm,
            &["template", "koord", chart.to_str().unwrap(), "--set", value],
        );
        assert!(!ok, "{value} was accepted");
        assert!(
            stderr.contains("values don't meet the specifications of the schema"),
            "{value}: {stderr}"
        );
        assert!(
            stderr.contains(message),
            "{value}: expected {message:?} in {stderr}"
        );
    }
    // Without the schema (`--skip-schema-validation`) the templates still refuse what the
    // components would reject at start.
    let (ok, _, stderr) = chart_support::run_helm(
        &helm,
        &[
            "template",
            "koord",
            chart.to_str().unwrap(),
            "--skip-schema-validation",
            "--set",
            "logFormat=xml",
        ],
    );
    assert!(!ok);
    assert!(stderr.contains("logFormat must be text or json"), "{stderr}");
}

/// The keys the README's Values table documents: the first cell's backticked keys, with
/// `a.{b,c}` expanded and `a.*` standing for everything below `a`.
fn documented_keys() -> Vec<String> {
    let readme = std::fs::read_to_string(chart_support::chart_dir().join("README.md")).unwrap();
    let table = readme
        .split("## Values")
        .nth(1)
        .unwrap()
        .split("\n## ")
        .next()
        .unwrap();
    let mut keys = Vec::new();
    for row in table.lines().filter(|l| l.starts_with("| `")) {
        let cell = row.split('|').nth(1).unwrap();
        for key in cell.split('`').skip(1).step_by(2) {
            match (key.find('{'), key.find('}')) {
                (Some(open), Some(close)) => {
                    for member in key[open + 1..close].split(',') {
                        keys.push(format!("{}{member}{}", &key[..open], &key[close + 1..]));
                    }
                }
                _ => keys.push(key.to_string()),
            }
        }
    }
    keys
}

/// Leaf paths of `values` as far as the schema closes the objects (a passed-through Kubernetes
/// object or a map of user-chosen keys is one value).
fn value_paths(root: &Value, schema: &Value, values: &Value, path: &str, out: &mut Vec<String>) {
    let schema = resolve(root, schema);
    match (values.as_object(), schema["additionalProperties"] == false) {
        (Some(map), true) => {
            for (key, value) in map {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                value_paths(root, &schema["properties"][key], value, &child, out);
            }
        }
        _ => out.push(path.to_string()),
    }
}

#[test]
fn every_value_is_documented_in_the_readme() {
    let root = schema();
    let mut paths = Vec::new();
    value_paths(&root, &root, &default_values(), "", &mut paths);
    let documented = documented_keys();
    let missing: Vec<&String> = paths
        .iter()
        .filter(|path| {
            !documented.iter().any(|key| {
                key == *path
                    || key
                        .strip_suffix(".*")
                        .is_some_and(|prefix| path.starts_with(&format!("{prefix}.")))
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "values without a row in README.md's Values table: {missing:#?}"
    );
}
