//! The playground's colocation story, played for real on the embedded cluster (real processes
//! in real cgroups where the machine allows, the fake tree otherwise): each act must be seen in
//! the cluster, the plain output must tell it line by line, and the terminal view must show the
//! node table.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use std::time::Duration;

use koord_e2e::story::summary::{
    BATCH_FOLLOWS_LS, BATCH_PUBLISHED, BE_ADMITTED, BE_EVICTED, BE_SUPPRESSED, LS_BURST,
};
use koord_e2e::story::view::lines::LinePrinter;
use koord_e2e::story::view::tui::{COLUMNS, draw};
use koord_e2e::story::{Outcome, StoryError, StoryOptions, StoryState, View, play};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use tokio_util::sync::CancellationToken;

/// The plain printer, keeping the last state for the terminal view.
struct Recorder {
    lines: LinePrinter<Vec<u8>>,
    last: Option<StoryState>,
}

impl View for Recorder {
    fn update(&mut self, state: &StoryState) -> Result<(), StoryError> {
        self.last = Some(state.clone());
        self.lines.update(state)
    }
}

fn screen(state: &StoryState, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| draw(frame, state)).unwrap();
    let buffer = terminal.backend().buffer().clone();
    let mut text = String::new();
    for y in 0..buffer.area.height {
        for x in 0..buffer.area.width {
            text.push_str(buffer[(x, y)].symbol());
        }
        text.push('\n');
    }
    text
}

fn host_saturated() -> Option<String> {
    let load: f64 = std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let cpus = std::thread::available_parallelism().map_or(2, std::num::NonZero::get) as f64;
    (load > cpus).then(|| format!("host CPU saturated by other processes (load {load:.1} on {cpus} cores)"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_story_plays_every_act_and_tells_it() {
    let _cpu = common::cpu_lock().await;
    common::init_logs();
    let options = StoryOptions {
        duration: Duration::from_secs(40),
        nodes: 1,
        fake_cgroups: false,
        crds: koord_e2e::setup::crds_dir(),
        kubeconfig: None,
    };
    let mut recorder = Recorder {
        lines: LinePrinter::new(Vec::new()),
        last: None,
    };
    let summary = play(&options, &mut recorder, CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("the story failed: {e}"));
    let output = String::from_utf8(recorder.lines.into_inner()).unwrap();
    println!("{output}\n{summary}");

    // Each act happened in the cluster.
    for what in [BATCH_PUBLISHED, BE_ADMITTED] {
        assert!(
            matches!(summary.check(what), Some(Outcome::Seen(_))),
            "{what}:\n{summary}"
        );
    }
    match summary.check(LS_BURST) {
        Some(Outcome::Seen(_)) => {}
        Some(Outcome::Skipped(reason)) => println!("skipped: LS burst: {reason}"),
        other => panic!("LS burst: {other:?}\n{summary}"),
    }
    for what in [BATCH_FOLLOWS_LS, BE_SUPPRESSED] {
        match summary.check(what) {
            Some(Outcome::Seen(_)) => {}
            other => match host_saturated() {
                Some(reason) => println!("skipped: {what} not asserted: {reason} ({other:?})"),
                None => panic!("{what}: {other:?}\n{summary}"),
            },
        }
    }
    match summary.check(BE_EVICTED) {
        Some(Outcome::Seen(detail)) => {
            assert!(detail.contains("evictPodSuccess"), "{detail}");
            assert!(detail.contains("EvictPodByNodeMemoryUsage"), "{detail}");
        }
        Some(Outcome::Skipped(reason)) => println!("skipped: memory act: {reason}"),
        // Filling the cache in the act's few seconds needs CPU; on a saturated host the pod may
        // not reach the threshold before the act ends.
        other => match host_saturated() {
            Some(reason) => println!("skipped: memory act not asserted: {reason} ({other:?})"),
            None => panic!("eviction: {other:?}\n{summary}"),
        },
    }
    println!("pods ran as {}", summary.cgroups);

    // The plain output tells the story line by line.
    for expected in [
        "seed 001 slo-controller-config applied",
        "seed 000 cpu-burst-config applied",
        "ClusterColocationProfile colocation-profile-example applied",
        "admitted by the webhook: priority 5000, batch-cpu 250m",
        "running on sim-node-1 (batch resources)",
        "sim-node-1: batch-cpu none ->",
        "LS load rises",
        "LS load falls",
        "the story ends",
    ] {
        assert!(output.contains(expected), "missing {expected:?} in:\n{output}");
    }
    assert!(
        output.lines().all(|l| l.starts_with('[') && l.contains("s] ")),
        "{output}"
    );

    // The terminal view shows the node table with the figures of the last sample.
    let state = recorder.last.expect("a state");
    let text = screen(&state, 160, 48);
    for column in COLUMNS {
        assert!(text.contains(column), "missing column {column:?}:\n{text}");
    }
    assert!(text.contains("sim-node-1 batch-cpu"), "sparkline title:\n{text}");
    assert!(text.contains("events"), "{text}");
}

#[test]
fn the_terminal_view_renders_a_row_per_node() {
    let mut state = StoryState::new(
        &["sim-node-1".into(), "sim-node-2".into()],
        Duration::from_secs(60),
    );
    state.cgroups = "real processes in real cgroups (v1)".into();
    state.log("seed 001 slo-controller-config applied");
    let sample = |batch: i64| koord_e2e::story::observe::NodeSample {
        batch_cpu_milli: Some(batch),
        batch_memory_bytes: Some(3 << 30),
        ls_cpu_milli: Some(800),
        be_cpu_milli: Some(450),
        be_quota_us: Some(240_000),
        be_cpuset: Some("0-1".into()),
        ls_burst_us: Some(100_000),
        ..Default::default()
    };
    state.record(vec![
        ("sim-node-1".into(), sample(3100)),
        ("sim-node-2".into(), sample(5000)),
    ]);
    state.record(vec![
        ("sim-node-1".into(), sample(2200)),
        ("sim-node-2".into(), sample(5000)),
    ]);
    let text = screen(&state, 140, 30);
    assert!(text.contains("sim-node-1"), "{text}");
    assert!(text.contains("2.20"), "batch-cpu of node 1:\n{text}");
    assert!(text.contains("2.40 cores"), "BE quota:\n{text}");
    assert!(
        text.contains("batch-cpu 3.10 -> 2.20 cores"),
        "event log:\n{text}"
    );
}
