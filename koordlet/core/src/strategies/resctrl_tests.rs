#![allow(clippy::unwrap_used)]
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::*;
use crate::resctrl::Schemata;

fn info(cbm_mask: u64, min_cbm_bits: u32) -> CacheInfo {
    CacheInfo {
        cbm_mask,
        min_cbm_bits,
    }
}

fn facts(root: &str, vendor: CpuVendor) -> ResctrlFacts {
    ResctrlFacts {
        root: Schemata::parse(root).unwrap(),
        l3: Some(info(0x7ff, 1)),
        mb: Some(MbInfo {
            min_bandwidth: 10,
            bandwidth_gran: 10,
        }),
        vendor,
    }
}

fn slo(yaml: serde_json::Value) -> NodeSLOSpec {
    serde_json::from_value(serde_json::json!({ "resourceQOSStrategy": yaml })).unwrap()
}

fn pod(uid: &str, qos: &str, phase: &str) -> PodMeta {
    let value = serde_json::json!({
        "metadata": {"name": format!("p-{uid}"), "namespace": "ns", "uid": uid,
                     "labels": {"koordinator.sh/qosClass": qos}},
        "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": phase}
    });
    PodMeta::new(Arc::new(serde_json::from_value::<Pod>(value).unwrap())).unwrap()
}

fn values(plan: &ResctrlPlan, group: ResctrlGroup) -> Vec<String> {
    plan.writes
        .iter()
        .filter(|w| w.group == group)
        .map(|w| w.line.to_string())
        .collect()
}

#[test]
fn resctrl_mask_boundaries() {
    // 11 ways (Intel's usual 0x7ff).
    let i = info(0x7ff, 1);
    assert_eq!(cat_mask(i, 0, 100), Ok(0x7ff));
    assert_eq!(cat_mask(i, 0, 30), Ok(0xf)); // ceil(3.3) = 4 ways
    assert_eq!(cat_mask(i, 30, 100), Ok(0x7f0));
    // 0 % of the ways would be no way at all: widened to min_cbm_bits at the start.
    assert_eq!(cat_mask(i, 0, 1), Ok(0x1));
    assert_eq!(cat_mask(info(0x7ff, 2), 0, 1), Ok(0x3));
    // A narrow range at the top rounds to nothing and widens downwards.
    assert_eq!(cat_mask(i, 96, 100), Ok(0x400));
    assert_eq!(cat_mask(info(0x7ff, 2), 96, 100), Ok(0x600));
    // start = end, reversed, outside 0-100: refused.
    for (s, e) in [(30, 30), (0, 0), (100, 100), (50, 40), (-1, 50), (0, 101)] {
        assert_eq!(
            cat_mask(i, s, e),
            Err(MaskError::Range { start: s, end: e }),
            "{s}-{e}"
        );
    }
    // Non-contiguous or empty cbm_mask: refused; 64 ways work.
    for bad in [0, 0x7fe, 0x5, 0xf0] {
        assert_eq!(cat_mask(info(bad, 1), 0, 100), Err(MaskError::NonContiguous(bad)));
    }
    assert_eq!(cat_mask(info(u64::MAX, 1), 0, 100), Ok(u64::MAX));
    assert_eq!(cat_mask(info(u64::MAX, 1), 50, 100), Ok(0xffff_ffff_0000_0000));
    assert_eq!(
        cat_mask(info(0x1, 2), 0, 100),
        Err(MaskError::TooFewWays { ways: 1, min: 2 })
    );
    // 20 ways: every result is contiguous and at least min_cbm_bits wide.
    for s in 0..100 {
        for e in (s + 1)..=100 {
            let m = cat_mask(info(0xfffff, 2), s, e).unwrap();
            assert!(m.count_ones() >= 2 && (m >> m.trailing_zeros()) & ((m >> m.trailing_zeros()) + 1) == 0);
            assert_eq!(m & !0xfffff, 0);
        }
    }
}

