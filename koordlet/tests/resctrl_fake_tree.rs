//! resctrl on fake resctrl trees built in temp dirs (this machine's CPU has no RDT): support
//! detection, schemata writes for Intel single and dual socket, sparse cache ids, AMD and CDP,
//! task moves into the class groups (new tasks picked up every round), agreement with the runtime
//! hook's resctrl class, and `koordlet plan --resctrl-root`. Every test's tree is a `TempDir`,
//! removed on drop even when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use koord_api::NodeSLOSpec;
use koordlet::nri::RdtAvailability;
use koordlet::resctrl_loop::{self, ResctrlReconciler};
use koordlet::states::PodMeta;
use koordlet::system::resctrl::{ResctrlUnsupported, detect};
use koordlet::system::{CgroupDriver, CgroupLayout, CgroupResource, Cgroups, KubeCgroupPaths, SystemRoots};
use koordlet_core::features::FeatureGates;
use koordlet_core::resctrl::ResctrlGroup;
use koordlet_core::strategies::resctrl::ResctrlClasses;
use tempfile::TempDir;

/// A fake host: `proc/cpuinfo`, `proc/mounts`, a resctrl tree and a v1 cgroup tree.
struct FakeHost {
    _dir: TempDir,
    roots: SystemRoots,
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

impl FakeHost {
    /// `root_schemata` as the kernel prints it; `info` files as (relative path, content).
    fn new(vendor: &str, flags: &str, root_schemata: &str, info: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let roots = SystemRoots::under(dir.path());
        write(
            &roots.proc_file("cpuinfo"),
            &format!("processor\t: 0\nvendor_id\t: {vendor}\nflags\t\t: fpu tsc {flags}\n"),
        );
        write(
            &roots.proc_file("mounts"),
            &format!("resctrl {} resctrl rw,relatime 0 0\n", roots.resctrl.display()),
        );
        write(&roots.resctrl.join("schemata"), root_schemata);
        write(&roots.resctrl.join("tasks"), "1\n2\n");
        for (rel, text) in info {
            write(&roots.resctrl.join("info").join(rel), text);
        }
        // What mkdir of a group gives on the kernel: the root's schemata and no task.
        for g in ResctrlGroup::ALL {
            write(&roots.resctrl.join(g.name()).join("schemata"), root_schemata);
            write(&roots.resctrl.join(g.name()).join("tasks"), "");
        }
        FakeHost { _dir: dir, roots }
    }

    fn intel(root_schemata: &str) -> Self {
        Self::new(
            "GenuineIntel",
            "rdt_a cat_l3 mba",
            root_schemata,
            &[
                ("L3/cbm_mask", "7ff\n"),
                ("L3/min_cbm_bits", "1\n"),
                ("MB/min_bandwidth", "10\n"),
                ("MB/bandwidth_gran", "10\n"),
            ],
        )
    }

    fn cgroups(&self) -> Arc<Cgroups> {
        Arc::new(Cgroups::new(&self.roots.cgroup, CgroupLayout::v1()))
    }

    fn reconciler(&self, dry_run: bool) -> ResctrlReconciler {
        let (fs, vendor) = detect(&self.roots, false).unwrap();
        let facts = fs.read_facts(vendor).unwrap();
        ResctrlReconciler::new(
            fs,
            facts,
            self.cgroups(),
            KubeCgroupPaths::new(CgroupDriver::Cgroupfs),
            dry_run,
        )
    }

