//! The pod-churn soak: one simulated node with a steady population of pods, koordlet and
//! koord-manager each in a process of its own (so their footprints are theirs alone), one pod
//! deleted and one created every churn interval, and the footprint sampled throughout. The
//! result is a CSV, a verdict per figure (see [`verdict`]) and optionally a PNG plot.
//!
//! The components are this crate's `koord-soak` binary re-executed as `koord-soak koordlet ...`
//! and `koord-soak manager ...`: the same library entry points as the real binaries, in a
//! separate process, without building three binaries.

pub mod plot;
pub mod sample;
pub mod verdict;

mod children;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use koord_testcluster::node::{FleetConfig, NodeSpec, SimulatedNodes};
use koord_testcluster::{ClusterOptions, TestCluster};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use thiserror::Error;

use children::Component;
use sample::{ProcessFootprint, Sample};

/// Namespace of the churned pods.
const NAMESPACE: &str = "soak";
/// Node the pods run on.
const NODE: &str = "soak-node";
/// How long the initial population may take to run.
const POPULATION_TIMEOUT: Duration = Duration::from_secs(300);

/// Soak failures.
#[derive(Debug, Error)]
pub enum SoakError {
    /// The embedded cluster or a simulated node failed.
    #[error("cluster: {0}")]
    Cluster(String),
    /// An API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A file or a process could not be handled.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// A component process exited during the run.
    #[error("{0} exited during the soak (see its log in the output directory)")]
    ComponentExited(&'static str),
    /// The initial pods did not all run in time.
    #[error("only {running} of {wanted} pods ran within {POPULATION_TIMEOUT:?}")]
    Population {
        /// Pods running at the timeout.
        running: usize,
        /// Pods asked for.
        wanted: usize,
    },
    /// The plot could not be drawn.
    #[error("plot: {0}")]
    Plot(String),
}

/// What a soak run does.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// How long pods are churned (after the population runs), warm-up included.
    pub duration: Duration,
    /// The first part of the churn that the verdict leaves out (see [`verdict`]).
    pub warm_up: Duration,
    /// Pods kept on the node.
    pub pods: usize,
    /// One pod deleted and one created per interval.
    pub churn_every: Duration,
    /// Time between samples.
    pub sample_every: Duration,
    /// koordlet's `--collect-interval` (shorter than the default 1 s accelerates the run: more
    /// collection rounds, reports and QoS rounds per pod lifetime).
    pub collect_interval: String,
    /// Where the CSV, the kubeconfig and the component logs go.
    pub out_dir: PathBuf,
    /// The binary that runs a component when given `koordlet ...` or `manager ...`.
    pub component_exe: PathBuf,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct SoakReport {
    /// Every sample, in order.
    pub samples: Vec<Sample>,
    /// Pods created during churn (as many were deleted).
    pub churned: u64,
    /// Wall time the initial population took to run.
    pub population_took: Duration,
}

/// Runs a soak: see the module docs.
pub async fn run(config: &SoakConfig) -> Result<SoakReport, SoakError> {
    let io = |what: &str| {
        let what = what.to_string();
        move |source| SoakError::Io { what, source }
    };
    std::fs::create_dir_all(&config.out_dir).map_err(io("output directory"))?;
    let cluster = TestCluster::start(ClusterOptions::default())
        .await
        .map_err(|e| SoakError::Cluster(e.to_string()))?;
    crate::setup::install_base(&cluster, &crate::setup::crds_dir())
        .await
        .map_err(|e| SoakError::Cluster(e.to_string()))?;
    crate::setup::apply_seed_config(&cluster)
        .await
        .map_err(|e| SoakError::Cluster(e.to_string()))?;
    let client = cluster.client().map_err(|e| SoakError::Cluster(e.to_string()))?;
    let spec = NodeSpec::new(NODE)
        .with_resource("pods", &(config.pods + 50).to_string())
        .with_resource("cpu", "64")
        .with_resource("memory", "64Gi");
    let nodes = SimulatedNodes::start(client.clone(), vec![spec], FleetConfig::default())
        .await
        .map_err(|e| SoakError::Cluster(e.to_string()))?;
    let node = nodes
        .node(NODE)
        .cloned()
        .ok_or_else(|| SoakError::Cluster("the simulated node is missing".into()))?;
    let kubeconfig = config.out_dir.join("kubeconfig");
    cluster
        .write_kubeconfig(&kubeconfig)
        .map_err(|e| SoakError::Cluster(e.to_string()))?;
    let state_dir = config.out_dir.join("koordlet-state");
    let mut koordlet_args = node.koordlet_args(&kubeconfig);
    koordlet_args.remove(0);
    koordlet_args.extend([
        "--health-addr=127.0.0.1:0".into(),
        "--metrics-addr=127.0.0.1:0".into(),
        format!("--collect-interval={}", config.collect_interval),
        format!("--state-dir={}", state_dir.display()),
        format!("--cpuset-state-file={}", state_dir.join("cpuset.json").display()),
    ]);
    // Each component in a memory cgroup of its own, where cgroup v1 is writable here.
    let memory_tree = match koord_test_support::cgroup::CgroupV1Tree::new(&["memory"]) {
        Ok(tree) => Some(tree),
        Err(reason) => {
            tracing::warn!(%reason, "no memory cgroup per component: cgroup figures stay 0");
            None
        }
    };
    let koordlet = Component::spawn(
        "koordlet",
        &config.component_exe,
        &koordlet_args,
        &config.out_dir,
        memory_tree.as_ref(),
    )?;
    let manager_args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".into(),
        "--metrics-addr=127.0.0.1:0".into(),
        "--health-addr=127.0.0.1:0".into(),
        "--resync-seconds=5".into(),
    ];
    let manager = Component::spawn(
        "manager",
        &config.component_exe,
        &manager_args,
        &config.out_dir,
        memory_tree.as_ref(),
    )?;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))
                .map_err(|e| SoakError::Cluster(e.to_string()))?,
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let started = Instant::now();
    let mut live = VecDeque::new();
    let mut next = 0u64;
    for _ in 0..config.pods {
        live.push_back(create_pod(&pods, next).await?);
        next += 1;
    }
    let mut running = 0;
    while started.elapsed() < POPULATION_TIMEOUT {
        running = count_running(&pods).await?;
        if running >= config.pods {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if running < config.pods {
        return Err(SoakError::Population {
            running,
            wanted: config.pods,
        });
    }
    let population_took = started.elapsed();
    tracing::info!(pods = config.pods, took = ?population_took, "population running; churn starts");

    let cgroup_view = if node.cgroup_root.join("cpu").is_dir() {
        node.cgroup_root.join("cpu/kubepods")
    } else {
        node.cgroup_root.join("kubepods")
    };
    let churn_start = Instant::now();
    let mut samples = Vec::new();
    let mut churn = tokio::time::interval(config.churn_every);
    let mut sampling = tokio::time::interval(config.sample_every);
    let mut churned = 0;
    while churn_start.elapsed() < config.duration {
        tokio::select! {
            _ = churn.tick() => {
                if let Some(oldest) = live.pop_front() {
                    pods.delete(&oldest, &DeleteParams::default()).await?;
                }
                live.push_back(create_pod(&pods, next).await?);
                next += 1;
                churned += 1;
            }
            _ = sampling.tick() => {
                let koordlet_now = ProcessFootprint::of(koordlet.pid())
                    .ok_or(SoakError::ComponentExited("koordlet"))?
                    .with_cgroup(koordlet.memory_cgroup());
                let manager_now = ProcessFootprint::of(manager.pid())
                    .ok_or(SoakError::ComponentExited("koord-manager"))?
                    .with_cgroup(manager.memory_cgroup());
                let (cgroup_dirs, cgroup_tasks) = sample::count_cgroups(&cgroup_view);
                let listed = pods.list(&ListParams::default()).await?.items.len() as u64;
                samples.push(Sample {
                    seconds: churn_start.elapsed().as_secs_f64(),
                    koordlet: koordlet_now,
                    manager: manager_now,
                    cgroup_dirs,
                    cgroup_tasks,
                    pods: listed,
                    load1: sample::load_average(),
                });
                if let Some(s) = samples.last().filter(|_| samples.len().is_multiple_of(30)) {
                    tracing::info!(minutes = s.seconds / 60.0, koordlet_rss_mib = s.koordlet.rss_bytes >> 20,
                        koordlet_fds = s.koordlet.open_fds, manager_rss_mib = s.manager.rss_bytes >> 20,
                        cgroup_dirs = s.cgroup_dirs, pods = s.pods, "soak progress");
                }
            }
        }
        for component in [&koordlet, &manager] {
            if component.has_exited() {
                return Err(SoakError::ComponentExited(component.name()));
            }
        }
    }
    write_csv(&config.out_dir.join("samples.csv"), &samples)?;
    koordlet.stop().await;
    manager.stop().await;
    nodes.shutdown().await;
    Ok(SoakReport {
        samples,
        churned,
        population_took,
    })
}

async fn create_pod(pods: &Api<Pod>, seq: u64) -> Result<String, SoakError> {
    let name = format!("churn-{seq}");
    // Every other pod is BE (BestEffort, no requests), the rest LS with small requests.
    let pod = if seq.is_multiple_of(2) {
        json!({"metadata": {"name": name, "labels": {"koordinator.sh/qosClass": "BE", "app": "churn"}},
               "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "batch"}]}})
    } else {
        json!({"metadata": {"name": name, "labels": {"koordinator.sh/qosClass": "LS", "app": "churn"}},
               "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "app",
                   "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}}]}})
    };
    let pod: Pod = serde_json::from_value(pod).map_err(|e| SoakError::Cluster(e.to_string()))?;
    pods.create(&PostParams::default(), &pod).await?;
    Ok(name)
}

async fn count_running(pods: &Api<Pod>) -> Result<usize, SoakError> {
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count())
}

/// Writes the samples as CSV (one header line, one line per sample).
pub fn write_csv(path: &Path, samples: &[Sample]) -> Result<(), SoakError> {
    let mut text = String::from(
        "seconds,koordlet_rss_bytes,koordlet_fds,koordlet_threads,koordlet_cgroup_bytes,koordlet_kernel_bytes,manager_rss_bytes,manager_fds,manager_threads,manager_cgroup_bytes,manager_kernel_bytes,cgroup_dirs,cgroup_tasks,pods,load1\n",
    );
    for s in samples {
        text.push_str(&format!(
            "{:.1},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.2}\n",
            s.seconds,
            s.koordlet.rss_bytes,
            s.koordlet.open_fds,
            s.koordlet.threads,
            s.koordlet.cgroup_bytes,
            s.koordlet.kernel_bytes,
            s.manager.rss_bytes,
            s.manager.open_fds,
            s.manager.threads,
            s.manager.cgroup_bytes,
            s.manager.kernel_bytes,
            s.cgroup_dirs,
            s.cgroup_tasks,
            s.pods,
            s.load1
        ));
    }
    std::fs::write(path, text).map_err(|source| SoakError::Io {
        what: format!("write {}", path.display()),
        source,
    })
}
