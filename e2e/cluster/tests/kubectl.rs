//! The real kubectl (when on PATH) against the embedded API server: create, get, apply
//! (client-side and server-side), patch (merge, json, strategic), describe, delete, watch and
//! api-resources for every kind the server serves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use common::unique;
use koord_test_support::Poll;
use koord_testcluster::{ClusterOptions, TestCluster};

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success())
}

struct Kubectl {
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

impl Kubectl {
    fn run(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .expect("run kubectl")
    }

    /// Run and require success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success(),
            "kubectl {args:?} failed:\nstdout: {stdout}\nstderr: {stderr}"
        );
        assert!(
            !stderr.contains("error") && !stderr.contains("Error"),
            "kubectl {args:?} complained: {stderr}"
        );
        stdout.into_owned()
    }

    /// `kubectl create namespace` (a protobuf body from kubectl's typed client).
    fn namespace(&self, ns: &str) {
        self.ok(&["create", "namespace", ns]);
    }

    fn file(&self, name: &str, content: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::File::create(&p)
            .unwrap()
            .write_all(content.as_bytes())
            .unwrap();
        p.display().to_string()
    }
}

async fn setup() -> Option<(TestCluster, Kubectl)> {
    if !kubectl_available() {
        println!("skipped: kubectl not found");
        return None;
    }
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).unwrap();
    Some((cluster, Kubectl { kubeconfig, dir }))
}

/// One kind's round trip. `manifest` has `NAME` and `LABEL` placeholders.
struct Case {
    resource: &'static str,
    manifest: &'static str,
    merge: &'static str,
    json: &'static str,
    strategic: bool,
}

const CASES: &[Case] = &[
    Case {
        resource: "namespaces",
        manifest: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\n",
        merge: r#"{"metadata":{"annotations":{"m":"1"}}}"#,
        json: r#"[{"op":"add","path":"/metadata/labels/j","value":"1"}]"#,
        strategic: true,
    },
    Case {
        resource: "nodes",
        manifest: "apiVersion: v1\nkind: Node\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\nspec:\n  podCIDR: 10.1.0.0/24\n",
        merge: r#"{"spec":{"unschedulable":true}}"#,
        json: r#"[{"op":"add","path":"/metadata/labels/j","value":"1"}]"#,
        strategic: true,
    },
    Case {
        resource: "pods",
        manifest: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\nspec:\n  containers:\n  - name: main\n    image: busybox\n    resources:\n      requests: {cpu: 100m}\n  - name: side\n    image: busybox\n",
        merge: r#"{"metadata":{"annotations":{"m":"1"}}}"#,
        json: r#"[{"op":"replace","path":"/spec/containers/0/image","value":"nginx"}]"#,
        strategic: true,
    },
    Case {
        resource: "configmaps",
        manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\ndata:\n  k: v\n",
        merge: r#"{"data":{"m":"1"}}"#,
        json: r#"[{"op":"add","path":"/data/j","value":"1"}]"#,
        strategic: true,
    },
    Case {
        resource: "secrets",
        manifest: "apiVersion: v1\nkind: Secret\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\nstringData:\n  k: v\ntype: Opaque\n",
        merge: r#"{"data":{"m":"MQ=="}}"#,
        json: r#"[{"op":"add","path":"/metadata/labels/j","value":"1"}]"#,
        strategic: true,
    },
    Case {
        resource: "services",
        manifest: "apiVersion: v1\nkind: Service\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\nspec:\n  selector: {app: x}\n  ports:\n  - port: 443\n    targetPort: 9443\n",
        merge: r#"{"metadata":{"annotations":{"m":"1"}}}"#,
        json: r#"[{"op":"add","path":"/metadata/labels/j","value":"1"}]"#,
        strategic: true,
    },
    Case {
        resource: "events",
        manifest: "apiVersion: v1\nkind: Event\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\ninvolvedObject: {kind: Pod, name: p, namespace: NS}\nreason: Test\nmessage: hello\ntype: Normal\n",
        merge: r#"{"message":"changed"}"#,
        json: r#"[{"op":"replace","path":"/reason","value":"Other"}]"#,
        strategic: true,
    },
    Case {
        resource: "events.events.k8s.io",
        manifest: "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\nregarding: {kind: Pod, name: p, namespace: NS}\nreason: Test\nnote: hello\ntype: Normal\naction: Test\nreportingController: test\nreportingInstance: test-1\neventTime: \"2026-01-01T00:00:00.000000Z\"\n",
        merge: r#"{"note":"changed"}"#,
        json: r#"[{"op":"replace","path":"/reason","value":"Other"}]"#,
        strategic: true,
    },
    Case {
        resource: "leases",
        manifest: "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\nspec:\n  holderIdentity: a\n  leaseDurationSeconds: 15\n",
        merge: r#"{"spec":{"holderIdentity":"b"}}"#,
        json: r#"[{"op":"replace","path":"/spec/leaseDurationSeconds","value":30}]"#,
        strategic: true,
    },
    Case {
        resource: "poddisruptionbudgets",
        manifest: "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\nspec:\n  minAvailable: 1\n  selector:\n    matchLabels: {app: x}\n",
        merge: r#"{"spec":{"minAvailable":2}}"#,
        json: r#"[{"op":"add","path":"/metadata/labels/j","value":"1"}]"#,
        strategic: true,
    },
    Case {
        resource: "priorityclasses",
        manifest: "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\nvalue: 5000\ndescription: test\n",
        merge: r#"{"description":"changed"}"#,
        json: r#"[{"op":"add","path":"/metadata/labels/j","value":"1"}]"#,
        strategic: true,
    },
    Case {
        resource: "mutatingwebhookconfigurations",
        manifest: "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\nwebhooks:\n- name: m.example.com\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: Ignore\n  clientConfig:\n    service: {namespace: NS, name: none}\n  rules:\n  - {operations: [CREATE], apiGroups: [example.com], apiVersions: [v1], resources: [nothings]}\n",
        merge: r#"{"metadata":{"annotations":{"m":"1"}}}"#,
        json: r#"[{"op":"add","path":"/metadata/labels/j","value":"1"}]"#,
        strategic: true,
    },
    Case {
        resource: "validatingwebhookconfigurations",
        manifest: "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\nwebhooks:\n- name: v.example.com\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: Ignore\n  clientConfig:\n    service: {namespace: NS, name: none}\n  rules:\n  - {operations: [CREATE], apiGroups: [example.com], apiVersions: [v1], resources: [nothings]}\n",
        merge: r#"{"metadata":{"annotations":{"m":"1"}}}"#,
        json: r#"[{"op":"add","path":"/metadata/labels/j","value":"1"}]"#,
        strategic: true,
    },
];