    fn group_file(&self, g: ResctrlGroup, file: &str) -> String {
        std::fs::read_to_string(self.roots.resctrl.join(g.name()).join(file)).unwrap()
    }
}

/// Log lines written while `f` runs.
fn logs<T>(f: impl FnOnce() -> T) -> (T, String) {
    let capture = common::LogCapture::default();
    let out = capture.run(f);
    (out, capture.text())
}

fn slo(json: serde_json::Value) -> NodeSLOSpec {
    serde_json::from_value(serde_json::json!({ "resourceQOSStrategy": json })).unwrap()
}

fn be_enabled() -> NodeSLOSpec {
    slo(serde_json::json!({"beClass": {"resctrlQOS": {"enable": true, "mbaPercent": 50}}}))
}

/// Writes of one round as `GROUP new-line`.
fn written(r: &resctrl_loop::ResctrlRoundReport) -> Vec<String> {
    r.written.iter().map(|(g, _, new)| format!("{g} {new}")).collect()
}

#[test]
fn resctrl_intel_single_socket() {
    let host = FakeHost::intel("    L3:0=7ff\n    MB:0=100\n");
    let mut r = host.reconciler(false);
    let (report, log) = logs(|| r.round(&be_enabled(), &[]));
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    // One audit line per write.
    let audit: Vec<&str> = log.lines().filter(|l| l.contains("koordlet::audit")).collect();
    assert_eq!(audit.len(), 2, "{log}");
    assert!(
        audit[0].contains("resctrl write") && audit[0].contains("cgroup=resctrl/BE"),
        "{log}"
    );
    assert!(audit[0].contains("L3:0=7ff -> L3:0=f"), "{log}");
    assert!(audit[1].contains("MB:0=100 -> MB:0=50"), "{log}");
    // LSR and LS already hold the whole cache and bandwidth: only BE changes.
    assert_eq!(written(&report), ["BE L3:0=f", "BE MB:0=50"]);
    // One line per write: the fake file holds the last one (the kernel would merge them).
    assert_eq!(host.group_file(ResctrlGroup::Be, "schemata"), "MB:0=50\n");
    // With the kernel's merged view in place, the next round writes nothing.
    write(
        &host.roots.resctrl.join("BE/schemata"),
        "    L3:0=00f\n    MB:0= 50\n",
    );
    assert!(r.round(&be_enabled(), &[]).written.is_empty());
}

#[test]
fn resctrl_intel_dual_socket() {
    let host = FakeHost::intel("    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n");
    let s = slo(serde_json::json!({
        "lsrClass": {"resctrlQOS": {"enable": true, "catRangeStartPercent": 30}},
        "beClass": {"resctrlQOS": {"enable": true, "mbaPercent": 85}}
    }));
    let report = host.reconciler(false).round(&s, &[]);
    assert_eq!(
        written(&report),
        ["LSR L3:0=7f0;1=7f0", "BE L3:0=f;1=f", "BE MB:0=90;1=90"]
    );
}

#[test]
fn resctrl_sparse_cache_ids() {
    let host = FakeHost::new(
        "GenuineIntel",
        "rdt_a cat_l3 mba",
        "    L3:0=fffff;2=fffff;5=fffff\n    MB:0=100;2=100;5=100\n",
        &[
            ("L3/cbm_mask", "fffff\n"),
            ("L3/min_cbm_bits", "2\n"),
            ("MB/min_bandwidth", "10\n"),
            ("MB/bandwidth_gran", "10\n"),
        ],
    );
    let s = slo(serde_json::json!({"beClass": {"resctrlQOS": {
        "enable": true, "catRangeStartPercent": 95, "catRangeEndPercent": 100}}}));
    let report = host.reconciler(false).round(&s, &[]);
    // 95-100 % of 20 ways is one way, widened to min_cbm_bits (2) at the top.
    assert_eq!(written(&report), ["BE L3:0=c0000;2=c0000;5=c0000"]);
}

#[test]
fn resctrl_amd_absolute_bandwidth() {
    let root = "MB:0=2048;1=2048;2=2048;3=2048\nL3:0=ffff;1=ffff;2=ffff;3=ffff\n";
    let host = FakeHost::new(
        "AuthenticAMD",
        "cat_l3 cdp_l3 mba",
        root,
        &[
            ("L3/cbm_mask", "ffff\n"),
            ("L3/min_cbm_bits", "1\n"),
            ("MB/min_bandwidth", "0\n"),
            ("MB/bandwidth_gran", "1\n"),
        ],
    );
    let report = host.reconciler(false).round(&be_enabled(), &[]);
    assert_eq!(
        written(&report),
        ["BE L3:0=1f;1=1f;2=1f;3=1f", "BE MB:0=80;1=80;2=80;3=80"]
    );
    // The kernel pads AMD values on read ("1=  16"): parsed as numbers, no rewrite.
    write(
        &host.roots.resctrl.join("BE/schemata"),
        "MB:0=  80;1=  80;2=  80;3=  80\nL3:0=001f;1=001f;2=001f;3=001f\n",
    );
    assert!(
        host.reconciler(false)
            .round(&be_enabled(), &[])
            .written
            .is_empty()
    );
}

#[test]
fn resctrl_cdp_writes_code_and_data() {
    let root = "L3CODE:0=7ff;1=7ff\nL3DATA:0=7ff;1=7ff\n    MB:0=100;1=100\n";
    let host = FakeHost::new(
        "GenuineIntel",
        "rdt_a cat_l3 cdp_l3 mba",
        root,
        &[
            ("L3CODE/cbm_mask", "7ff\n"),
            ("L3CODE/min_cbm_bits", "1\n"),
            ("L3DATA/cbm_mask", "7ff\n"),
            ("MB/min_bandwidth", "10\n"),
            ("MB/bandwidth_gran", "10\n"),
        ],
    );
    let s = slo(serde_json::json!({"beClass": {"resctrlQOS": {"enable": true}}}));
    let report = host.reconciler(false).round(&s, &[]);
    assert_eq!(written(&report), ["BE L3CODE:0=f;1=f", "BE L3DATA:0=f;1=f"]);
}

#[test]
fn resctrl_missing_support_turns_the_feature_off() {
    let gates = FeatureGates::default();
    let cgroups = |h: &FakeHost| h.cgroups();
    let paths = KubeCgroupPaths::new(CgroupDriver::Cgroupfs);
    // No flag in cpuinfo (like this machine's CPU).
    let host = FakeHost::new(
        "AuthenticAMD",
        "rdtscp",
        "L3:0=ffff\n",
        &[("L3/cbm_mask", "ffff\n")],
    );
    assert!(matches!(
        detect(&host.roots, false),
        Err(ResctrlUnsupported::NoCpuSupport(_))
    ));
    let (started, log) =
        logs(|| resctrl_loop::start(&gates, &host.roots, false, cgroups(&host), paths.clone(), false));
    assert!(matches!(
        resctrl_loop::rdt_availability(&started),
        RdtAvailability::Unsupported(why) if why.contains("cat_l3")
    ));
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.contains("resctrl off") && log.contains("cat_l3"), "{log}");
    // Supported CPU, not mounted, mounting not allowed.
    let host = FakeHost::intel("L3:0=7ff\n");
    write(&host.roots.proc_file("mounts"), "sysfs /sys sysfs rw 0 0\n");
    assert!(matches!(
        detect(&host.roots, false),
        Err(ResctrlUnsupported::NotMounted(_))
    ));
    assert!(resctrl_loop::start(&gates, &host.roots, false, cgroups(&host), paths.clone(), false).is_err());
    // Gate off: off whatever the node has.
    let host = FakeHost::intel("L3:0=7ff\n");
    let off = FeatureGates::parse("RdtResctrl=false").unwrap();
    let started = resctrl_loop::start(&off, &host.roots, false, cgroups(&host), paths.clone(), false);
    assert_eq!(resctrl_loop::rdt_availability(&started), RdtAvailability::GateOff);
    let started = resctrl_loop::start(&gates, &host.roots, false, cgroups(&host), paths.clone(), false);
    assert_eq!(
        resctrl_loop::rdt_availability(&started),
        RdtAvailability::Mounted(host.roots.resctrl.clone())
    );
    // Dry-run: the round moves no task, so the hooks name no class.
    let started = resctrl_loop::start(&gates, &host.roots, false, cgroups(&host), paths, true);
    assert_eq!(resctrl_loop::rdt_availability(&started), RdtAvailability::DryRun);
    // Mounted but no schemata: off, with the file named.
    let host = FakeHost::intel("L3:0=7ff\n");
    std::fs::remove_file(host.roots.resctrl.join("schemata")).unwrap();
    let e = detect(&host.roots, false).unwrap_err().to_string();
    assert!(e.contains("schemata"), "{e}");
}

