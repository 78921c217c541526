//! Golden tests of `koord-manager calc` on the seed examples: each `tests/calc/NAME.yaml` is
//! computed at a fixed `--now` and compared with `tests/calc/NAME.json`. Expected values were
//! worked out by hand (see the comments in each YAML); `UPDATE_GOLDEN=1` rewrites the files.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failure is the test failing
use std::path::Path;

use koord_manager::calc::{CalcError, calc};

const NOW: &str = "2026-11-22T10:00:00Z";

fn golden(name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/calc");
    let input = std::fs::read_to_string(dir.join(format!("{name}.yaml"))).unwrap();
    let output = calc(&input, NOW.parse().unwrap()).unwrap();
    let actual = serde_json::to_string_pretty(&output).unwrap() + "\n";
    let expected_path = dir.join(format!("{name}.json"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&expected_path, &actual).unwrap();
    }
    let expected = std::fs::read_to_string(&expected_path).unwrap();
    pretty_assertions::assert_eq!(actual, expected);
}

#[test]
fn upstream_worked_example() {
    golden("upstream_worked_example");
}

#[test]
fn host_applications_reported_beside_the_system_usage_count_once() {
    golden("host_applications");
}

#[test]
fn numa_zones_get_their_share() {
    golden("numa_zones");
}

#[test]
fn seed001_node_metric_without_update_time_degrades() {
    golden("seed001_never_reported");
}

#[test]
fn seed001_with_a_fresh_report() {
    golden("seed001_reported");
}

fn error_of(input: &str) -> String {
    match calc(input, NOW.parse().unwrap()) {
        Ok(output) => panic!("expected an error, got {output:?}"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn bad_quantity_names_document_object_and_field() {
    let error = error_of(
        "kind: Node\nmetadata: {name: n1}\n---\nkind: Node\nmetadata: {name: n2}\nstatus: {capacity: {cpu: lots}}\n",
    );
    assert_eq!(
        error,
        "document 2 (Node n2): status.capacity.cpu: quantity \"lots\" is not a number followed by a suffix"
    );
}

#[test]
fn wrong_type_names_the_field_path() {
    let error = error_of("kind: Pod\nmetadata: {name: p}\nspec: {containers: 3}\n");
    assert!(
        error.starts_with("document 1 (Pod p): spec.containers: invalid type"),
        "{error}"
    );
}

#[test]
fn broken_config_key_names_key_and_field() {
    let input = "kind: ConfigMap\nmetadata: {name: slo-controller-config}\ndata:\n  colocation-config: '{\"enable\": true, \"resourceDiffThreshold\": 7}'\n";
    let error = error_of(input);
    assert!(
        error.starts_with("document 1 (ConfigMap slo-controller-config): colocation-config"),
        "{error}"
    );
    assert!(error.contains("resourceDiffThreshold"), "{error}");
}

#[test]
fn yaml_syntax_error_names_the_document() {
    let error = match calc("kind: Node\n---\nkind: [", NOW.parse().unwrap()) {
        Err(CalcError::Yaml { document, .. }) => document,
        other => panic!("{other:?}"),
    };
    assert_eq!(error, "2");
}

#[test]
fn document_without_kind_is_rejected() {
    assert!(error_of("metadata: {name: x}\n").contains("kind: missing"));
}

#[test]
fn cpu_normalization_scales_batch_cpu_by_the_reported_cpu() {
    golden("cpu_normalization");
}

#[test]
fn mid_resources_from_the_prod_reclaimable_prediction() {
    golden("mid_resources");
}
