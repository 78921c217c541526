//! `koord-bench colocation`: LS tail latency and BE throughput with real workloads (nginx,
//! memcached, stress-ng) colocated on one node, per isolation policy. See `docs/benchmarks.md`.
//!
//! For each policy: LS pods start, then for each repetition, LS workload and load (a share of
//! the LS server's capacity measured with LS alone), a fresh BE stress-ng job fills the node
//! for a warm-up plus the measured window while the open-loop generator drives the LS server.

pub mod loadgen;
pub mod plot;
pub mod policy;
pub mod report;
pub mod stressng;
pub mod target;
pub mod workloads;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use loadgen::{LoadSpec, Protocol};
use policy::Policy;
use report::Point;
use target::{Target, delete_pod, run_pod};
use workloads::{LsWorkload, WorkDir};

/// Benchmark failures.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The benchmark cannot run here; printed as `skipped: <reason>`.
    #[error("{0}")]
    Skip(String),
    /// Bad flags.
    #[error("usage: {0}")]
    Usage(String),
    /// I/O (sockets, files).
    #[error("I/O: {0}")]
    Io(#[source] std::io::Error),
    /// The load generator failed.
    #[error("load generator: {0}")]
    Load(String),
    /// A histogram operation failed.
    #[error("histogram: {0}")]
    Histogram(String),
    /// stress-ng's report did not read.
    #[error("stress-ng report: {0}")]
    StressNg(String),
    /// The cluster refused or failed.
    #[error("cluster: {0}")]
    Cluster(String),
    /// The plot could not be drawn.
    #[error("plot: {0}")]
    Plot(String),
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Repetitions of every point.
    pub reps: usize,
    /// Measured window per point.
    pub duration: Duration,
    /// BE runs this long before the window starts.
    pub warmup: Duration,
    /// LS loads, percent of capacity.
    pub loads: Vec<u32>,
    /// Policies (names from [`policy::all`]); `ls-alone` is required as the reference.
    pub policies: Vec<String>,
    /// LS workloads.
    pub workloads: Vec<LsWorkload>,
    /// Closed-loop window of the capacity probe.
    pub capacity_window: Duration,
    /// Generator connections.
    pub connections: usize,
    /// Request timeout.
    pub timeout: Duration,
    /// Namespace of the pods.
    pub namespace: String,
    /// Images per program (real cluster; the embedded node runs the host's binaries).
    pub images: BTreeMap<String, String>,
    /// Directory shared by the bench and the pods (created when missing).
    pub work_dir: PathBuf,
    /// CPU request of each LS pod (its cpu.shares; it must fit the node beside whatever else
    /// runs there).
    pub ls_cpu_request: String,
    /// batch-cpu of every BE job, milli-cores (None: the node's CPU count).
    pub be_batch_milli_cpu: Option<u64>,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Every point.
    pub points: Vec<Point>,
    /// Capacity per LS workload, requests/s.
    pub capacity: BTreeMap<String, f64>,
    /// BE alone, bogo-ops/s per stressor (mean over repetitions).
    pub be_alone: stressng::Throughput,
    /// batch-cpu of the BE-alone jobs, milli-cores (smallest, largest).
    pub be_alone_batch_milli_cpu: Option<(u64, u64)>,
    /// Policies skipped, with the reason.
    pub skipped: Vec<(String, String)>,
}

struct LsServer {
    workload: LsWorkload,
    addr: SocketAddr,
    pod: String,
}

impl LsServer {
    fn protocol(&self) -> Protocol {
        match self.workload {
            LsWorkload::Nginx => Protocol::Http {
                path: "/index.html".into(),
            },
            LsWorkload::Memcached => Protocol::MemcacheGet {
                key: "koord-bench".into(),
            },
        }
    }
}

/// The load generator stands in for clients on other machines, yet it shares this node's CPUs:
/// its thread gets a cgroup of its own with a high `cpu.shares`, so that BE load on the node does
/// not starve the client and show up as server latency. Removed on drop.
pub struct GeneratorCgroup {
    tree: koord_test_support::cgroup::CgroupV1Tree,
}

/// The generator's `cpu.shares`: ten times a CPU's worth of `kubepods`.
const GENERATOR_SHARES: &str = "10240";

