//! The node's CPU facts (`node.koordinator.sh/cpu-basic-info`): detection on fake /proc and /sys
//! trees (tier 2), and the NodeResourceTopology report against the embedded API server (tier 4):
//! created with the detected value, applied when the facts change or someone else overwrites
//! it (a conflict, taken back), other writers' annotations and zones kept, nothing written with the gate off, and a
//! missing CRD survived until it is installed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use std::path::Path;
use std::time::Duration;

use clap::Parser;
use koord_api::cpu_normalization::CpuBasicInfo;
use koord_api::names::ANNOTATION_CPU_BASIC_INFO;
use koord_api::topology::NodeResourceTopology;
use koord_test_support::poll::wait_for;
use koord_test_support::{free_loopback_addr, sample, scrape};
use koordlet::report::topology::{self, TopologyError};
use koordlet::system::cpu_info::read_cpu_basic_info;
use koordlet::system::{CgroupDriver, CgroupVersion, SystemRoots};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use common::FakeHost;
use common::cluster::{cluster_with_namespace, unique};

const XEON: &str = "Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz";
const EPYC: &str = "AMD EPYC 7K62 48-Core Processor";

/// A fake CPU: cpuinfo of `cpus` processors, each CPU's `thread_siblings_list` (none when
/// empty) and the two turbo switches (absent when `None`).
struct FakeCpu<'a> {
    vendor: &'a str,
    model: &'a str,
    /// (`siblings`, `cpu cores`) printed in cpuinfo.
    counts: Option<(u32, u32)>,
    thread_siblings: &'a [&'a str],
    no_turbo: Option<&'a str>,
    boost: Option<&'a str>,
}

impl FakeCpu<'_> {
    fn write(&self, roots: &SystemRoots) {
        let mut cpuinfo = String::new();
        for cpu in 0..2 {
            cpuinfo.push_str(&format!(
                "processor\t: {cpu}\nvendor_id\t: {}\nmodel name\t: {}\n",
                self.vendor, self.model
            ));
            if let Some((siblings, cores)) = self.counts {
                cpuinfo.push_str(&format!("siblings\t: {siblings}\ncpu cores\t: {cores}\n"));
            }
            cpuinfo.push_str("flags\t\t: fpu vme\n\n");
        }
        std::fs::create_dir_all(&roots.proc).unwrap();
        std::fs::write(roots.proc.join("cpuinfo"), cpuinfo).unwrap();
        let cpu = roots.sys.join("devices/system/cpu");
        for (i, list) in self.thread_siblings.iter().enumerate() {
            let dir = cpu.join(format!("cpu{i}/topology"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("thread_siblings_list"), format!("{list}\n")).unwrap();
        }
        set_switch(&cpu.join("intel_pstate/no_turbo"), self.no_turbo);
        set_switch(&cpu.join("cpufreq/boost"), self.boost);
    }
}

