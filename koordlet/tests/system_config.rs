//! Tier 2: system_config on a fake `/proc/sys` and `/sys` tree: writes with upstream's
//! formulas, the node's values remembered across a restart and restored on removal.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::Path;

use koord_api::nodeslo::SystemStrategy;
use koordlet::system_config::{ORIGINALS_FILE, SystemConfig, SystemFiles};
use koordlet_core::strategies::system_config::SystemKnob;
use serde_json::json;

const GI: u64 = 1 << 30;

fn fake_node(dir: &Path) -> SystemFiles {
    let files = SystemFiles {
        proc_sys: dir.join("proc/sys"),
        sys: dir.join("sys"),
    };
    for (knob, value) in [
        (SystemKnob::MinFreeKbytes, "67584"),
        (SystemKnob::WatermarkScaleFactor, "10"),
        (SystemKnob::MemcgReapBackground, "0"),
    ] {
        let path = files.path(knob);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, format!("{value}\n")).unwrap();
    }
    files
}

fn read(files: &SystemFiles, knob: SystemKnob) -> String {
    std::fs::read_to_string(files.path(knob))
        .unwrap()
        .trim()
        .to_owned()
}

fn strategy(v: serde_json::Value) -> SystemStrategy {
    serde_json::from_value(v).unwrap()
}

#[test]
fn writes_survive_a_restart_and_are_restored_on_removal() {
    let dir = tempfile::tempdir().unwrap();
    let files = fake_node(dir.path());
    let state = dir.path().join("state");
    let s = strategy(json!({"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150,
                            "memcgReapBackGround": 1, "schedIdleSaverWmark": 5}));
    let mut agent = SystemConfig::open(files.clone(), &state, false).unwrap();
    let plan = agent.round(Some(&s), 64 * GI);
    // 64 GiB: 67108864 KiB × 100 / 10000.
    assert_eq!(read(&files, SystemKnob::MinFreeKbytes), "671088");
    assert_eq!(read(&files, SystemKnob::WatermarkScaleFactor), "150");
    assert_eq!(read(&files, SystemKnob::MemcgReapBackground), "1");
    // The Anolis idle-saver sysctl is absent here: reported, not created.
    assert!(!files.path(SystemKnob::SchedIdleSaverWmark).exists());
    assert!(
        plan.skipped
            .iter()
            .any(|k| k.knob == "kernel.sched_idle_saver_wmark")
    );
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state.join(ORIGINALS_FILE)).unwrap()).unwrap();
    assert_eq!(
        saved,
        json!({"vm.min_free_kbytes": 67584, "vm.watermark_scale_factor": 10,
               "memcg_reaper.reap_background": 0})
    );
    // Steady state: nothing more to write.
    assert!(agent.round(Some(&s), 64 * GI).writes.is_empty());
    drop(agent);

    // A restart, then the strategy loses one field, then goes away entirely.
    let mut agent = SystemConfig::open(files.clone(), &state, false).unwrap();
    assert_eq!(agent.originals().len(), 3);
    let fewer = strategy(json!({"minFreeKbytesFactor": 100, "memcgReapBackGround": 1}));
    let plan = agent.round(Some(&fewer), 64 * GI);
    assert_eq!(plan.writes.len(), 1);
    assert_eq!(read(&files, SystemKnob::WatermarkScaleFactor), "10");
    assert_eq!(agent.originals().len(), 2);
    agent.round(None, 64 * GI);
    assert_eq!(read(&files, SystemKnob::MinFreeKbytes), "67584");
    assert_eq!(read(&files, SystemKnob::MemcgReapBackground), "0");
    assert!(agent.originals().is_empty());
    assert_eq!(
        std::fs::read_to_string(state.join(ORIGINALS_FILE))
            .unwrap()
            .trim(),
        "{}"
    );
}

#[test]
fn dry_run_writes_nothing_and_a_corrupt_state_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let files = fake_node(dir.path());
    let state = dir.path().join("state");
    let mut agent = SystemConfig::open(files.clone(), &state, true).unwrap();
    let plan = agent.round(Some(&strategy(json!({"watermarkScaleFactor": 150}))), 64 * GI);
    assert_eq!(plan.writes.len(), 1);
    assert_eq!(read(&files, SystemKnob::WatermarkScaleFactor), "10");
    assert!(!state.join(ORIGINALS_FILE).exists());

    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join(ORIGINALS_FILE), "not json").unwrap();
    let err = SystemConfig::open(files, &state, false).unwrap_err();
    assert!(err.to_string().contains(ORIGINALS_FILE), "{err}");
}
