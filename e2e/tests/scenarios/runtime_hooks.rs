//! koordlet's runtime hooks on a real container runtime: a BE container's batch limits are in
//! its cgroup before its first instruction runs (NRI `CreateContainer`), where without NRI the
//! container runs unshaped until koordlet's next QoS round after it learns of the pod.
//!
//! Real cluster only: the embedded cluster has no container runtime (koordlet's own
//! `nri_containerd` test covers NRI against containerd without Kubernetes).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use koord_api::names::DEFAULT_CONFIG_NAMESPACE;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::colocation::{colocation, container_hash, read};
use crate::common;
use crate::env::{Cleanup, Env, Load, POD_START, Wanted, find_dir, restart_command, restart_component};

/// koordlet's metrics on the node (hostNetwork; the suite runs in the node's network).
const KOORDLET_METRICS: &str = "127.0.0.1:9316";

/// What koordlet writes for a BE container with batch-cpu limit 1000 and batch-memory 128Mi.
const EXPECTED: [(&str, &str, &str); 2] = [
    ("cpu", "cpu.cfs_quota_us", "100000"),
    ("memory", "memory.limit_in_bytes", "134217728"),
];

/// koordlet's `/metrics` on this node.
fn koordlet_metrics() -> Result<String, String> {
    let addr: SocketAddr = KOORDLET_METRICS.parse().map_err(|e| format!("{e}"))?;
    let (code, body) = common::http_get(addr, "/metrics").ok_or_else(|| {
        format!("koordlet's metrics not reachable on {addr} (the suite does not run on the node)")
    })?;
    if code != 200 {
        return Err(format!("koordlet's /metrics answered {code}"));
    }
    Ok(body)
}

/// Whether koordlet on this node is registered with the runtime over NRI.
fn nri_connected() -> Result<bool, String> {
    Ok(koordlet_metrics()?
        .lines()
        .any(|l| l.trim() == "koordlet_nri_connected 1"))
}

/// What koordlet's NRI metrics say at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NriCounts {
    connected: bool,
    /// Synchronize requests answered with at least one container update.
    sync_adjusted: u64,
    /// Every Synchronize request answered.
    sync_total: u64,
}