fn set_switch(path: &Path, value: Option<&str>) {
    match value {
        Some(v) => {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("{v}\n")).unwrap();
        }
        None => {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn info(model: &str, vendor: &str, ht: bool, turbo: bool) -> CpuBasicInfo {
    CpuBasicInfo {
        cpu_model: model.to_owned(),
        hyper_thread_enabled: ht,
        turbo_enabled: turbo,
        cat_l3_cbm_mask: None,
        vendor_id: vendor.to_owned(),
    }
}

const INTEL_HT_TURBO: FakeCpu<'static> = FakeCpu {
    vendor: "GenuineIntel",
    model: XEON,
    counts: Some((2, 1)),
    thread_siblings: &["0-1", "0-1"],
    no_turbo: Some("0"),
    boost: None,
};

#[test]
fn cpu_facts_from_fake_trees() {
    let cases: Vec<(&str, FakeCpu<'_>, CpuBasicInfo)> = vec![
        (
            "intel with HT and turbo",
            INTEL_HT_TURBO,
            info(XEON, "GenuineIntel", true, true),
        ),
        (
            "intel without HT, turbo off by intel_pstate (boost ignored)",
            FakeCpu {
                counts: Some((2, 2)),
                thread_siblings: &["0", "1"],
                no_turbo: Some("1"),
                boost: Some("1"),
                ..INTEL_HT_TURBO
            },
            info(XEON, "GenuineIntel", false, false),
        ),
        (
            "amd with cpufreq boost, HT from sibling lists",
            FakeCpu {
                vendor: "AuthenticAMD",
                model: EPYC,
                counts: None,
                thread_siblings: &["0,1", "0,1"],
                no_turbo: None,
                boost: Some("1"),
            },
            info(EPYC, "AuthenticAMD", true, true),
        ),
        (
            "amd with boost off",
            FakeCpu {
                vendor: "AuthenticAMD",
                model: EPYC,
                counts: None,
                thread_siblings: &["0", "1"],
                no_turbo: None,
                boost: Some("0"),
            },
            info(EPYC, "AuthenticAMD", false, false),
        ),
        (
            "no sysfs at all: HT from cpuinfo siblings > cpu cores, turbo off",
            FakeCpu {
                thread_siblings: &[],
                no_turbo: None,
                ..INTEL_HT_TURBO
            },
            info(XEON, "GenuineIntel", true, false),
        ),
        (
            "nothing tells HT: off",
            FakeCpu {
                counts: None,
                thread_siblings: &[],
                no_turbo: None,
                ..INTEL_HT_TURBO
            },
            info(XEON, "GenuineIntel", false, false),
        ),
        (
            "garbage sysfs counts as absent",
            FakeCpu {
                counts: Some((4, 2)),
                thread_siblings: &["zzz", "\u{1}\u{2}"],
                no_turbo: Some("maybe"),
                boost: Some("\u{ff}"),
                ..INTEL_HT_TURBO
            },
            info(XEON, "GenuineIntel", true, false),
        ),
    ];
    for (name, cpu, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let roots = SystemRoots::under(dir.path());
        cpu.write(&roots);
        let got = read_cpu_basic_info(&roots).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn cpu_facts_errors_and_cbm_mask() {
    let dir = tempfile::tempdir().unwrap();
    let roots = SystemRoots::under(dir.path());
    let err = read_cpu_basic_info(&roots).unwrap_err().to_string();
    assert!(err.contains("cpuinfo"), "{err}");

    std::fs::create_dir_all(&roots.proc).unwrap();
    std::fs::write(roots.proc.join("cpuinfo"), b"\xff\xfe garbage\n\0\0").unwrap();
    let err = read_cpu_basic_info(&roots).unwrap_err().to_string();
    assert!(err.contains("model name"), "{err}");

    INTEL_HT_TURBO.write(&roots);
    let l3 = roots.resctrl.join("info/L3");
    std::fs::create_dir_all(&l3).unwrap();
    std::fs::write(l3.join("cbm_mask"), "7ff\n").unwrap();
    let got = read_cpu_basic_info(&roots).unwrap();
    assert_eq!(got.cat_l3_cbm_mask.as_deref(), Some("7ff"));
    assert_eq!(
        got.to_annotation(),
        format!(
            r#"{{"cpuModel":"{XEON}","hyperThreadEnabled":true,"turboEnabled":true,"catL3CbmMask":"7ff","vendorID":"GenuineIntel"}}"#
        )
    );
}

/// koordlet running in-process on a fake host against the embedded API server.
struct Agent {
    host: FakeHost,
    name: String,
    metrics: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn start_agent(kubeconfig: &Path, gates: &str, cpu: &FakeCpu<'_>) -> Agent {
    let host = FakeHost::new(CgroupVersion::V2, CgroupDriver::Cgroupfs);
    cpu.write(&host.roots);
    let name = unique("nrt");
    let metrics = free_loopback_addr().unwrap();
    let base = host.dir.path();
    let args = koordlet::cli::Args::try_parse_from([
        "koordlet".to_string(),
        format!("--node-name={name}"),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--cgroup-root={}", host.roots.cgroup.display()),
        format!("--proc-root={}", host.roots.proc.display()),
        format!("--sys-root={}", host.roots.sys.display()),
        format!("--resctrl-root={}", host.roots.resctrl.display()),
        format!("--proc-sys-root={}", base.join("proc/sys").display()),
        format!("--state-dir={}", base.join("state").display()),
        format!("--cpuset-state-file={}", base.join("state/cpuset.json").display()),
        format!("--kubelet-root-dir={}", base.join("kubelet").display()),
        "--cgroup-driver=cgroupfs".into(),
        "--pods-source=apiserver".into(),
        "--node-topology-report-interval=1s".into(),
        format!("--feature-gates={gates}"),
        format!("--metrics-addr={metrics}"),
        "--health-addr=127.0.0.1:0".into(),
        "--enable-nri-runtime-hook=false".into(),
    ])
    .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(e) = koordlet::agent::run_agent(args.agent, shutdown).await {
            panic!("koordlet failed: {e}");
        }
    });
    Agent {
        host,
        name,
        metrics,
        stop: Some(stop),
        task: Some(task),
    }
}

async fn annotation_becomes(api: &Api<NodeResourceTopology>, node: &str, want: &str) -> NodeResourceTopology {
    wait_for(
        &format!("NodeResourceTopology {node} with cpu-basic-info {want}"),
        Duration::from_secs(30),
        async || {
            let nrt = api.get_opt(node).await.ok()??;
            (nrt.annotation(ANNOTATION_CPU_BASIC_INFO) == Some(want)).then_some(nrt)
        },
    )
    .await
}

async fn metric(addr: std::net::SocketAddr, series: &str) -> f64 {
    scrape(addr)
        .await
        .and_then(|body| sample(&body, series))
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koordlet_reports_cpu_basic_info_in_the_node_resource_topology() {
    let (cluster, client, _ns) = cluster_with_namespace("nrt").await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).unwrap();
    let api: Api<NodeResourceTopology> = Api::all(client.clone());

    let off = start_agent(&kubeconfig, "NodeTopologyReport=false", &INTEL_HT_TURBO);
    let on = start_agent(&kubeconfig, "", &INTEL_HT_TURBO);

    // Created with what detection computes from the fake tree.
    let detected = read_cpu_basic_info(&on.host.roots).unwrap();
    assert_eq!(detected, info(XEON, "GenuineIntel", true, true));
    let nrt = annotation_becomes(&api, &on.name, &detected.to_annotation()).await;
    assert_eq!(nrt.topology_policies, vec!["None".to_string()]);
    assert!(nrt.zones.is_empty());
    let created = r#"koordlet_node_topology_reports_total{result="created"}"#;
    wait_for("the created round counted", Duration::from_secs(10), async || {
        (metric(on.metrics, created).await == 1.0).then_some(())
    })
    .await;

    // Someone else adds an annotation and a zone, and overwrites ours.
    let zone = json!({"name": "node-0", "type": "Node",
        "resources": [{"name": "cpu", "capacity": "4", "allocatable": "4", "available": "3"}]});
    api.patch(
        &on.name,
        &PatchParams::default(),
        &Patch::Merge(&json!({
            "metadata": {"annotations": {"example.com/other": "kept", ANNOTATION_CPU_BASIC_INFO: "{}"}},
            "zones": [zone],
        })),
    )
    .await
    .unwrap();
    let nrt = annotation_becomes(&api, &on.name, &detected.to_annotation()).await;
    assert_eq!(nrt.annotation("example.com/other"), Some("kept"));
    assert_eq!(nrt.zones, vec![zone.clone()]);

    // The facts change (turbo switched off): the annotation follows, the rest stays.
    set_switch(
        &on.host.roots.sys.join("devices/system/cpu/intel_pstate/no_turbo"),
        Some("1"),
    );
    let changed = info(XEON, "GenuineIntel", true, false).to_annotation();
    let nrt = annotation_becomes(&api, &on.name, &changed).await;
    assert_eq!(nrt.annotation("example.com/other"), Some("kept"));
    assert_eq!(nrt.zones, vec![zone]);
    assert_eq!(nrt.topology_policies, vec!["None".to_string()]);
    // Two patches (the repair, the turbo change), then rounds that find nothing to do.
    let updated = r#"koordlet_node_topology_reports_total{result="updated"}"#;
    let unchanged = r#"koordlet_node_topology_reports_total{result="unchanged"}"#;
    wait_for(
        "two updated rounds, then an unchanged one",
        Duration::from_secs(10),
        async || {
            let (u, n) = (
                metric(on.metrics, updated).await,
                metric(on.metrics, unchanged).await,
            );
            (u == 2.0 && n >= 1.0).then_some(())
        },
    )
    .await;
    assert_eq!(metric(on.metrics, created).await, 1.0);
    // The overwrite was a conflict (another manager's Update entry held the annotation), taken
    // back once; the turbo change met none. The annotation is koordlet's Apply, the policies
    // its create's.
    let conflicts = r#"koordlet_apply_conflicts_total{resource="noderesourcetopologies"}"#;
    assert_eq!(metric(on.metrics, conflicts).await, 1.0);
    let entries = nrt.metadata.managed_fields.clone().unwrap_or_default();
    let owns = |operation: &str, pointer: &str| {
        entries.iter().any(|e| {
            e.manager.as_deref() == Some("koordlet")
                && e.operation.as_deref() == Some(operation)
                && e.fields_v1
                    .as_ref()
                    .is_some_and(|f| f.0.pointer(pointer).is_some())
        })
    };
    assert!(
        owns(
            "Apply",
            "/f:metadata/f:annotations/f:node.koordinator.sh~1cpu-basic-info"
        ),
        "{entries:?}"
    );
    assert!(owns("Update", "/f:topologyPolicies"), "{entries:?}");

    // The gate-off agent ran all along (its gate metric says so) and wrote nothing.
    let gate = r#"koordlet_feature_gate_enabled{gate="NodeTopologyReport",implemented="true"}"#;
    let body = wait_for(
        "the gate-off koordlet's metrics",
        Duration::from_secs(30),
        async || scrape(off.metrics).await,
    )
    .await;
    assert_eq!(sample(&body, gate), Some(0.0), "{body}");
    assert!(!body.contains("koordlet_node_topology_reports_total{"), "{body}");
    assert!(api.get_opt(&off.name).await.unwrap().is_none());
    assert_eq!(metric(on.metrics, gate).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_crd_is_retried_until_it_is_installed() {
    let cluster = koord_testcluster::TestCluster::start(koord_testcluster::ClusterOptions::default())
        .await
        .unwrap();
    let client = cluster.client().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let roots = SystemRoots::under(dir.path());
    INTEL_HT_TURBO.write(&roots);
    let node = unique("nrt-crd");
    let detected = read_cpu_basic_info(&roots).unwrap();

    let err = topology::sync(&client, &node, &detected, &[]).await.unwrap_err();
    assert!(matches!(err, TopologyError::CrdMissing), "{err}");
    assert!(err.to_string().contains(topology::CRD_NAME), "{err}");

    let counters = topology::Counters::default();
    let rounds = counters.rounds.clone();
    let task = tokio::spawn(topology::run(
        client.clone(),
        node.clone(),
        roots,
        Duration::from_millis(200),
        counters,
    ));
    let crd_missing = vec![("result".to_string(), "crd_missing".to_string())];
    wait_for("two crd_missing rounds", Duration::from_secs(30), async || {
        (rounds.get_or_create(&crd_missing).get() >= 2).then_some(())
    })
    .await;
    assert!(!task.is_finished());

    cluster
        .install_crds_from_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/koordinator/crds"))
        .await
        .unwrap();
    let api: Api<NodeResourceTopology> = Api::all(client.clone());
    annotation_becomes(&api, &node, &detected.to_annotation()).await;
    let created = vec![("result".to_string(), "created".to_string())];
    assert_eq!(rounds.get_or_create(&created).get(), 1);
    task.abort();
}

/// Two NUMA nodes in the fake sysfs: `node<id>/cpulist` and `node<id>/meminfo`.
fn write_numa(roots: &SystemRoots, id: u32, cpus: &str, mem_total_kb: u64) {
    let dir = roots.sys.join(format!("devices/system/node/node{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cpulist"), format!("{cpus}\n")).unwrap();
    std::fs::write(
        dir.join("meminfo"),
        format!("Node {id} MemTotal:       {mem_total_kb} kB\nNode {id} MemFree:        1024 kB\n"),
    )
    .unwrap();
}

fn zone_resource(zones: &[serde_json::Value], zone: &str, name: &str) -> Option<serde_json::Value> {
    zones
        .iter()
        .find(|z| z["name"] == zone)?
        .get("resources")?
        .as_array()?
        .iter()
        .find(|r| r["name"] == name)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn koordlet_reports_one_zone_per_numa_node_and_keeps_other_entries() {
    let (cluster, client, _ns) = cluster_with_namespace("nrt-zones").await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).unwrap();
    let api: Api<NodeResourceTopology> = Api::all(client.clone());
    let agent = start_agent(&kubeconfig, "", &INTEL_HT_TURBO);
    write_numa(&agent.host.roots, 0, "0", 4 << 20);
    write_numa(&agent.host.roots, 1, "1", 2 << 20);

    let resource = |name: &str, amount: u64| {
        let amount = amount.to_string();
        json!({"name": name, "capacity": amount, "allocatable": amount, "available": amount})
    };
    let reported = wait_for("zones reported", Duration::from_secs(30), async || {
        let nrt = api.get_opt(&agent.name).await.ok()??;
        (nrt.zones.len() == 2).then_some(nrt)
    })
    .await;
    assert_eq!(
        reported.zones,
        vec![
            json!({"name": "node-0", "type": "Node", "resources": [resource("cpu", 1), resource("memory", 4 << 30)]}),
            json!({"name": "node-1", "type": "Node", "resources": [resource("cpu", 1), resource("memory", 2 << 30)]}),
        ]
    );
    assert_eq!(
        reported.annotation(ANNOTATION_CPU_BASIC_INFO),
        Some(
            read_cpu_basic_info(&agent.host.roots)
                .unwrap()
                .to_annotation()
                .as_str()
        )
    );

    // The manager writes its batch entries into node-0 (an update, as it does).
    let mut with_batch = api.get(&agent.name).await.unwrap();
    let batch = resource("kubernetes.io/batch-cpu", 500);
    with_batch.zones[0]["resources"]
        .as_array_mut()
        .unwrap()
        .insert(1, batch.clone());
    api.replace(&agent.name, &Default::default(), &with_batch)
        .await
        .unwrap();

    // node-1 grows to 3 GiB: koordlet follows, the batch entry stays.
    write_numa(&agent.host.roots, 1, "1", 3 << 20);
    let grown = wait_for("node-1 memory follows", Duration::from_secs(30), async || {
        let nrt = api.get_opt(&agent.name).await.ok()??;
        (zone_resource(&nrt.zones, "node-1", "memory") == Some(resource("memory", 3 << 30))).then_some(nrt)
    })
    .await;
    assert_eq!(
        zone_resource(&grown.zones, "node-0", "kubernetes.io/batch-cpu"),
        Some(batch)
    );

    // Then rounds find nothing to do: the object stays as it is.
    let version = grown.metadata.resource_version.clone();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let settled = api.get(&agent.name).await.unwrap();
    assert_eq!(settled.metadata.resource_version, version);
}