fn pod(uid: &str, qos: &str, kube_qos: &str, container_id: &str) -> PodMeta {
    let value = serde_json::json!({
        "metadata": {"name": format!("p-{uid}"), "namespace": "ns", "uid": uid,
                     "labels": {"koordinator.sh/qosClass": qos}},
        "spec": {"containers": [{"name": "a"}]},
        "status": {"qosClass": kube_qos, "phase": "Running", "containerStatuses": [
            {"name": "a", "containerID": format!("containerd://{container_id}"), "image": "",
             "imageID": "", "ready": true, "restartCount": 0}]}
    });
    PodMeta::new(Arc::new(serde_json::from_value::<Pod>(value).unwrap())).unwrap()
}

/// The v1 cpu directory of a pod's container (or of the pod with `None`).
fn cpu_dir(host: &FakeHost, p: &PodMeta, container: Option<&str>) -> PathBuf {
    let paths = KubeCgroupPaths::new(CgroupDriver::Cgroupfs);
    let dir = host
        .cgroups()
        .dir_path(CgroupResource::CpuShares, &p.cgroup_dir(&paths))
        .unwrap();
    container.map_or(dir.clone(), |c| dir.join(c))
}

fn tasks_of(text: &str) -> Vec<u32> {
    let mut t: Vec<u32> = text.split_whitespace().map(|t| t.parse().unwrap()).collect();
    t.sort_unstable();
    t
}