fn fill(manifest: &str, name: &str, label: &str, ns: &str) -> String {
    manifest
        .replace("NAME", name)
        .replace("LABEL", label)
        .replace("NS", ns)
}

fn round_trip(k: &Kubectl, case: &Case, ns: &str, name: &str, strategic: bool) {
    let r = case.resource;
    let f1 = k.file(&format!("{name}-1.yaml"), &fill(case.manifest, name, "one", ns));
    k.ok(&["create", "-n", ns, "-f", &f1]);
    let y = k.ok(&["get", "-n", ns, r, name, "-o", "yaml"]);
    assert!(y.contains(&format!("name: {name}")), "{r}: {y}");
    let listed = k.ok(&["get", "-n", ns, r, "-l", "l=one"]);
    assert!(listed.contains(name), "{r} -l: {listed}");
    k.ok(&["describe", "-n", ns, r, name]);
    // Client-side apply (first on an object created without the annotation, then again).
    let f2 = k.file(&format!("{name}-2.yaml"), &fill(case.manifest, name, "two", ns));
    let out = k.run(&["apply", "-n", ns, "-f", &f2]);
    assert!(
        out.status.success(),
        "{r} apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    k.ok(&["apply", "-n", ns, "-f", &f1]);
    assert!(
        k.ok(&["get", "-n", ns, r, "-l", "l=one", "-o", "name"])
            .contains(name),
        "{r}: apply set label back"
    );
    let y = k.ok(&["get", "-n", ns, r, name, "-o", "yaml"]);
    assert!(
        y.contains("kubectl.kubernetes.io/last-applied-configuration"),
        "{r}: {y}"
    );
    // Server-side apply.
    let f3 = k.file(&format!("{name}-3.yaml"), &fill(case.manifest, name, "three", ns));
    k.ok(&["apply", "--server-side", "--force-conflicts", "-n", ns, "-f", &f3]);
    assert!(
        k.ok(&["get", "-n", ns, r, "-l", "l=three", "-o", "name"])
            .contains(name),
        "{r}: server-side apply"
    );
    // Patches.
    k.ok(&["patch", "-n", ns, r, name, "--type", "merge", "-p", case.merge]);
    k.ok(&["patch", "-n", ns, r, name, "--type", "json", "-p", case.json]);
    if strategic {
        k.ok(&[
            "patch",
            "-n",
            ns,
            r,
            name,
            "--type",
            "strategic",
            "-p",
            r#"{"metadata":{"labels":{"s":"1"}}}"#,
        ]);
        assert!(
            k.ok(&["get", "-n", ns, r, "-l", "s=1", "-o", "name"])
                .contains(name),
            "{r}: strategic patch"
        );
    }
    k.ok(&["delete", "-n", ns, r, name]);
    let gone = k.run(&["get", "-n", ns, r, name]);
    assert!(!gone.status.success(), "{r} still there after delete");
}

#[tokio::test]
async fn kubectl_round_trips_every_kind() {
    let Some((_cluster, k)) = setup().await else {
        return;
    };
    let ns = unique("kubectl");
    k.namespace(&ns);
    // kubectl start-up dominates; three kinds at a time.
    std::thread::scope(|s| {
        for chunk in CASES.chunks(CASES.len().div_ceil(3)) {
            let (k, ns) = (&k, &ns);
            s.spawn(move || {
                for case in chunk {
                    let name = unique(case.resource.split('.').next().unwrap_or("x"));
                    round_trip(k, case, ns, &name, case.strategic);
                }
            });
        }
    });
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.koordinator.sh
spec:
  group: test.koordinator.sh
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget, shortNames: [wdg]}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

#[tokio::test]
async fn kubectl_crds_and_custom_resources() {
    let Some((cluster, k)) = setup().await else { return };
    let crd_dir = tempfile::tempdir().unwrap();
    std::fs::write(crd_dir.path().join("widgets.yaml"), CRD).unwrap();
    let names = cluster.install_crds_from_dir(crd_dir.path()).await.unwrap();
    assert_eq!(names, vec!["widgets.test.koordinator.sh"]);
    let res = k.ok(&["api-resources"]);
    assert!(
        res.contains("widgets") && res.contains("pods") && res.contains("leases"),
        "{res}"
    );
    assert!(k.ok(&["get", "crd"]).contains("widgets.test.koordinator.sh"));
    let ns = unique("crs");
    k.namespace(&ns);
    let case = Case {
        resource: "widgets",
        manifest: "apiVersion: test.koordinator.sh/v1alpha1\nkind: Widget\nmetadata:\n  name: NAME\n  labels: {l: LABEL}\nspec:\n  size: 3\n",
        merge: r#"{"spec":{"size":4}}"#,
        json: r#"[{"op":"replace","path":"/spec/size","value":5}]"#,
        strategic: false,
    };
    round_trip(&k, &case, &ns, &unique("w"), false);
    // The CRD itself round-trips as well (a second CRD, through kubectl).
    let crd2 = CRD
        .replace("widgets", "gadgets")
        .replace("Widget", "Gadget")
        .replace("widget", "gadget")
        .replace("wdg", "gdg");
    let f = k.file("gadgets.yaml", &crd2);
    k.ok(&["apply", "-f", &f]);
    k.ok(&["apply", "--server-side", "-f", &f]);
    k.ok(&[
        "patch",
        "crd",
        "gadgets.test.koordinator.sh",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"labels":{"x":"y"}}}"#,
    ]);
    assert!(k.ok(&["api-resources"]).contains("gadgets"));
    k.ok(&["delete", "crd", "gadgets.test.koordinator.sh"]);
    assert!(!k.ok(&["api-resources"]).contains("gadgets"));
}

