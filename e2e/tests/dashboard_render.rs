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

#[test]
fn every_dashboard_panel_draws_series_from_the_recording() {
    let repo = repo_root();
    let mut cmd = Command::new("bash");
    cmd.arg(repo.join("scripts/dashboard.sh")).arg("check");
    if let Ok(recording) = std::env::var("KOORD_DASHBOARD_RECORDING") {
        cmd.arg("--recording").arg(recording);
    }
    let out = cmd.output().expect("run scripts/dashboard.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(3) => {
            let reason = stderr
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("skipped: "))
                .unwrap_or_else(|| stderr.trim());
            println!("skipped: {reason}");
            return;
        }
        Some(0) => {}
        code => {
            panic!("scripts/dashboard.sh check exited {code:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}")
        }
    }

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
