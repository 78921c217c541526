//! `koord-bench colocation`: LS tail latency and BE throughput with nginx, memcached and
//! stress-ng colocated on one node, per isolation policy. Embedded mode by default (the
//! simulated node runs the host's binaries in real cgroups, koordlet in-process); with
//! `--kubeconfig` and `--node` against a real cluster. See `docs/benchmarks.md`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use koord_e2e::bench::{self, BenchError, Options, report, target::Target, workloads::LsWorkload};
use koord_testcluster::node::host_binary::installed;

#[derive(Parser, Debug)]
#[command(name = "koord-bench", about = "koordinator-rs benchmarks with real workloads")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// LS latency (nginx, memcached under a fixed-rate load) and BE throughput (stress-ng) per
    /// isolation policy.
    Colocation(Colocation),
}

#[derive(clap::Args, Debug)]
struct Colocation {
    /// Repetitions of every point.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Measured window per point, seconds.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// BE warm-up before each window, seconds.
    #[arg(long, default_value_t = 3)]
    warmup: u64,
    /// LS loads, percent of the capacity measured with LS alone.
    #[arg(long, value_delimiter = ',', default_values_t = [30u32, 60, 85])]
    loads: Vec<u32>,
    /// Policies, starting with ls-alone: ls-alone,k8s,cfs-quota,cpuset,cpu-idle,cpuset+idle.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ls-alone,k8s,cfs-quota,cpuset,cpu-idle,cpuset+idle"
    )]
    policies: Vec<String>,
    /// LS workloads: nginx, memcached.
    #[arg(long, value_delimiter = ',', default_value = "nginx,memcached")]
    workloads: Vec<String>,
    /// About two minutes: one repetition, nginx only, 60 % load, short windows.
    #[arg(long)]
    quick: bool,
    /// Connections of the load generator.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Request timeout, milliseconds.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
    /// Write the PNG plot here.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write the Markdown table here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Real-cluster mode: this kubeconfig (the bench must run on `--node`).
    #[arg(long, requires = "node")]
    kubeconfig: Option<PathBuf>,
    /// Real-cluster mode: the node the pods go to (this machine).
    #[arg(long)]
    node: Option<String>,
    /// Namespace of the pods.
    #[arg(long, default_value = "koord-bench")]
    namespace: String,
    /// Real-cluster mode: image per program, `program=image` (default `koord-bench-<program>:latest`).
    #[arg(long = "image", value_parser = parse_image)]
    images: Vec<(String, String)>,
    /// Directory shared by the bench and the pods (a hostPath on the node).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// CPU request of each LS pod. On a real node it must fit beside the pods already there
    /// (e.g. `500m` for nginx and memcached on 2 CPUs next to the chart's components).
    #[arg(long, default_value = "1")]
    ls_cpu_request: String,
    /// batch-cpu (milli-cores) every BE job asks for; default the node's CPUs × 1000. koordlet
    /// makes it the job's CFS quota; on a real node it must be offered (the bench waits for it).
    #[arg(long)]
    be_batch_cpu: Option<u64>,
}

fn parse_image(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(p, i)| (p.to_string(), i.to_string()))
        .ok_or_else(|| format!("expected program=image, got {text:?}"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let Command::Colocation(args) = Cli::parse().command;
    match colocation(args).await {
        Err(BenchError::Skip(reason)) => {
            println!("skipped: {reason}");
            Ok(())
        }
        other => other.map_err(Into::into),
    }
}

async fn colocation(mut args: Colocation) -> Result<(), BenchError> {
    if args.quick {
        args.reps = 1;
        args.duration = 5;
        args.warmup = 2;
        args.loads = vec![60];
        args.workloads = vec!["nginx".into()];
    }
    if args.reps == 0
        || args.duration == 0
        || args.loads.is_empty()
        || args.loads.iter().any(|l| *l == 0 || *l > 200)
    {
        return Err(BenchError::Usage(
            "reps and duration must be positive, loads in 1..=200".into(),
        ));
    }
    let workloads = args
        .workloads
        .iter()
        .map(|w| LsWorkload::parse(w))
        .collect::<Result<Vec<_>, _>>()?;
    let tmp = tempfile::Builder::new()
        .prefix("koord-bench-")
        .tempdir()
        .map_err(BenchError::Io)?;
    let opts = Options {
        reps: args.reps,
        duration: Duration::from_secs(args.duration),
        warmup: Duration::from_secs(args.warmup),
        loads: args.loads.clone(),
        policies: args.policies.clone(),
        workloads,
        capacity_window: Duration::from_secs(if args.quick { 2 } else { 5 }),
        connections: args.connections,
        timeout: Duration::from_millis(args.timeout_ms),
        namespace: args.namespace.clone(),
        images: args.images.iter().cloned().collect::<BTreeMap<_, _>>(),
        work_dir: args.work_dir.clone().unwrap_or_else(|| tmp.path().to_path_buf()),
        ls_cpu_request: args.ls_cpu_request.clone(),
        be_batch_milli_cpu: args.be_batch_cpu,
    };
    let mut target = match (&args.kubeconfig, &args.node) {
        (Some(kubeconfig), Some(node)) => Target::real(kubeconfig, node, &opts.namespace).await?,
        _ => {
            let mut needed: Vec<&str> = opts.workloads.iter().map(|w| w.program()).collect();
            needed.push("stress-ng");
            let missing: Vec<&str> = needed.into_iter().filter(|p| installed(p).is_none()).collect();
            if !missing.is_empty() {
                return Err(BenchError::Skip(format!(
                    "{} not installed (scripts/install-bench-workloads.sh)",
                    missing.join(", ")
                )));
            }
            Target::embedded(&opts.namespace).await?
        }
    };
    let started = std::time::Instant::now();
    let outcome = bench::run(&opts, &mut target).await;
    target.leave().await;
    let outcome = outcome?;
    let rows = report::aggregate(&outcome.points, "ls-alone");
    let table = report::markdown(&rows);
    println!("\n{table}");
    for (workload, capacity) in &outcome.capacity {
        println!("capacity {workload}: {capacity:.0} requests/s (closed loop, LS alone)");
    }
    let alone: Vec<String> = outcome
        .be_alone
        .iter()
        .map(|(k, v)| format!("{k} {v:.1}"))
        .collect();
    let batch = match outcome.be_alone_batch_milli_cpu {
        Some((lo, hi)) if lo == hi => format!(" at {lo}m batch-cpu"),
        Some((lo, hi)) => format!(" at {lo}–{hi}m batch-cpu"),
        None => String::new(),
    };
    println!("BE alone (bogo-ops/s){batch}: {}", alone.join(", "));
    for (policy, reason) in &outcome.skipped {
        println!("{policy}: skipped: {reason}");
    }
    for line in report::goal_lines(&rows, 60, 0.10, 0.50) {
        println!("{line}");
    }
    println!(
        "{} CPUs, {} reps x {} s windows, took {:.0} s, loadavg at end {:.2}",
        bench::host_cpus(),
        opts.reps,
        args.duration,
        started.elapsed().as_secs_f64(),
        bench::loadavg()
    );
    if let Some(path) = &args.markdown {
        std::fs::write(path, &table).map_err(BenchError::Io)?;
    }
    if let Some(path) = &args.plot {
        bench::plot::write_png(&rows, path, 0.10, 0.50)?;
        println!("plot written to {}", path.display());
    }
    Ok(())
}
