//! Every duration the Helm chart passes to a binary parses with the one duration parser: the
//! values' defaults (`values.yaml`) and each template flag that takes a duration. A value that
//! renders but does not parse would crash-loop the pod at start.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use koord_runtime::{parse_duration, parse_interval};
use serde_yaml::Value;

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/koordinator")
}

fn values() -> Value {
    let text = std::fs::read_to_string(chart().join("values.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// Whether a key or flag name says it holds a duration.
fn is_duration_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["interval", "duration", "seconds", "period", "timeout"]
        .iter()
        .any(|word| name.contains(word))
}

fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// (dotted path, scalar) of every duration-named key.
fn duration_values(value: &Value, path: &str, out: &mut Vec<(String, String)>) {
    if let Value::Mapping(map) = value {
        for (key, child) in map {
            let key = key.as_str().unwrap_or_default();
            let path = if path.is_empty() {
                key.to_owned()
            } else {
                format!("{path}.{key}")
            };
            match scalar(child) {
                Some(text) if is_duration_name(key) => out.push((path, text)),
                _ => duration_values(child, &path, out),
            }
        }
    }
}

fn lookup<'a>(values: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted
        .split('.')
        .filter(|p| !p.is_empty())
        .try_fold(values, |v, key| v.get(key))
}

/// (template, flag, values path) of every `--flag={{ ref }}` whose flag names a duration, with
/// template variables (`$k := .Values.koordlet`) resolved.
fn duration_flags() -> Vec<(String, String, String)> {
    let mut flags = Vec::new();
    for entry in std::fs::read_dir(chart().join("templates")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let template = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut variables: BTreeMap<String, String> = BTreeMap::new();
        for line in text.lines() {
            let line = line.trim();
            if let Some(rest) = line.strip_prefix("{{- $").or_else(|| line.strip_prefix("{{ $"))
                && let Some((name, target)) = rest.split_once(":=")
                && let Some(target) = target
                    .trim()
                    .trim_end_matches("}}")
                    .trim()
                    .strip_prefix(".Values")
            {
                variables.insert(format!("${}", name.trim()), target.to_owned());
            }
            let Some(flag) = line.strip_prefix("- --") else {
                continue;
            };
            let Some((name, reference)) = flag.split_once("={{") else {
                continue;
            };
            if !is_duration_name(name) {
                continue;
            }
            let reference = reference.trim().trim_end_matches("}}").trim();
            let dotted = if let Some(rest) = reference.strip_prefix(".Values") {
                rest.to_owned()
            } else if let Some((var, rest)) = reference.split_once('.')
                && let Some(base) = variables.get(var)
            {
                format!("{base}.{rest}")
            } else {
                panic!("{template}: --{name} takes {reference:?}, which this test cannot resolve");
            };
            flags.push((template.clone(), name.to_owned(), dotted));
        }
    }
    flags.sort();
    flags
}

#[test]
fn every_duration_in_values_yaml_parses() {
    let mut found = Vec::new();
    duration_values(&values(), "", &mut found);
    assert!(
        found.iter().any(|(path, _)| path == "webhook.certs.syncInterval"),
        "{found:?}"
    );
    for (path, text) in &found {
        if let Err(err) = parse_duration(text) {
            panic!("values.yaml {path}: {err}");
        }
    }
}

#[test]
fn every_duration_flag_of_the_templates_parses_with_its_default() {
    let values = values();
    let flags = duration_flags();
    let names: Vec<&str> = flags.iter().map(|(_, name, _)| name.as_str()).collect();
    for expected in [
        "cert-sync-interval",
        "lease-duration-seconds",
        "resync-seconds",
        "collect-interval",
        "suppress-interval",
    ] {
        assert!(names.contains(&expected), "--{expected} not found in {names:?}");
    }
    for (template, name, dotted) in &flags {
        let value = lookup(&values, dotted).and_then(scalar).unwrap_or_else(|| {
            panic!("{template}: --{name} refers to .Values{dotted}, which is not a scalar")
        });
        if let Err(err) = parse_interval(&value) {
            panic!("{template}: --{name}={value} (.Values{dotted}): {err}");
        }
    }
}

#[test]
fn go_forms_users_set_through_the_chart_parse() {
    // `helm install --set webhook.certs.syncInterval=1m30s` once rendered fine and crash-looped.
    for (text, want) in [
        ("1m30s", Duration::from_secs(90)),
        ("500ms", Duration::from_millis(500)),
        ("2h", Duration::from_secs(7200)),
        ("1.5h", Duration::from_secs(5400)),
    ] {
        assert_eq!(parse_interval(text), Ok(want), "{text}");
    }
}