#[test]
fn resctrl_mb_units() {
    let intel = MbUnit::Percent { min: 10, gran: 10 };
    assert_eq!(intel.value(100), Some(100));
    assert_eq!(intel.value(85), Some(90));
    assert_eq!(intel.value(0), Some(10));
    assert_eq!(intel.value(-5), Some(10));
    assert_eq!(MbUnit::Percent { min: 10, gran: 1 }.value(33), Some(33));
    let amd = MbUnit::EighthGbps { max: 2048 };
    assert_eq!(amd.value(100), Some(2048));
    assert_eq!(amd.value(50), Some(80));
    assert_eq!(amd.value(0), Some(1));
    assert_eq!(MbUnit::Mibps.value(50), None);
    // The unit follows the vendor, else the root's values.
    let mb = MbInfo {
        min_bandwidth: 10,
        bandwidth_gran: 10,
    };
    let intel_root = facts("L3:0=7ff\nMB:0=100\n", CpuVendor::Unknown);
    assert_eq!(MbUnit::of(&intel_root, mb), intel);
    let amd_root = facts("L3:0=ffff\nMB:0=2048\n", CpuVendor::Unknown);
    assert_eq!(MbUnit::of(&amd_root, mb), amd);
    let amd_vendor = facts("L3:0=ffff\nMB:0=100\n", CpuVendor::Amd);
    assert_eq!(MbUnit::of(&amd_vendor, mb), MbUnit::EighthGbps { max: 100 });
    let sc = facts("MB:0=4294967295\n", CpuVendor::Intel);
    assert_eq!(MbUnit::of(&sc, mb), MbUnit::Mibps);
}

#[test]
fn resctrl_defaults_disabled_classes_get_everything() {
    let f = facts("    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n", CpuVendor::Intel);
    let plan = decide(&NodeSLOSpec::default(), &f, &[pod("a", "BE", "Running")]);
    for g in ResctrlGroup::ALL {
        assert_eq!(values(&plan, g), ["L3:0=7ff;1=7ff", "MB:0=100;1=100"]);
    }
    assert!(plan.pods.is_empty(), "no class enabled: no task moves");
}

#[test]
fn resctrl_be_enabled_gets_the_recommended_30_percent() {
    let f = facts("    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n", CpuVendor::Intel);
    let s = slo(serde_json::json!({"beClass": {"resctrlQOS": {"enable": true, "mbaPercent": 55}}}));
    let pods = [
        pod("a", "BE", "Running"),
        pod("b", "LS", "Running"),
        pod("c", "BE", "Succeeded"),
        pod("d", "LSE", "Running"),
    ];
    let plan = decide(&s, &f, &pods);
    assert_eq!(values(&plan, ResctrlGroup::Be), ["L3:0=f;1=f", "MB:0=60;1=60"]);
    assert_eq!(
        values(&plan, ResctrlGroup::Ls),
        ["L3:0=7ff;1=7ff", "MB:0=100;1=100"]
    );
    let moved: Vec<_> = plan.pods.iter().map(|p| (p.uid.as_str(), p.group)).collect();
    assert_eq!(moved, [("a", ResctrlGroup::Be)]);
    // LSE joins LSR once LSR is enabled.
    let s = slo(serde_json::json!({
        "lsrClass": {"resctrlQOS": {"enable": true, "catRangeStartPercent": 50}},
        "beClass": {"resctrlQOS": {"enable": true, "catRangeStartPercent": 0, "catRangeEndPercent": 50}}
    }));
    let plan = decide(&s, &f, &pods);
    assert_eq!(
        values(&plan, ResctrlGroup::Lsr),
        ["L3:0=7c0;1=7c0", "MB:0=100;1=100"]
    );
    assert_eq!(values(&plan, ResctrlGroup::Be)[0], "L3:0=3f;1=3f");
    let moved: Vec<_> = plan.pods.iter().map(|p| (p.uid.as_str(), p.group)).collect();
    assert_eq!(moved, [("a", ResctrlGroup::Be), ("d", ResctrlGroup::Lsr)]);
}

#[test]
fn resctrl_sparse_ids_cdp_and_bad_range() {
    let f = facts(
        "L3CODE:0=7ff;2=7ff;6=7ff\nL3DATA:0=7ff;2=7ff;6=7ff\n    MB:0=100;2=100;6=100\n",
        CpuVendor::Intel,
    );
    let s = slo(serde_json::json!({"beClass": {"resctrlQOS": {
        "enable": true, "catRangeStartPercent": 40, "catRangeEndPercent": 40}}}));
    let plan = decide(&s, &f, &[]);
    assert!(plan.cdp);
    assert_eq!(
        values(&plan, ResctrlGroup::Ls),
        [
            "L3CODE:0=7ff;2=7ff;6=7ff",
            "L3DATA:0=7ff;2=7ff;6=7ff",
            "MB:0=100;2=100;6=100"
        ]
    );
    // BE's empty range: no cache line, an error, bandwidth still written.
    assert_eq!(values(&plan, ResctrlGroup::Be), ["MB:0=100;2=100;6=100"]);
    let be = &plan.groups[2];
    assert_eq!(be.errors.len(), 1);
    assert!(be.errors[0].contains("40-40"), "{:?}", be.errors);
}

