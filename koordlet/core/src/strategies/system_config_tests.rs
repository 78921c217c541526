use serde_json::json;

use super::*;

const GI: u64 = 1 << 30;

fn strategy(v: serde_json::Value) -> SystemStrategy {
    serde_json::from_value(v).unwrap()
}

fn current(pairs: &[(SystemKnob, i64)]) -> BTreeMap<SystemKnob, i64> {
    pairs.iter().copied().collect()
}

fn run(
    s: Option<&SystemStrategy>,
    now: &BTreeMap<SystemKnob, i64>,
    originals: &BTreeMap<SystemKnob, i64>,
) -> SystemConfigPlan {
    decide(&SystemConfigInput {
        strategy: s,
        memory_capacity_bytes: 64 * GI,
        current: now,
        originals,
    })
}

#[test]
fn upstream_formulas_and_ranges() {
    // 64 GiB = 67108864 KiB; factor 100 → 671088 KiB.
    // (field json, knob, expected write or skip)
    let cases: [(serde_json::Value, SystemKnob, Option<i64>); 10] = [
        (
            json!({"minFreeKbytesFactor": 100}),
            SystemKnob::MinFreeKbytes,
            Some(671_088),
        ),
        // 64Gi × 1 / 10000 = 6710 KiB < 10240: not written.
        (json!({"minFreeKbytesFactor": 1}), SystemKnob::MinFreeKbytes, None),
        // 64Gi × 2000 / 10000 = 13421772 KiB > 10 GiB: not written.
        (
            json!({"minFreeKbytesFactor": 2000}),
            SystemKnob::MinFreeKbytes,
            None,
        ),
        (json!({"minFreeKbytesFactor": 0}), SystemKnob::MinFreeKbytes, None),
        (
            json!({"watermarkScaleFactor": 150}),
            SystemKnob::WatermarkScaleFactor,
            Some(150),
        ),
        (
            json!({"watermarkScaleFactor": 5}),
            SystemKnob::WatermarkScaleFactor,
            None,
        ),
        (
            json!({"memcgReapBackGround": 1}),
            SystemKnob::MemcgReapBackground,
            Some(1),
        ),
        (
            json!({"memcgReapBackGround": 2}),
            SystemKnob::MemcgReapBackground,
            None,
        ),
        (
            json!({"schedIdleSaverWmark": 3}),
            SystemKnob::SchedIdleSaverWmark,
            Some(3),
        ),
        (
            json!({"pageCacheLimitEnabled": 1}),
            SystemKnob::PageCacheLimitEnabled,
            Some(1),
        ),
    ];
    let now = current(&SystemKnob::ALL.map(|k| (k, 7)));
    for (field, knob, expected) in cases {
        let s = strategy(field.clone());
        let plan = run(Some(&s), &now, &BTreeMap::new());
        let write = plan.writes.iter().find(|w| w.knob == knob);
        assert_eq!(write.map(|w| w.value), expected, "{field}");
        if expected.is_none() {
            assert!(
                plan.skipped.iter().any(|k| k.knob == knob.name()),
                "{field}: {plan:?}"
            );
        } else {
            assert_eq!(plan.remember.get(&knob), Some(&7), "{field}");
        }
        assert_eq!(plan.writes.len(), usize::from(expected.is_some()), "{field}");
    }
}

#[test]
fn first_write_remembers_then_removal_restores() {
    let s = strategy(json!({"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150}));
    let mut now = current(&[
        (SystemKnob::MinFreeKbytes, 67_584),
        (SystemKnob::WatermarkScaleFactor, 10),
    ]);
    let mut originals = BTreeMap::new();
    let plan = run(Some(&s), &now, &originals);
    assert_eq!(plan.remember, now);
    assert_eq!(plan.writes.len(), 2);
    // The agent remembers, writes; next round: nothing to do, nothing new to remember.
    originals.extend(plan.remember.clone());
    for w in &plan.writes {
        now.insert(w.knob, w.value);
    }
    let again = run(Some(&s), &now, &originals);
    assert!(again.writes.is_empty() && again.remember.is_empty(), "{again:?}");
    // One field removed: only its knob goes back.
    let fewer = strategy(json!({"minFreeKbytesFactor": 100}));
    let plan = run(Some(&fewer), &now, &originals);
    assert_eq!(
        plan.writes,
        [SystemWrite {
            knob: SystemKnob::WatermarkScaleFactor,
            value: 10,
            current: 150,
            restore: true,
        }]
    );
    // The whole strategy removed (or the gate off): everything remembered goes back.
    let plan = run(None, &now, &originals);
    let restored: Vec<_> = plan.writes.iter().map(|w| (w.knob, w.value, w.restore)).collect();
    assert_eq!(
        restored,
        [
            (SystemKnob::MinFreeKbytes, 67_584, true),
            (SystemKnob::WatermarkScaleFactor, 10, true),
        ]
    );
}

#[test]
fn absent_files_and_sched_features_are_reported() {
    let s = strategy(json!({"memcgReapBackGround": 1, "schedFeatures": {"ID_IDLE_AVG": true}}));
    let plan = run(Some(&s), &BTreeMap::new(), &BTreeMap::new());
    assert!(plan.writes.is_empty());
    let knobs: Vec<_> = plan.skipped.iter().map(|k| k.knob.as_str()).collect();
    assert_eq!(knobs, ["schedFeatures", "memcg_reaper.reap_background"]);
    assert!(plan.skipped[1].reason.contains("no such file"));
}

#[test]
fn knob_names_round_trip() {
    for k in SystemKnob::ALL {
        assert_eq!(SystemKnob::from_name(k.name()), Some(k));
        assert_eq!(serde_json::to_value(k).unwrap(), k.name());
    }
}