impl NriCounts {
    fn read() -> Result<NriCounts, String> {
        let body = koordlet_metrics()?;
        let sync = |result: Option<&str>| -> u64 {
            body.lines()
                .filter(|l| {
                    l.starts_with("koordlet_nri_requests_total{")
                        && l.contains("event=\"synchronize\"")
                        && result.is_none_or(|r| l.contains(&format!("result=\"{r}\"")))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>() as u64
        };
        Ok(NriCounts {
            connected: body.lines().any(|l| l.trim() == "koordlet_nri_connected 1"),
            sync_adjusted: sync(Some("adjusted")),
            sync_total: sync(None),
        })
    }
}

/// Why the NRI scenarios cannot run here, if they cannot.
fn nri_unavailable() -> Option<String> {
    match nri_connected() {
        Ok(true) => None,
        Ok(false) => {
            Some("koordlet is not registered with the runtime over NRI (chart value koordlet.nri)".into())
        }
        Err(reason) => Some(reason),
    }
}

/// The first moment the workload process (`comm` = `busy`) runs in one of the pod's container
/// cgroups, and whether every expected limit was in that container's cgroup at that moment,
/// then the moment the limits were all there. Polls every millisecond.
struct Observation {
    started: Instant,
    limits_at_start: bool,
    limits_in_place: Instant,
}

fn container_dirs(root: &Path, uid: &str) -> Vec<PathBuf> {
    let Some(besteffort) = find_dir(&root.join("cpu"), "besteffort", 3) else {
        return Vec::new();
    };
    std::fs::read_dir(besteffort.join(format!("pod{uid}")))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

fn runs_workload(cpu_dir: &Path) -> bool {
    read(&cpu_dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .any(|pid| read(Path::new(&format!("/proc/{pid}/comm"))).as_deref() == Some("busy"))
}

fn limits_set(root: &Path, cpu_dir: &Path) -> bool {
    let Ok(relative) = cpu_dir.strip_prefix(root.join("cpu")) else {
        return false;
    };
    EXPECTED.iter().all(|(controller, file, want)| {
        read(&root.join(controller).join(relative).join(file)).as_deref() == Some(*want)
    })
}

fn observe(root: &Path, uid: &str, deadline: Instant) -> Option<Observation> {
    let mut started: Option<(Instant, PathBuf, bool)> = None;
    while Instant::now() < deadline {
        match &started {
            None => {
                if let Some(dir) = container_dirs(root, uid).into_iter().find(|d| runs_workload(d)) {
                    let limits = limits_set(root, &dir);
                    let now = Instant::now();
                    if limits {
                        return Some(Observation {
                            started: now,
                            limits_at_start: true,
                            limits_in_place: now,
                        });
                    }
                    started = Some((now, dir, false));
                }
            }
            Some((at, dir, _)) => {
                if limits_set(root, dir) {
                    return Some(Observation {
                        started: *at,
                        limits_at_start: false,
                        limits_in_place: Instant::now(),
                    });
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

/// The node's name and cgroup root, or why this scenario cannot run here.
async fn on_the_node(env: &Env) -> Result<(String, PathBuf), String> {
    if !env.is_real() {
        return Err(
            "the embedded cluster has no container runtime (koordlet's nri_containerd test covers NRI)"
                .into(),
        );
    }
    env.first_node_cgroups().await
}

/// [`on_the_node`], with koordlet registered over NRI there.
async fn on_an_nri_node(env: &Env) -> Result<(String, PathBuf), String> {
    let found = on_the_node(env).await?;
    match nri_unavailable() {
        Some(reason) => Err(reason),
        None => Ok(found),
    }
}

/// A BE pod started by [`start_be_pod`]: what was observed, and the guard that removes its
/// namespace.
struct StartedBePod {
    observation: Observation,
    window: Duration,
    running: Pod,
    _cleanup: Cleanup,
}

/// Creates a BE pod (batch-cpu limit 1000, batch-memory 128Mi) on `node` in a fresh colocation
/// namespace and watches its container start; returns the observation and the window.
async fn start_be_pod(env: &Env, node: &str, root: PathBuf, name: &str) -> StartedBePod {
    let cleanup = colocation(env).await;
    let ns = cleanup.ns().to_string();
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let resources =
        json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}});
    common::wait_for_batch_cpu(&env.client, 100).await;
    let mut pod = env.pod(
        name,
        json!({"app": name}),
        vec![env.container("main", Load::Idle, resources)],
    );
    // On the node whose cgroups are polled.
    pod.spec.as_mut().unwrap().node_selector =
        Some([("kubernetes.io/hostname".to_string(), node.to_string())].into());
    let created = common::create_until_mutated_to_be(&pods, &pod).await;
    let uid = created.metadata.uid.clone().unwrap();
    let deadline = Instant::now() + POD_START;
    let observation = tokio::task::spawn_blocking(move || observe(&root, &uid, deadline))
        .await
        .unwrap()
        .expect("the BE container started and got koordlet's limits within the pod start time");
    let running = env.wait_running(&ns, name).await;
    let window = observation.limits_in_place.duration_since(observation.started);
    StartedBePod {
        observation,
        window,
        running,
        _cleanup: cleanup,
    }
}

/// Waits until the koordlet DaemonSet's latest generation is available on every node and
/// koordlet's NRI connection is `nri`.
async fn koordlet_rolled_out(daemonsets: &Api<DaemonSet>, nri: bool) {
    let generation = daemonsets.get("koordlet").await.unwrap().metadata.generation;
    let what = if nri {
        "koordlet rolled out on NRI"
    } else {
        "koordlet rolled out without NRI"
    };
    common::wait_for(what, POD_START, async || {
        let status = daemonsets.get("koordlet").await.ok()?.status?;
        let desired = status.desired_number_scheduled;
        (status.observed_generation >= generation
            && status.updated_number_scheduled == Some(desired)
            && status.number_available == Some(desired)
            && nri_connected().is_ok_and(|c| c == nri))
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn be_container_starts_with_its_batch_limits_through_nri() {
    let env = Env::start(Wanted::default()).await;
    let (node, root) = match on_an_nri_node(&env).await {
        Ok(found) => found,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let StartedBePod {
        observation, window, ..
    } = start_be_pod(&env, &node, root, "batch-nri").await;
    println!(
        "unshaped window with NRI: {} ms (limits in the container cgroup when its process first ran: {})",
        window.as_millis(),
        observation.limits_at_start
    );
    assert!(
        observation.limits_at_start,
        "the container ran for {window:?} before koordlet's limits reached its cgroup: NRI did not adjust it"
    );
}

/// The same pod with koordlet's runtime hooks off (the DaemonSet's args changed, restored by
/// the cleanup guard): the window is what the QoS round alone leaves. A measurement, not a
/// check; it restarts koordlet twice, so it is not part of the suite's default run:
/// `scripts/real-cluster.sh exec env KOORD_E2E_KUBECONFIG=$PWD/target/real-cluster/kubeconfig
/// cargo test -p koord-e2e --test scenarios -- --ignored --nocapture unshaped_window_without_nri`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "restarts koordlet; a measurement for docs/benchmarks.md"]
async fn unshaped_window_without_nri() {
    let env = Env::start(Wanted::default()).await;
    let (node, root) = match on_the_node(&env).await {
        Ok(found) => found,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let daemonsets: Api<DaemonSet> = Api::namespaced(env.client.clone(), DEFAULT_CONFIG_NAMESPACE);
    let current = daemonsets.get("koordlet").await.unwrap();
    let args = current
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .args
        .clone()
        .unwrap_or_default();
    let mut guard = Cleanup::new(env.client.clone());
    guard.koordlet_args = Some(args.clone());
    let without: Vec<String> = args
        .iter()
        .filter(|a| !a.starts_with("--nri-socket") && !a.starts_with("--enable-nri-runtime-hook"))
        .cloned()
        .chain(["--enable-nri-runtime-hook=false".to_string()])
        .collect();
    let patch =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "koordlet", "args": without}]}}}});
    daemonsets
        .patch("koordlet", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    koordlet_rolled_out(&daemonsets, false).await;
    let StartedBePod {
        observation, window, ..
    } = start_be_pod(&env, &node, root, "batch-no-nri").await;
    println!(
        "unshaped window without NRI: {} ms (limits in place when the process first ran: {})",
        window.as_millis(),
        observation.limits_at_start
    );
    drop(guard);
    // Leave koordlet as found: back on NRI before the next scenario runs.
    koordlet_rolled_out(&daemonsets, true).await;
}

/// The container ID (without the runtime prefix) and restart count of a pod's only container.
fn container_of(pod: &Pod) -> (String, i32) {
    let status = &pod.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    (container_hash(pod), status.restart_count)
}

/// Whether the container's cgroup still has koordlet's BE limits.
fn container_limits_in_place(root: &Path, pod: &Pod, container_id: &str) -> bool {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    container_dirs(root, &uid)
        .iter()
        .filter(|d| d.file_name().is_some_and(|n| n == container_id))
        .any(|d| limits_set(root, d))
}

/// Waits until the only BE pod on `node` is `uid` (other scenarios' pods may still be
/// terminating): then every update a Synchronize sends would be a duplicate of ours.
async fn only_be_pod_on_node(env: &Env, node: &str, uid: &str) {
    let pods: Api<Pod> = Api::all(env.client.clone());
    let params = ListParams::default()
        .labels("koordinator.sh/qosClass=BE")
        .fields(&format!("spec.nodeName={node}"));
    common::wait_for("no other BE pod on the node", POD_START, async || {
        let list = pods.list(&params).await.ok()?;
        list.items
            .iter()
            .all(|p| p.metadata.uid.as_deref() == Some(uid))
            .then_some(())
    })
    .await;
}

/// Waits until koordlet is registered again and has answered a Synchronize newer than `before`.
async fn registered_again(what: &str, before: Option<NriCounts>) -> (NriCounts, Duration) {
    let started = Instant::now();
    let counts = common::wait_for(what, POD_START, async || {
        let now = NriCounts::read().ok()?;
        let synced = before.map_or(now.sync_total >= 1, |b| now.sync_total > b.sync_total);
        (now.connected && synced).then_some(now)
    })
    .await;
    (counts, started.elapsed())
}

/// Restarts of the runtime and of koordlet while a BE pod runs. Each time koordlet registers
/// again, the runtime's Synchronize finds the pod's container already adjusted, so no update
/// is sent twice; the container keeps running with its limits; and a container created after
/// both restarts is still adjusted before it starts. The containerd restart needs the command
/// in `KOORD_E2E_RESTART` (`scripts/real-cluster.sh test` sets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nri_adjustments_survive_containerd_and_koordlet_restarts() {
    let env = Env::start(Wanted::default()).await;
    let (node, root) = match on_an_nri_node(&env).await {
        Ok(found) => found,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let before = start_be_pod(&env, &node, root.clone(), "batch-restarts").await;
    assert!(
        before.observation.limits_at_start,
        "NRI did not adjust the first container"
    );
    let pod = before.running.clone();
    let (container_id, restarts) = container_of(&pod);
    only_be_pod_on_node(&env, &node, pod.metadata.uid.as_deref().unwrap()).await;

    match restart_command() {
        Ok(_) => {
            let counts = NriCounts::read().unwrap();
            tokio::task::spawn_blocking(|| restart_component("containerd", Duration::ZERO))
                .await
                .unwrap()
                .unwrap();
            let (after, took) =
                registered_again("koordlet registered after the containerd restart", Some(counts)).await;
            println!("containerd restarted: koordlet registered and synchronised again {took:?} later");
            assert_eq!(
                after.sync_adjusted, counts.sync_adjusted,
                "the Synchronize after the containerd restart sent updates for an already adjusted container"
            );
        }
        Err(reason) => println!("skipped: the containerd restart ({reason})"),
    }

    let pods: Api<Pod> = Api::namespaced(env.client.clone(), DEFAULT_CONFIG_NAMESPACE);
    let params = ListParams::default()
        .labels("koord-app=koordlet")
        .fields(&format!("spec.nodeName={node}"));
    let old = pods.list(&params).await.unwrap().items;
    assert_eq!(old.len(), 1, "one koordlet pod on {node}");
    let old_uid = old[0].metadata.uid.clone();
    pods.delete(old[0].metadata.name.as_deref().unwrap(), &DeleteParams::default())
        .await
        .unwrap();
    common::wait_for("a new koordlet pod Ready", POD_START, async || {
        let list = pods.list(&params).await.ok()?;
        list.items
            .iter()
            .any(|p| {
                p.metadata.uid != old_uid
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .then_some(())
    })
    .await;
    let (after, took) = registered_again("the new koordlet registered over NRI", None).await;
    println!("koordlet restarted: registered and synchronised {took:?} after its pod was Ready");
    assert_eq!(
        after.sync_adjusted, 0,
        "the restarted koordlet's first Synchronize sent updates for an already adjusted container"
    );

    let now = Api::<Pod>::namespaced(env.client.clone(), pod.metadata.namespace.as_deref().unwrap())
        .get(pod.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(
        container_of(&now),
        (container_id.clone(), restarts),
        "the container was replaced or restarted"
    );
    assert!(
        container_limits_in_place(&root, &now, &container_id),
        "the container's cgroup lost koordlet's limits across the restarts"
    );
    let later = start_be_pod(&env, &node, root, "batch-after-restarts").await;
    assert!(
        later.observation.limits_at_start,
        "a container created after the restarts ran {:?} before its limits were set",
        later.window
    );
}

/// The CPU numbers of a cpuset list (`0-2,5`).
fn cpu_list(text: &str) -> Vec<u32> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .flat_map(|part| match part.trim().split_once('-') {
            Some((a, b)) => a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap(),
            None => {
                let cpu = part.trim().parse::<u32>().unwrap();
                cpu..=cpu
            }
        })
        .collect()
}

/// An LSR pod the scheduler bound to one CPU (`scheduling.koordinator.sh/resource-status`, as
/// koord-scheduler writes it): with NRI, its container's `cpuset.cpus` is that CPU when its
/// process first runs, where without NRI it would start on every CPU until koordlet's round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lsr_container_starts_on_its_bound_cpu_through_nri() {
    let env = Env::start(Wanted::default()).await;
    let (node, root) = match on_an_nri_node(&env).await {
        Ok(found) => found,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let Some(online) = read(&root.join("cpuset/cpuset.cpus")) else {
        println!("skipped: no cgroup v1 cpuset hierarchy under {}", root.display());
        return;
    };
    let online = cpu_list(&online);
    let Some(&bound) = online.last().filter(|_| online.len() > 1) else {
        println!("skipped: one CPU only ({online:?}): a bound cpuset would not differ from the default");
        return;
    };
    let cleanup = env.namespace("cpuset", json!({})).await;
    let ns = cleanup.ns().to_string();
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let resources =
        json!({"requests": {"cpu": "1", "memory": "32Mi"}, "limits": {"cpu": "1", "memory": "32Mi"}});
    let mut pod = env.pod(
        "lsr",
        json!({"koordinator.sh/qosClass": "LSR"}),
        vec![env.container("main", Load::Idle, resources)],
    );
    pod.metadata.annotations = Some(
        [(
            "scheduling.koordinator.sh/resource-status".to_string(),
            format!(r#"{{"cpuset": "{bound}"}}"#),
        )]
        .into(),
    );
    let spec = pod.spec.as_mut().unwrap();
    spec.priority_class_name = Some("koord-prod".into());
    spec.node_selector = Some([("kubernetes.io/hostname".to_string(), node.clone())].into());
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    // Guaranteed (requests = limits): the pod cgroup sits directly in kubepods.
    let kubepods =
        find_dir(&root.join("cpuset"), "kubepods", 2).expect("the kubelet's kubepods cpuset cgroup");
    let pod_dir = kubepods.join(format!("pod{uid}"));
    let observed = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + POD_START;
        while Instant::now() < deadline {
            for dir in std::fs::read_dir(&pod_dir).into_iter().flatten().flatten() {
                let dir = dir.path();
                if dir.is_dir() && runs_workload(&dir) {
                    return read(&dir.join("cpuset.cpus"));
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    })
    .await
    .unwrap()
    .expect("the LSR container's process ran within the pod start time");
    env.wait_running(&ns, "lsr").await;
    println!(
        "LSR container's cpuset when its process first ran: {observed} (bound: {bound}, node: {online:?})"
    );
    assert_eq!(
        cpu_list(&observed),
        vec![bound],
        "the container started outside the CPU the scheduler bound it to"
    );
    // While it runs, the other containers leave its CPU (the shared pool); once it is gone,
    // they get the whole node back.
    let burstable = kubepods.join("burstable");
    let narrowed = move || -> Vec<String> {
        std::fs::read_dir(&burstable)
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|pod| std::fs::read_dir(pod.path()).into_iter().flatten().flatten())
            .filter(|c| c.path().is_dir())
            .filter_map(|c| {
                let cpus = read(&c.path().join("cpuset.cpus"))?;
                (cpu_list(&cpus) != online).then(|| format!("{}: {cpus}", c.path().display()))
            })
            .collect()
    };
    let started = Instant::now();
    common::wait_for(
        "koordlet's round moving the burstable containers off the bound CPU",
        POD_START,
        async || (!narrowed().is_empty()).then_some(()),
    )
    .await;
    println!(
        "burstable containers on the shared pool {:?} after the LSR pod was Running",
        started.elapsed()
    );
    pods.delete("lsr", &DeleteParams::default()).await.unwrap();
    let started = Instant::now();
    common::wait_for(
        "every burstable container back on the whole node after the LSR pod left",
        POD_START,
        async || narrowed().is_empty().then_some(()),
    )
    .await;
    println!(
        "burstable containers back on every CPU {:?} after the LSR pod's deletion",
        started.elapsed()
    );
}