#[test]
fn resctrl_amd_and_cat_only_nodes() {
    let f = ResctrlFacts {
        mb: Some(MbInfo {
            min_bandwidth: 0,
            bandwidth_gran: 1,
        }),
        l3: Some(info(0xffff, 1)),
        ..facts(
            "MB:0=2048;1=2048;2=2048;3=2048\nL3:0=ffff;1=ffff;2=ffff;3=ffff\n",
            CpuVendor::Amd,
        )
    };
    let s = slo(serde_json::json!({"beClass": {"resctrlQOS": {"enable": true, "mbaPercent": 50}}}));
    let plan = decide(&s, &f, &[]);
    assert_eq!(
        values(&plan, ResctrlGroup::Be),
        ["L3:0=1f;1=1f;2=1f;3=1f", "MB:0=80;1=80;2=80;3=80"]
    );
    assert_eq!(
        values(&plan, ResctrlGroup::Lsr)[1],
        "MB:0=2048;1=2048;2=2048;3=2048"
    );
    // CAT only: no MB lines, no MB errors.
    let cat = ResctrlFacts {
        mb: None,
        ..facts("L3:0=7ff\n", CpuVendor::Intel)
    };
    let plan = decide(&s, &cat, &[]);
    assert_eq!(values(&plan, ResctrlGroup::Be), ["L3:0=f"]);
    assert!(plan.groups.iter().all(|g| g.errors.is_empty()));
}

#[test]
fn resctrl_tasks_to_move_skips_present_and_duplicates() {
    let in_group: BTreeSet<u32> = [1, 2].into();
    assert_eq!(tasks_to_move(&in_group, [2, 3, 4, 3, 1, 5]), [3, 4, 5]);
    assert!(tasks_to_move(&in_group, [1, 2]).is_empty());
}

#[test]
fn resctrl_classes_follow_each_class_enable() {
    assert_eq!(
        ResctrlClasses::from_slo(&NodeSLOSpec::default()),
        ResctrlClasses::default()
    );
    let s = slo(serde_json::json!({
        "lsClass": {"resctrlQOS": {"enable": true}},
        "beClass": {"resctrlQOS": {"enable": false, "catRangeEndPercent": 20}},
        "lsrClass": {"resctrlQOS": {"catRangeEndPercent": 80}}
    }));
    let classes = ResctrlClasses::from_slo(&s);
    assert_eq!(
        classes,
        ResctrlClasses {
            lsr: false,
            ls: true,
            be: false
        }
    );
    assert_eq!(classes.pod_group(QoSClass::Ls), Some(ResctrlGroup::Ls));
    for qos in [
        QoSClass::Be,
        QoSClass::Lsr,
        QoSClass::Lse,
        QoSClass::System,
        QoSClass::None,
    ] {
        assert_eq!(classes.pod_group(qos), None, "{qos:?}");
    }
    let all = ResctrlClasses {
        lsr: true,
        ls: true,
        be: true,
    };
    assert_eq!(all.pod_group(QoSClass::Lse), Some(ResctrlGroup::Lsr));
    assert_eq!(all.pod_group(QoSClass::Be), Some(ResctrlGroup::Be));
    assert_eq!(
        all.pod_group(QoSClass::System),
        None,
        "SYSTEM pods stay where they are"
    );
}

/// The round moves each running pod exactly where `ResctrlClasses::pod_group` says (the group
/// the runtime hook names at container creation), for every combination of enabled classes.
#[test]
fn resctrl_round_moves_pods_where_pod_group_says() {
    let f = facts("    L3:0=7ff;1=7ff\n", CpuVendor::Intel);
    let pods: Vec<_> = ["LSE", "LSR", "LS", "BE", "SYSTEM", ""]
        .iter()
        .map(|q| pod(&format!("uid-{q}"), q, "Running"))
        .collect();
    for mask in 0..8u8 {
        let enable = |bit: u8| serde_json::json!({"resctrlQOS": {"enable": mask & bit != 0}});
        let s = slo(serde_json::json!({"lsrClass": enable(1), "lsClass": enable(2), "beClass": enable(4)}));
        let classes = ResctrlClasses::from_slo(&s);
        let plan = decide(&s, &f, &pods);
        let moved: Vec<_> = plan.pods.iter().map(|p| (p.uid.clone(), p.group)).collect();
        let want: Vec<_> = pods
            .iter()
            .filter_map(|p| Some((p.uid.as_str().to_owned(), classes.pod_group(p.qos)?)))
            .collect();
        assert_eq!(moved, want, "mask {mask:03b}");
        assert_eq!(
            plan.groups.iter().filter(|g| g.config.enable).count(),
            mask.count_ones() as usize
        );
    }
}
