//! The offline `mutate` and `validate` commands, run as the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_koord-webhook"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A usage error exits before reading stdin: the write then meets a closed pipe.
    if let Err(error) = child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        assert_eq!(error.kind(), std::io::ErrorKind::BrokenPipe, "{error}");
    }
    child.wait_with_output().unwrap()
}

fn spark_input() -> String {
    [
        include_str!("fixtures/seed001_profile.yaml"),
        include_str!("fixtures/spark_namespace.yaml"),
        include_str!("fixtures/spark_pod.yaml"),
    ]
    .join("---\n")
}

#[test]
fn mutate_explains_the_profile_and_prints_the_patch() {
    let output = run(&["mutate", "-f", "-"], &spark_input());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer["profiles"][0]["name"], "colocation-profile-example");
    assert_eq!(answer["profiles"][0]["applied"], true);
    assert_eq!(
        answer["pod"]["metadata"]["labels"]["koordinator.sh/qosClass"],
        "BE"
    );
    assert!(!answer["patch"].as_array().unwrap().is_empty());
}

#[test]
fn mutate_says_why_a_profile_did_not_apply() {
    let input = [
        include_str!("fixtures/seed001_profile.yaml"),
        include_str!("fixtures/spark_pod.yaml"),
    ]
    .join("---\n");
    let output = run(&["mutate", "-f", "-"], &input);
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer["profiles"][0]["applied"], false);
    assert_eq!(
        answer["profiles"][0]["reason"],
        "the pod's Namespace is unknown, so spec.namespaceSelector cannot match"
    );
    assert_eq!(answer["patch"], Value::Array(vec![]));
}

#[test]
fn mutate_seed_makes_the_draw_reproducible() {
    let input = spark_input().replace("qosClass: BE", "qosClass: BE\n  probability: \"50%\"");
    let outcomes: Vec<bool> = (0..20u64)
        .map(|seed| {
            let first = run(&["mutate", "-f", "-", "--seed", &seed.to_string()], &input);
            let again = run(&["mutate", "-f", "-", "--seed", &seed.to_string()], &input);
            assert_eq!(first.stdout, again.stdout);
            let answer: Value = serde_json::from_slice(&first.stdout).unwrap();
            answer["profiles"][0]["applied"].as_bool().unwrap()
        })
        .collect();
    assert!(
        outcomes.contains(&true) && outcomes.contains(&false),
        "{outcomes:?}"
    );
}

#[test]
fn mutate_needs_exactly_one_pod() {
    let input = [
        include_str!("fixtures/spark_pod.yaml"),
        include_str!("fixtures/spark_pod.yaml"),
    ]
    .join("---\n");
    let output = run(&["mutate", "-f", "-"], &input);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("expected exactly one Pod, found 2"));
}

#[test]
fn mutate_exits_1_when_the_pod_would_be_denied() {
    let input = spark_input().replace(
        "priorityClassName: koord-batch",
        "priorityClassName: no-such-class",
    );
    let output = run(&["mutate", "-f", "-"], &input);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("would be denied") && stderr.contains("no-such-class"),
        "{stderr}"
    );
}

#[test]
fn mutate_refuses_files_concatenated_without_a_separator() {
    // `cat profile.yaml pod.yaml`: one document in which the pod's `kind:` replaces the
    // profile's. It must be an error naming the duplicate key, not a pod mutated by nothing.
    let input = [
        include_str!("fixtures/seed001_profile.yaml"),
        include_str!("fixtures/spark_pod.yaml"),
    ]
    .concat();
    let output = run(&["mutate", "-f", "-"], &input);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("document 1") && stderr.contains("duplicate"),
        "{stderr}"
    );
}

#[test]
fn mutate_output_into_a_closed_pipe_is_not_a_panic() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_koord-webhook"))
        .args(["mutate", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    child
        .stdin
        .take()
        .unwrap()
        .write_all(spark_input().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn validate_exit_codes_and_one_line_per_violation() {
    let valid = [
        include_str!("fixtures/seed001_profile.yaml"),
        include_str!("fixtures/seed002_be_pod.yaml"),
    ]
    .join("---\n");
    let output = run(&["validate", "-f", "-"], &valid);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );

    let invalid = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
data:
  cpu-burst-config: |
    {"podStrategies": [{"podSelector": {"matchLabels": {"a": "b"}}, "cpuBurstConfig": {"cpuBurstPercent": 0}}]}
---
apiVersion: config.koordinator.sh/v1alpha1
kind: ClusterColocationProfile
metadata:
  name: bad
spec:
  probability: 101
"#;
    let output = run(&["validate", "-f", "-"], invalid);
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "document 1 (ConfigMap slo-controller-config), cpu-burst-config: podStrategies[0].cpuBurstConfig.cpuBurstPercent, 0 is below 1",
            "document 2 (ClusterColocationProfile bad), spec.probability, probability 101 is outside 0..=100",
        ]
    );

    let output = run(&["validate", "-f", "-"], "key: [unclosed");
    assert_eq!(output.status.code(), Some(2));
    let output = run(&["validate", "-f", "/nonexistent/file.yaml"], "");
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn validate_output_json_is_an_array_of_violations_with_unchanged_exit_codes() {
    let invalid = r#"
apiVersion: config.koordinator.sh/v1alpha1
kind: ClusterColocationProfile
metadata:
  name: bad
spec:
  probability: 101
---
apiVersion: v1
kind: Pod
metadata:
  name: fine
spec:
  containers: [{name: c, image: busybox}]
"#;
    let output = run(&["validate", "-f", "-", "--output", "json"], invalid);
    assert_eq!(output.status.code(), Some(1));
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        answer,
        serde_json::json!([{
            "document": 1,
            "kind": "ClusterColocationProfile",
            "name": "bad",
            "field": "spec.probability",
            "rule": "probability 101 is outside 0..=100",
            "message": "document 1 (ClusterColocationProfile bad), spec.probability, probability 101 is outside 0..=100",
        }])
    );

    // Valid input: exit 0 and an empty array, so scripts always get JSON.
    let valid = include_str!("fixtures/seed001_profile.yaml");
    let output = run(&["validate", "-f", "-", "-o", "json"], valid);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        serde_json::from_slice::<Value>(&output.stdout).unwrap(),
        serde_json::json!([])
    );

    // Unusable input: exit 2, the reason on stderr, nothing on stdout.
    let output = run(&["validate", "-f", "-", "-o", "json"], "key: [unclosed");
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert!(!output.stderr.is_empty());

    // An unknown format is a usage error naming the choices.
    let output = run(&["validate", "-f", "-", "-o", "yaml"], valid);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("[possible values: text, json]"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