impl GeneratorCgroup {
    /// Creates it; fails when the cpu controller is not writable cgroup v1.
    pub fn new() -> Result<Self, BenchError> {
        let tree = koord_test_support::cgroup::CgroupV1Tree::new(&["cpu"])
            .map_err(|e| BenchError::Skip(format!("no cgroup for the load generator: {e}")))?;
        tree.write("cpu", "", "cpu.shares", GENERATOR_SHARES)
            .map_err(BenchError::Io)?;
        Ok(GeneratorCgroup { tree })
    }

    /// Its `tasks` file, which the generator's thread joins.
    pub fn tasks_file(&self) -> PathBuf {
        self.tree.path("cpu", "").join("tasks")
    }
}

/// CPUs of this machine (the node).
pub fn host_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs the benchmark against `target`.
pub async fn run(opts: &Options, target: &mut Target) -> Result<Outcome, BenchError> {
    let all = policy::all();
    let mut policies: Vec<Policy> = Vec::new();
    for name in &opts.policies {
        let p = all
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| BenchError::Usage(format!("unknown policy {name:?}")))?;
        policies.push(p.clone());
    }
    if policies.first().map(|p| p.name) != Some("ls-alone") {
        return Err(BenchError::Usage(
            "the policies must start with ls-alone (the reference)".into(),
        ));
    }
    std::fs::create_dir_all(&opts.work_dir).map_err(BenchError::Io)?;
    let work = WorkDir(opts.work_dir.clone());
    let cpus = host_cpus();
    let mut outcome = Outcome {
        points: Vec::new(),
        capacity: BTreeMap::new(),
        be_alone: stressng::Throughput::new(),
        be_alone_batch_milli_cpu: None,
        skipped: Vec::new(),
    };
    let mut be_runs = 0usize;
    let generator = GeneratorCgroup::new()?;
    let tasks_file = Some(generator.tasks_file());
    for policy in &policies {
        if policy.needs_cpu_idle && !policy::cpu_idle_available(std::path::Path::new("/sys/fs/cgroup/cpu")) {
            let reason = "this kernel's cpu controller has no cpu.idle".to_string();
            eprintln!("policy {}: skipped: {reason}", policy.name);
            outcome.skipped.push((policy.name.into(), reason));
            continue;
        }
        eprintln!("policy {}: starting", policy.name);
        target.enter(policy, cpus).await?;
        let client = target.client()?;
        let node = target.node().to_string();
        let mut servers = Vec::new();
        let started = start_ls_servers(opts, &client, &node, &work, &mut servers).await;
        if let Err(error) = started {
            for server in &servers {
                let _ = delete_pod(&client, &opts.namespace, &server.pod).await;
            }
            target.leave().await;
            return Err(error);
        }
        let context = PolicyRun {
            servers: &servers,
            work: &work,
            client: &client,
            node: &node,
            cpus,
            tasks_file: tasks_file.clone(),
        };
        let result = run_policy(opts, policy, &context, &mut outcome, &mut be_runs).await;
        for server in &servers {
            delete_pod(&client, &opts.namespace, &server.pod).await?;
        }
        target.leave().await;
        result?;
    }
    Ok(outcome)
}

/// Starts one LS server pod per workload, pushing each onto `servers` once it runs (so the
/// caller can remove them when a later one fails).
async fn start_ls_servers(
    opts: &Options,
    client: &kube::Client,
    node: &str,
    work: &WorkDir,
    servers: &mut Vec<LsServer>,
) -> Result<(), BenchError> {
    for workload in &opts.workloads {
        let addr = workloads::free_port()?;
        let image = image(opts, workload.program());
        let pod = workloads::ls_pod(*workload, node, &image, &opts.ls_cpu_request, work, addr)?;
        let name = run_pod(client, &opts.namespace, pod).await?;
        servers.push(LsServer {
            workload: *workload,
            addr,
            pod: name,
        });
        wait_listening(addr).await?;
        if *workload == LsWorkload::Memcached {
            let value = vec![b'v'; 512];
            tokio::task::spawn_blocking(move || loadgen::memcache_set(addr, "koord-bench", &value))
                .await
                .map_err(|e| BenchError::Load(e.to_string()))??;
        }
    }
    Ok(())
}