#[test]
fn resctrl_tasks_moved_and_new_tasks_picked_up() {
    let host = FakeHost::intel("    L3:0=7ff\n    MB:0=100\n");
    let be = pod("be-1", "BE", "BestEffort", "c1");
    let ls = pod("ls-1", "LS", "Burstable", "c2");
    write(&cpu_dir(&host, &be, Some("c1")).join("tasks"), "100\n101\n");
    write(&cpu_dir(&host, &be, Some("sandbox")).join("tasks"), "90\n");
    write(&cpu_dir(&host, &be, None).join("tasks"), "");
    write(&cpu_dir(&host, &ls, Some("c2")).join("tasks"), "300\n");
    // A BE pod whose cgroup does not exist yet: nothing to move, no error.
    let pending = pod("be-2", "BE", "BestEffort", "c3");
    let pods = [be.clone(), ls, pending];
    let mut r = host.reconciler(false);
    let report = r.round(&be_enabled(), &pods);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.moved.get(&ResctrlGroup::Be), Some(&3));
    assert_eq!(
        tasks_of(&host.group_file(ResctrlGroup::Be, "tasks")),
        [90, 100, 101]
    );
    // LS is not enabled: its tasks stay where they are.
    assert_eq!(host.group_file(ResctrlGroup::Ls, "tasks"), "");
    // A new thread in the container: picked up next round, the others not written again.
    write(&cpu_dir(&host, &be, Some("c1")).join("tasks"), "100\n101\n102\n");
    let report = r.round(&be_enabled(), &pods);
    assert_eq!(report.moved.get(&ResctrlGroup::Be), Some(&1));
    assert_eq!(
        tasks_of(&host.group_file(ResctrlGroup::Be, "tasks")),
        [90, 100, 101, 102]
    );
    assert!(r.round(&be_enabled(), &pods).moved.is_empty());
}