#[tokio::test]
async fn kubectl_get_watch_streams_changes() {
    let Some((cluster, k)) = setup().await else { return };
    let ns = unique("watch");
    k.namespace(&ns);
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&k.kubeconfig)
        .args(["get", "configmaps", "-n", &ns, "-w", "--request-timeout=20s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    let name = unique("cm");
    k.ok(&["create", "configmap", &name, "-n", &ns, "--from-literal=a=b"]);
    // Each probe waits for the next line itself.
    let seen = Poll::new(
        "the new ConfigMap in kubectl get -w",
        std::time::Duration::from_secs(15),
    )
    .every(std::time::Duration::ZERO)
    .until_blocking(|| {
        let line = rx.recv_timeout(std::time::Duration::from_millis(200)).ok()?;
        line.contains(&name).then_some(())
    })
    .is_ok();
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen, "kubectl get -w printed the new ConfigMap");
    // Other protobuf-speaking generators.
    let secret = unique("s");
    k.ok(&[
        "create",
        "secret",
        "generic",
        &secret,
        "-n",
        &ns,
        "--from-literal=k=v",
    ]);
    let data = k.ok(&["get", "secret", &secret, "-n", &ns, "-o", "jsonpath={.data.k}"]);
    assert_eq!(data, "dg==");
    let cm = k.ok(&["get", "configmap", &name, "-n", &ns, "-o", "jsonpath={.data.a}"]);
    assert_eq!(cm, "b");
    drop(cluster);
}