/// What the points of one policy share.
struct PolicyRun<'a> {
    servers: &'a [LsServer],
    work: &'a WorkDir,
    client: &'a kube::Client,
    node: &'a str,
    cpus: usize,
    tasks_file: Option<PathBuf>,
}

async fn run_policy(
    opts: &Options,
    policy: &Policy,
    run: &PolicyRun<'_>,
    outcome: &mut Outcome,
    be_runs: &mut usize,
) -> Result<(), BenchError> {
    let PolicyRun {
        servers,
        work,
        client,
        node,
        cpus,
        ..
    } = *run;
    if policy.name == "ls-alone" {
        for server in servers {
            let (addr, protocol, window) = (server.addr, server.protocol(), opts.capacity_window);
            let connections = opts.connections.min(8);
            let tasks = run.tasks_file.clone();
            let capacity = tokio::task::spawn_blocking(move || {
                loadgen::measure_capacity(addr, protocol, connections, window, tasks)
            })
            .await
            .map_err(|e| BenchError::Load(e.to_string()))??;
            eprintln!("capacity {}: {capacity:.0} requests/s", server.workload.name());
            outcome.capacity.insert(server.workload.name().into(), capacity);
        }
    }
    if policy.be && outcome.be_alone.is_empty() {
        let mut alone = Vec::new();
        for _ in 0..opts.reps {
            let be = BeJob::start(opts, work, client, node, cpus, be_runs).await?;
            let batch = be.batch_milli_cpu;
            outcome.be_alone_batch_milli_cpu = Some(
                outcome
                    .be_alone_batch_milli_cpu
                    .map_or((batch, batch), |(lo, hi)| (lo.min(batch), hi.max(batch))),
            );
            alone.push(be.finish(opts, client).await?);
        }
        outcome.be_alone = stressng::mean(&alone);
        eprintln!("BE alone: {:?} bogo-ops/s", outcome.be_alone);
    }
    for rep in 0..opts.reps {
        for server in servers {
            let capacity = outcome
                .capacity
                .get(server.workload.name())
                .copied()
                .unwrap_or(0.0);
            for load in &opts.loads {
                let be = if policy.be {
                    Some(BeJob::start(opts, work, client, node, cpus, be_runs).await?)
                } else {
                    None
                };
                let spec = LoadSpec {
                    addr: server.addr,
                    protocol: server.protocol(),
                    rate: (capacity * f64::from(*load) / 100.0).max(1.0),
                    duration: opts.duration,
                    connections: opts.connections,
                    timeout: opts.timeout,
                    tasks_file: run.tasks_file.clone(),
                };
                let cpu0 = cpu_times();
                let result = tokio::task::spawn_blocking(move || loadgen::run_open_loop(spec))
                    .await
                    .map_err(|e| BenchError::Load(e.to_string()))??;
                let node_cpu = cpu_times().zip(cpu0).map_or(f64::NAN, |((b1, t1), (b0, t0))| {
                    (b1 - b0) as f64 / (t1 - t0).max(1) as f64
                });
                let be_batch_milli_cpu = be.as_ref().map(|job| job.batch_milli_cpu);
                let be_share = match be {
                    Some(job) => Some(stressng::share_of(
                        &job.finish(opts, client).await?,
                        &outcome.be_alone,
                    )?),
                    None => None,
                };
                let point = Point {
                    policy: policy.name.into(),
                    workload: server.workload.name().into(),
                    load_pct: *load,
                    p50_ms: result.quantile_ms(0.5),
                    p99_ms: result.quantile_ms(0.99),
                    p999_ms: result.quantile_ms(0.999),
                    due: result.due,
                    errors: result.errors,
                    timeouts: result.timeouts,
                    be_share,
                    be_batch_milli_cpu,
                    node_cpu,
                    loadavg: loadavg(),
                };
                eprintln!(
                    "  rep {rep} {} {load}%: p50 {:.2} p99 {:.2} p99.9 {:.2} ms, errors {} timeouts {} of {}, BE {}",
                    point.workload,
                    point.p50_ms,
                    point.p99_ms,
                    point.p999_ms,
                    point.errors,
                    point.timeouts,
                    point.due,
                    be_share.map_or("-".into(), |s| format!("{:.0} %", s * 100.0))
                );
                outcome.points.push(point);
            }
        }
    }
    Ok(())
}