/// The NRI sandbox of `p` as the runtime describes it (cgroupfs parent, labels).
fn sandbox_of(p: &PodMeta) -> koordlet::nri::api::PodSandbox {
    let paths = KubeCgroupPaths::new(CgroupDriver::Cgroupfs);
    koordlet::nri::api::PodSandbox {
        id: format!("sandbox-{}", p.uid.as_str()),
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        uid: p.uid.as_str().to_owned(),
        labels: p
            .pod
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        linux: Some(koordlet::nri::api::LinuxPodSandbox {
            cgroup_parent: format!("/{}", paths.pod_dir(p.kube_qos, &p.uid)),
        }),
        ..Default::default()
    }
}

/// The runtime hook names the group the round moves the pod to; with the container's first
/// task placed there (as runc does from the class), the round finds it in place and writes no
/// task: neither moves what the other placed, and nothing is written twice.
#[test]
fn resctrl_hook_names_the_rounds_group_and_the_round_leaves_its_tasks() {
    use koordlet::nri::{NodePodCgroups, NriHandler, RuntimeHooks};
    let host = FakeHost::intel("    L3:0=7ff\n    MB:0=100\n");
    let gates = FeatureGates::default();
    let paths = KubeCgroupPaths::new(CgroupDriver::Cgroupfs);
    let started = resctrl_loop::start(&gates, &host.roots, false, host.cgroups(), paths.clone(), false);
    let hooks = RuntimeHooks::default()
        .with_pod_cgroups(Arc::new(NodePodCgroups::new(host.cgroups(), paths)))
        .with_rdt(resctrl_loop::rdt_availability(&started));
    let mut r = started.ok().unwrap();
    let slo = slo(serde_json::json!({
        "lsClass": {"resctrlQOS": {"enable": true}},
        "beClass": {"resctrlQOS": {"enable": true}}
    }));
    hooks.set_settings(koordlet::nri::HookSettings {
        resctrl: ResctrlClasses::from_slo(&slo),
        ..Default::default()
    });
    // BE and LS by label, an unlabelled Burstable pod (LS by its QoS, from its cgroup parent),
    // and LSR, whose resctrl is not enabled.
    let pods = [
        pod("be-1", "BE", "BestEffort", "c1"),
        pod("ls-1", "LS", "Burstable", "c2"),
        pod("plain-1", "", "Burstable", "c3"),
        pod("lsr-1", "LSR", "Guaranteed", "c4"),
    ];
    let (fs, vendor) = detect(&host.roots, false).unwrap();
    let plan = koordlet_core::strategies::resctrl::decide(&slo, &fs.read_facts(vendor).unwrap(), &pods);
    for (i, p) in pods.iter().enumerate() {
        let container = koordlet::nri::api::Container {
            id: format!("c{}", i + 1),
            name: "a".into(),
            ..Default::default()
        };
        let class = hooks
            .create_container(&sandbox_of(p), &container)
            .and_then(|a| a.linux?.resources?.rdt_class)
            .map(|c| c.value);
        let round = plan
            .pods
            .iter()
            .find(|g| g.uid == p.uid.as_str())
            .map(|g| g.group.name().to_owned());
        assert_eq!(class, round, "pod {}", p.name);
        // The runtime starts the container: its task in the class's group (runc) or nowhere.
        let tid = 500 + i as u32;
        write(
            &cpu_dir(&host, p, Some(&container.id)).join("tasks"),
            &format!("{tid}\n"),
        );
        if let Some(class) = class {
            let tasks = host.roots.resctrl.join(class).join("tasks");
            let before = std::fs::read_to_string(&tasks).unwrap();
            write(&tasks, &format!("{before}{tid}\n"));
        }
    }
    let report = r.round(&slo, &pods);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.plan.as_ref().unwrap().pods, plan.pods);
    assert!(report.moved.is_empty(), "tasks moved again: {:?}", report.moved);
    assert_eq!(tasks_of(&host.group_file(ResctrlGroup::Be, "tasks")), [500]);
    assert_eq!(tasks_of(&host.group_file(ResctrlGroup::Ls, "tasks")), [501, 502]);
    assert_eq!(host.group_file(ResctrlGroup::Lsr, "tasks"), "");
}

