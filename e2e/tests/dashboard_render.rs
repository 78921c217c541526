//! The chart's Grafana dashboard (`charts/koordinator/dashboards/koordinator.json`) rendered in a
//! real browser against a real Prometheus: `scripts/dashboard.sh check` imports the recorded scrape
//! (`charts/koordinator/dashboards/preview/recording.om.gz`, or `$KOORD_DASHBOARD_RECORDING`)
//! into Prometheus, opens the previewer in headless Chromium and reports the series each panel
//! drew. Every panel that is not a row must have drawn at least one series, without a query error.
//!
//! Needs Prometheus, Chromium and uPlot (`scripts/install-dashboard-tools.sh`, which the script
//! runs; cached after the first run). Where they cannot be had, the script exits 3 and the test
//! prints `skipped: <reason>` and passes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf()
}

/// `panel "<title>": <n> series[ (error: ...)]` lines of the script's output, by title.
fn reported_series(stdout: &str) -> BTreeMap<String, usize> {
    stdout
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("panel \"")?;
            let (title, count) = rest.rsplit_once("\": ")?;
            let n = count.split_whitespace().next()?.parse().ok()?;
            Some((title.to_string(), n))
        })
        .collect()
}

/// Runs `scripts/dashboard.sh check` with `args`; `None` (after printing `skipped:`) when the
/// tools cannot be had, else the exit code, stdout and stderr.
fn check(args: &[&std::ffi::OsStr]) -> Option<(Option<i32>, String, String)> {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts/dashboard.sh"))
        .arg("check")
        .args(args);
    if let Ok(recording) = std::env::var("KOORD_DASHBOARD_RECORDING") {
        cmd.arg("--recording").arg(recording);
    }
    let out = cmd.output().expect("run scripts/dashboard.sh");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.code() == Some(3) {
        let reason = stderr
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("skipped: "))
            .unwrap_or_else(|| stderr.trim());
        println!("skipped: {reason}");
        return None;
    }
    Some((out.status.code(), stdout, stderr))
}

#[test]
fn every_dashboard_panel_draws_series_from_the_recording() {
    let repo = repo_root();
    let Some((code, stdout, stderr)) = check(&[]) else {
        return;
    };
    assert_eq!(
        code,
        Some(0),
        "scripts/dashboard.sh check failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );

    let path = repo.join("charts/koordinator/dashboards/koordinator.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read koordinator.json"))
            .expect("koordinator.json is JSON");
    let panels = dashboard["panels"].as_array().expect("dashboard has panels");
    let reported = reported_series(&stdout);
    let mut checked = 0;
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let title = panel["title"].as_str().expect("panel has a title");
        match reported.get(title) {
            Some(&n) if n >= 1 => checked += 1,
            Some(_) => panic!("panel {title:?} drew no series\n{stdout}\n{stderr}"),
            None => panic!("panel {title:?} missing from the report\n{stdout}\n{stderr}"),
        }
    }
    assert!(checked > 0, "the dashboard has no panels to check");
    print!("{stdout}");
}

/// As in Grafana, a failing query does not blank its panel: the other queries are drawn, and the
/// error is reported (so `check` fails); a panel whose only query fails reports the error.
#[test]
fn a_failing_query_keeps_the_panels_other_queries_and_is_reported() {
    let panel = |id: u32, title: &str, exprs: &[&str]| {
        serde_json::json!({
            "id": id, "type": "timeseries", "title": title,
            "gridPos": {"x": 0, "y": id * 8, "w": 24, "h": 8},
            "targets": exprs.iter().map(|e| serde_json::json!({"expr": e, "legendFormat": "{{pod}}"})).collect::<Vec<_>>(),
        })
    };
    let dashboard = serde_json::json!({
        "title": "previewer errors",
        "templating": {"list": []},
        "panels": [
            panel(0, "good and broken", &["up", "rate(up["]),
            panel(1, "only broken", &["sum by (pod) (up"]),
            panel(2, "only good", &["up"]),
        ],
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("errors.json");
    std::fs::write(&path, dashboard.to_string()).expect("write the dashboard");
    let Some((code, stdout, stderr)) = check(&["--dashboard".as_ref(), path.as_os_str()]) else {
        return;
    };
    assert_eq!(code, Some(1), "a query error fails the check\n{stdout}\n{stderr}");
    let line = |title: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("panel \"{title}\": ")))
            .unwrap_or_else(|| panic!("no line for {title:?}\n{stdout}\n{stderr}"))
            .to_string()
    };
    let reported = reported_series(&stdout);
    let good_and_broken = line("good and broken");
    assert!(reported["good and broken"] >= 1, "{good_and_broken}");
    assert!(good_and_broken.contains("(error: "), "{good_and_broken}");
    let only_broken = line("only broken");
    assert_eq!(reported["only broken"], 0, "{only_broken}");
    assert!(only_broken.contains("(error: "), "{only_broken}");
    let only_good = line("only good");
    assert!(
        reported["only good"] >= 1 && !only_good.contains("error"),
        "{only_good}"
    );
    assert!(
        stderr.contains("panels without data or with a query error: \"good and broken\", \"only broken\""),
        "{stderr}"
    );
}