fn image(opts: &Options, program: &str) -> String {
    opts.images
        .get(program)
        .cloned()
        .unwrap_or_else(|| format!("koord-bench-{program}:latest"))
}

/// How long a BE job waits for the node to offer batch CPU.
const BATCH_PATIENCE: Duration = Duration::from_secs(300);

/// A running BE stress-ng pod.
struct BeJob {
    pod: String,
    report: PathBuf,
    seconds: u64,
    batch_milli_cpu: u64,
}

impl BeJob {
    async fn start(
        opts: &Options,
        work: &WorkDir,
        client: &kube::Client,
        node: &str,
        cpus: usize,
        runs: &mut usize,
    ) -> Result<Self, BenchError> {
        *runs += 1;
        let seconds = (opts.warmup + opts.duration).as_secs_f64().ceil() as u64 + 1;
        let report = work.be_report(*runs);
        let _ = std::fs::remove_file(&report);
        // Extended resources cannot be overcommitted: the kubelet admits the pod only when the
        // node offers its batch-cpu. Every job asks for the same amount (the whole node unless
        // `--be-batch-cpu` says less), so BE throughput compares across policies; the manager
        // follows the node's reported usage, so after a busy phase (the capacity probe) it may
        // offer less for a report interval or two.
        let batch = opts.be_batch_milli_cpu.unwrap_or(cpus as u64 * 1000);
        let deadline = std::time::Instant::now() + BATCH_PATIENCE;
        let offered = loop {
            let offered = node_batch_milli_cpu(client, node).await?;
            if offered >= batch {
                break offered;
            }
            if std::time::Instant::now() > deadline {
                return Err(BenchError::Cluster(format!(
                    "node {node} offered {offered}m batch-cpu for {BATCH_PATIENCE:?}, the BE job asks {batch}m (--be-batch-cpu; is the machine busy?)"
                )));
            }
            eprintln!("waiting for {batch}m batch-cpu on {node} ({offered}m offered)");
            tokio::time::sleep(Duration::from_secs(5)).await;
        };
        tracing::info!(node, batch_milli_cpu = batch, "BE job");
        eprintln!("BE job {}: {batch}m batch-cpu ({offered}m offered)", *runs);
        let pod = workloads::be_pod(node, &image(opts, "stress-ng"), work, *runs, cpus, batch, seconds);
        let pod = run_pod(client, &opts.namespace, pod).await?;
        tokio::time::sleep(opts.warmup).await;
        Ok(BeJob {
            pod,
            report,
            seconds,
            batch_milli_cpu: batch,
        })
    }

    /// Waits for stress-ng's report, reads it and deletes the pod.
    async fn finish(self, opts: &Options, client: &kube::Client) -> Result<stressng::Throughput, BenchError> {
        let deadline = std::time::Instant::now() + Duration::from_secs(self.seconds + 30);
        let parsed = loop {
            if let Ok(text) = std::fs::read_to_string(&self.report)
                && text.trim_end().ends_with("...")
            {
                break stressng::parse_yaml(&text);
            }
            if std::time::Instant::now() > deadline {
                break Err(BenchError::StressNg(format!(
                    "no report at {}",
                    self.report.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        delete_pod(client, &opts.namespace, &self.pod).await?;
        parsed
    }
}

/// The node's `kubernetes.io/batch-cpu` allocatable, milli-cores (0 when absent).
async fn node_batch_milli_cpu(client: &kube::Client, node: &str) -> Result<u64, BenchError> {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let node = nodes
        .get(node)
        .await
        .map_err(|e| BenchError::Cluster(e.to_string()))?;
    let quantity = node
        .status
        .and_then(|s| s.allocatable)
        .and_then(|a| a.get(koord_api::names::RESOURCE_BATCH_CPU).cloned());
    Ok(quantity
        .and_then(|q| koord_api::ExactQuantity::from_k8s(&q).ok())
        .map_or(0, |v| u64::try_from(v.value()).unwrap_or(0)))
}

async fn wait_listening(addr: SocketAddr) -> Result<(), BenchError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(BenchError::Load(format!("nothing listens on {addr} after 30 s")));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// (busy, total) jiffies of all CPUs from `/proc/stat`.
fn cpu_times() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4)?;
    Some((total - idle, total))
}

/// The 1-minute load average.
pub fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}
