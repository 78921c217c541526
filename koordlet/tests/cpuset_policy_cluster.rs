//! Embedded cluster (tier 4): CPU set policies on a simulated node whose pods are real
//! processes in real cgroups. koordlet runs in-process with its own state file; the test
//! changes a running pod's `koordinator.sh/cpuset-policy` annotation and checks the re-pinning
//! through `cpuset.cpus` and the processes' affinity, then restarts koordlet (state file intact,
//! then corrupt) and checks every container stays where it was.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;

use common::cluster::{cluster_with_namespace, unique};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use koord_test_support::poll::wait_for;
use koord_testcluster::node::{FleetConfig, NodeInfo, NodeSpec, SimulatedNodes};
use koordlet_core::strategies::cpuset::CpuList;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

struct Agent {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Agent {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(20), task).await;
        }
    }
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

fn start_agent(node: &NodeInfo, kubeconfig: &Path, state_file: &Path, kubelet_root: &Path) -> Agent {
    let args = koordlet::cli::Args::try_parse_from([
        "koordlet".to_string(),
        format!("--node-name={}", node.name),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--cgroup-root={}", node.cgroup_root.display()),
        format!("--proc-root={}", node.proc_root.display()),
        "--cgroup-driver=cgroupfs".into(),
        "--pods-source=apiserver".into(),
        "--collect-interval=1s".into(),
        format!("--cpuset-state-file={}", state_file.display()),
        format!("--kubelet-root-dir={}", kubelet_root.display()),
        "--metrics-addr=127.0.0.1:0".into(),
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
        stop: Some(stop),
        task: Some(task),
    }
}

fn affinity(pid: u32) -> Option<CpuList> {
    let pid = rustix::process::Pid::from_raw(pid as i32)?;
    let set = rustix::thread::sched_getaffinity(Some(pid)).ok()?;
    Some(CpuList::from_cpus(
        (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|c| set.is_set(*c))
            .map(|c| c as u32),
    ))
}

fn pod(name: &str, policy: Option<&str>) -> Pod {
    let mut meta = json!({"name": name});
    if let Some(p) = policy {
        meta["annotations"] = json!({"koordinator.sh/cpuset-policy": p});
    }
    serde_json::from_value(json!({
        "metadata": meta,
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {
            "requests": {"cpu": "100m", "memory": "16Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpuset_policy_repins_a_running_pod_and_survives_a_restart() {
    let online = CpuList::from_cpus(
        koordlet::gather::read_topology(Path::new("/sys"))
            .iter()
            .map(|c| c.cpu),
    );
    if online.len() < 2 {
        println!(
            "skipped: this machine has {} CPU(s); the test needs 2",
            online.len()
        );
        return;
    }
    let (cluster, client, ns) = cluster_with_namespace("cpuset").await;
    let name = unique("sim");
    let nodes = SimulatedNodes::start(client.clone(), vec![NodeSpec::new(&name)], FleetConfig::default())
        .await
        .unwrap();
    let node = nodes.node(&name).unwrap().clone();
    let cpuset_root = node.cgroup_root.join("cpuset");
    let real = std::fs::canonicalize(&cpuset_root).is_ok_and(|p| p.starts_with("/sys/fs/cgroup"));
    if !real {
        println!("skipped: the simulated node has no real cgroup v1 cpuset hierarchy");
        nodes.shutdown().await;
        return;
    }
    let top = CpuList::parse(&std::fs::read_to_string(cpuset_root.join("cpuset.cpus")).unwrap()).unwrap();
    if top != online {
        println!("skipped: the node's cpuset holds {top}, not every online CPU {online}");
        nodes.shutdown().await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).unwrap();
    let state_file = dir.path().join("state/cpuset-policy-state.json");
    let kubelet_root = dir.path().join("kubelet");
    std::fs::create_dir_all(&kubelet_root).unwrap();
    let mut agent = start_agent(&node, &kubeconfig, &state_file, &kubelet_root);

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut uids = Vec::new();
    for p in [pod("pinned", Some("exclusive")), pod("plain", None)] {
        uids.push(
            pods.create(&PostParams::default(), &p)
                .await
                .unwrap()
                .metadata
                .uid
                .unwrap(),
        );
    }
    // The containers' cpuset dirs, once running.
    let mut dirs: Vec<PathBuf> = Vec::new();
    for (name, uid) in ["pinned", "plain"].iter().zip(&uids) {
        let id = wait_for(&format!("{name} running"), Duration::from_secs(60), async || {
            let p = pods.get(name).await.ok()?;
            let s = p.status?;
            (s.phase.as_deref() == Some("Running")).then_some(())?;
            s.container_statuses?.first()?.container_id.clone()
        })
        .await;
        let hash = id.split("://").nth(1).unwrap().to_string();
        dirs.push(cpuset_root.join(format!("kubepods/burstable/pod{uid}/{hash}")));
        wait_for(
            &format!("{name} processes"),
            Duration::from_secs(30),
            async || (!nodes.pod_pids(uid).is_empty()).then_some(()),
        )
        .await;
    }
    let pinned_pid = nodes.pod_pids(&uids[0])[0];
    let plain_pid = nodes.pod_pids(&uids[1])[0];
    let last = CpuList::from_cpus([online.iter().last().unwrap()]);
    let rest = online.difference(&last);
    let cpus = |d: &Path| {
        std::fs::read_to_string(d.join("cpuset.cpus"))
            .ok()
            .and_then(|t| CpuList::parse(&t).ok())
    };
    let expect = async |what: &str, pinned: &CpuList, plain: &CpuList| {
        wait_for(what, Duration::from_secs(60), async || {
            (cpus(&dirs[0]).as_ref() == Some(pinned)
                && cpus(&dirs[1]).as_ref() == Some(plain)
                && affinity(pinned_pid).as_ref() == Some(pinned)
                && affinity(plain_pid).as_ref() == Some(plain))
            .then_some(())
        })
        .await;
    };
    expect(
        "exclusive: pinned on the last CPU, plain on the others",
        &last,
        &rest,
    )
    .await;

    // The annotation changes on the running pod: share gives the CPU back, no restart.
    let patch = |policy: &str| json!({"metadata": {"annotations": {"koordinator.sh/cpuset-policy": policy}}});
    pods.patch("pinned", &PatchParams::default(), &Patch::Merge(&patch("share")))
        .await
        .unwrap();
    expect("share: plain back on every CPU", &last, &online).await;
    assert_eq!(
        nodes.pod_pids(&uids[0]),
        vec![pinned_pid],
        "the pinned pod was not restarted"
    );
    pods.patch(
        "pinned",
        &PatchParams::default(),
        &Patch::Merge(&patch("exclusive")),
    )
    .await
    .unwrap();
    expect("exclusive again", &last, &rest).await;

    // A request that cannot be met (the last shared CPU must stay shared): a Warning Event on
    // the pod, nothing pinned, nobody moved.
    pods.create(&PostParams::default(), &pod("greedy", Some("exclusive")))
        .await
        .unwrap();
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), &ns);
    let note = wait_for(
        "CPUSetPolicyNotApplied Event on greedy",
        Duration::from_secs(60),
        async || {
            let list = events
                .list(&kube::api::ListParams::default().fields("involvedObject.name=greedy"))
                .await
                .ok()?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(koordlet::qos_loop::CPUSET_POLICY_EVENT_REASON))
                .and_then(|e| e.message)
        },
    )
    .await;
    assert!(note.contains("cannot give 1 exclusive CPUs"), "{note}");
    expect("greedy refused, nobody moved", &last, &rest).await;
    pods.delete("greedy", &Default::default()).await.unwrap();
    let saved = wait_for("state file written", Duration::from_secs(30), async || {
        let text = std::fs::read_to_string(&state_file).ok()?;
        text.contains("\"exclusive\"").then_some(text)
    })
    .await;

    // Restart with the state file: every container stays where it is.
    agent.stop().await;
    agent = start_agent(&node, &kubeconfig, &state_file, &kubelet_root);
    tokio::time::sleep(Duration::from_secs(4)).await;
    expect("after a restart", &last, &rest).await;
    assert_eq!(std::fs::read_to_string(&state_file).unwrap(), saved);

    // Restart with a corrupt state file: reported, rebuilt from the cgroups, nothing moves.
    agent.stop().await;
    std::fs::write(&state_file, "{ not json").unwrap();
    agent = start_agent(&node, &kubeconfig, &state_file, &kubelet_root);
    wait_for("state file rebuilt", Duration::from_secs(60), async || {
        let text = std::fs::read_to_string(&state_file).ok()?;
        (text == saved).then_some(())
    })
    .await;
    expect("after a restart with a corrupt state file", &last, &rest).await;

    // Deleting the pod releases its CPU.
    pods.delete("pinned", &Default::default()).await.unwrap();
    wait_for("plain back on every CPU", Duration::from_secs(60), async || {
        (cpus(&dirs[1]).as_ref() == Some(&online)).then_some(())
    })
    .await;
    agent.stop().await;
    nodes.shutdown().await;
}