#[test]
fn resctrl_dry_run_writes_nothing() {
    let host = FakeHost::intel("    L3:0=7ff\n    MB:0=100\n");
    let be = pod("be-1", "BE", "BestEffort", "c1");
    write(&cpu_dir(&host, &be, Some("c1")).join("tasks"), "100\n");
    let report = host
        .reconciler(true)
        .round(&be_enabled(), std::slice::from_ref(&be));
    assert_eq!(written(&report), ["BE L3:0=f", "BE MB:0=50"]);
    assert_eq!(report.moved.get(&ResctrlGroup::Be), Some(&1));
    assert_eq!(
        host.group_file(ResctrlGroup::Be, "schemata"),
        "    L3:0=7ff\n    MB:0=100\n"
    );
    assert_eq!(host.group_file(ResctrlGroup::Be, "tasks"), "");
}

fn plan_json(args: &[&str]) -> serde_json::Value {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/plan_resctrl.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_koordlet"))
        .arg("plan")
        .arg("-f")
        .arg(fixture)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn resctrl_plan_prints_schemata_writes() {
    let host = FakeHost::intel("    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n");
    // The plan reads only the tree: no BE group yet there, so no current value for BE.
    std::fs::remove_dir_all(host.roots.resctrl.join("BE")).unwrap();
    let out = plan_json(&["--resctrl-root", host.roots.resctrl.to_str().unwrap()]);
    let writes: Vec<_> = out["writes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["strategy"] == "resctrl")
        .cloned()
        .collect();
    assert_eq!(
        writes,
        [
            serde_json::json!({"cgroup": "resctrl/LSR", "file": "schemata", "value": "L3:0=7ff;1=7ff",
                "strategy": "resctrl", "current": "L3:0=7ff;1=7ff"}),
            serde_json::json!({"cgroup": "resctrl/LSR", "file": "schemata", "value": "MB:0=100;1=100",
                "strategy": "resctrl", "current": "MB:0=100;1=100"}),
            serde_json::json!({"cgroup": "resctrl/LS", "file": "schemata", "value": "L3:0=7ff;1=7ff",
                "strategy": "resctrl", "current": "L3:0=7ff;1=7ff"}),
            serde_json::json!({"cgroup": "resctrl/LS", "file": "schemata", "value": "MB:0=100;1=100",
                "strategy": "resctrl", "current": "MB:0=100;1=100"}),
            serde_json::json!({"cgroup": "resctrl/BE", "file": "schemata", "value": "L3:0=f;1=f",
                "strategy": "resctrl"}),
            serde_json::json!({"cgroup": "resctrl/BE", "file": "schemata", "value": "MB:0=50;1=50",
                "strategy": "resctrl"}),
        ]
    );
    let report = &out["strategies"]["resctrl"];
    assert_eq!(report["cdp"], false);
    assert_eq!(
        report["mbUnit"],
        serde_json::json!({"unit": "percent", "min": 10, "gran": 10})
    );
    assert_eq!(report["groups"][2]["l3Mask"], "f");
    let pods: Vec<_> = report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["group"].as_str().unwrap()))
        .collect();
    assert_eq!(pods, [("batch-job", "BE"), ("web", "LS")]);
    // Without a tree: skipped with the reason, no resctrl write.
    let out = plan_json(&[]);
    assert!(
        out["strategies"]["resctrl"]["skipped"]
            .as_str()
            .unwrap()
            .contains("--resctrl-root")
    );
    assert!(
        out["writes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["strategy"] != "resctrl")
    );
    // A directory that is no resctrl tree: skipped, naming the file.
    let empty = tempfile::tempdir().unwrap();
    let out = plan_json(&["--resctrl-root", empty.path().to_str().unwrap()]);
    let reason = out["strategies"]["resctrl"]["skipped"].as_str().unwrap();
    assert!(reason.contains("schemata"), "{reason}");
}
