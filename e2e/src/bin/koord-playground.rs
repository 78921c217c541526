//! `koord-playground`: the embedded cluster with simulated nodes, for trying koordinator-rs
//! with kubectl, or watching the colocation story play on it.
//!
//! ```text
//! cargo run --release -p koord-e2e --bin koord-playground -- --story
//! cargo run --release -p koord-e2e --bin koord-playground -- --nodes 2
//! ```
//!
//! With `--story` it applies the seed examples, deploys LS and BE pods and plays LS load rising
//! and falling and a memory surge for `--duration`, showing each node live (a terminal table
//! with sparklines; one line per step when stdout is not a terminal), then prints a summary
//! and exits. Without it:
//!
//! Starts the embedded API server, installs the CRDs from `charts/koordinator/crds/` (skipped
//! with a log line when absent), the `koord-*` PriorityClasses and the seed-001
//! `slo-controller-config` ConfigMap, starts N simulated nodes (pods run as real processes in
//! real cgroups where the machine allows, a fake cgroupfs otherwise), then koord-webhook (with
//! its webhook configurations), koord-manager and one koordlet per node in-process (each can be
//! left out: `--no-webhook`, `--no-manager`, `--no-koordlet`), writes a kubeconfig and runs until
//! Ctrl-C or SIGTERM, then stops the components, kills every pod process and removes every
//! cgroup.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;
use koord_e2e::components::{Components, Selection};
use koord_e2e::setup;
use koord_testcluster::node::{FleetConfig, NodeSpec, SimulatedNodes};
use koord_testcluster::{ClusterOptions, TestCluster};

/// Run an embedded Kubernetes API server with simulated nodes for koordinator-rs.
#[derive(Debug, Parser)]
#[command(name = "koord-playground", version)]
struct Args {
    /// Number of simulated nodes (named sim-node-1 ..).
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// Where to write the kubeconfig (default: koord-playground.kubeconfig in the temp dir).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// CPU capacity of each node (Kubernetes quantity).
    #[arg(long, default_value = "4")]
    node_cpu: String,
    /// Memory capacity of each node (Kubernetes quantity).
    #[arg(long, default_value = "8Gi")]
    node_memory: String,
    /// Directory of CRD manifests to install.
    #[arg(long, default_value = "charts/koordinator/crds")]
    crds: PathBuf,
    /// Use a fake cgroupfs even where real cgroups are writable.
    #[arg(long)]
    fake_cgroups: bool,
    /// Also bind pods of this `schedulerName` (repeatable). Pods of any other scheduler stay
    /// Pending as on a real cluster without it; e.g. `--scheduler-name koord-scheduler` to try
    /// profiles that set it (the simulated scheduler fits batch resources as koord-scheduler
    /// does).
    #[arg(long = "scheduler-name", value_name = "NAME")]
    scheduler_names: Vec<String>,
    /// Listen address of the API server.
    #[arg(long, default_value = "127.0.0.1:0")]
    bind: std::net::SocketAddr,
    /// Do not start koord-manager.
    #[arg(long)]
    no_manager: bool,
    /// Do not start koord-webhook (nor register its webhook configurations).
    #[arg(long)]
    no_webhook: bool,
    /// Do not start a koordlet per node.
    #[arg(long)]
    no_koordlet: bool,
    /// Log filter (tracing env-filter syntax), also read from RUST_LOG. The story logs only
    /// warnings unless this is given.
    #[arg(long, env = "RUST_LOG")]
    log: Option<String>,
    /// Play the colocation story: seeds, LS and BE pods, LS load up and down, memory pressure,
    /// a live view, a summary; exits at the end.
    #[arg(long)]
    story: bool,
    /// How long the story plays, setup not counted (Go duration or seconds; at least 30s).
    #[arg(long, default_value = "90s", value_parser = koord_runtime::parse_duration)]
    duration: std::time::Duration,
    /// Show the story as plain lines even on a terminal.
    #[arg(long)]
    plain: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let default_log = if args.story { "warn" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::new(args.log.as_deref().unwrap_or(default_log));
    if story_on_terminal(&args) {
        // Log lines would tear the live view: they go to a file instead.
        let path = std::env::temp_dir().join("koord-playground-story.log");
        let file = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    if args.story {
        return run_story(&args).await;
    }

    let cluster = TestCluster::start(ClusterOptions {
        bind: args.bind,
        ..ClusterOptions::default()
    })
    .await
    .context("starting the API server")?;
    let kubeconfig = args
        .kubeconfig
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("koord-playground.kubeconfig"));
    cluster
        .write_kubeconfig(&kubeconfig)
        .with_context(|| format!("writing {}", kubeconfig.display()))?;
    setup::install_base(&cluster, &args.crds).await?;
    setup::apply_seed_config(&cluster).await?;

    let specs = (1..=args.nodes)
        .map(|i| {
            NodeSpec::new(&format!("sim-node-{i}"))
                .with_resource("cpu", &args.node_cpu)
                .with_resource("memory", &args.node_memory)
        })
        .collect();
    let mut config = FleetConfig {
        force_fake_cgroups: args.fake_cgroups,
        ..FleetConfig::default()
    };
    config
        .scheduler_names
        .extend(args.scheduler_names.iter().cloned());
    let nodes = SimulatedNodes::start(cluster.client()?, specs, config)
        .await
        .context("starting simulated nodes")?;

    let components = match Components::start(&cluster, nodes.nodes(), selection(&args)).await {
        Ok(components) => components,
        Err(error) => {
            nodes.shutdown().await;
            return Err(error).context("starting the components");
        }
    };

    print_usage(&cluster, &kubeconfig, &nodes, &components);
    wait_for_shutdown().await?;
    tracing::info!("shutting down: stopping components and pods, removing cgroups");
    components.shutdown(&cluster).await;
    nodes.shutdown().await;
    drop(cluster);
    Ok(())
}

fn selection(args: &Args) -> Selection {
    Selection {
        manager: !args.no_manager,
        webhook: !args.no_webhook,
        koordlet: !args.no_koordlet,
        ..Selection::none()
    }
}

fn print_usage(cluster: &TestCluster, kubeconfig: &Path, nodes: &SimulatedNodes, components: &Components) {
    let kc = kubeconfig.display();
    println!("\nkoord-playground is running: API server {}", cluster.url());
    println!("cgroups: {:?}", nodes.cgroup_tree().mode());
    for node in nodes.nodes() {
        println!(
            "  node {}: cgroup root {}, proc root {}, kubelet {}",
            node.name,
            node.cgroup_root.display(),
            node.proc_root.display(),
            node.pods_url
        );
    }
    match components.webhook_addr() {
        Some(addr) => println!(
            "koord-webhook: https://{addr} (mutating + validating webhook configurations registered)"
        ),
        None => println!("koord-webhook: not started"),
    }
    for koordlet in components.koordlets() {
        println!(
            "koordlet on {}: http://{}/healthz, /metrics",
            koordlet.node, koordlet.health_addr
        );
    }
    println!(
        "\nUse it with kubectl:\n  export KUBECONFIG={kc}\n  kubectl get nodes\n  kubectl -n koordinator-system get configmap slo-controller-config -o yaml"
    );
    println!(
        "  kubectl run burner --image=busybox --annotations=sim.koordinator.sh/cpu-load=0.5 -- sleep 3600"
    );
    println!(
        "\nPods run as processes: annotation sim.koordinator.sh/cpu-load (cores) and sim.koordinator.sh/memory (bytes),"
    );
    println!("or a stress/stress-ng command line. Ctrl-C stops everything and removes the cgroups.\n");
}

async fn wait_for_shutdown() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// Plays the story on a live terminal view (plain lines without a TTY or with `--plain`), then
/// prints the summary. Ctrl-C, `q` or SIGTERM stop it; everything is removed either way.
async fn run_story(args: &Args) -> anyhow::Result<()> {
    use koord_e2e::story::view::{lines::LinePrinter, tui::Tui};
    use koord_e2e::story::{StoryError, StoryOptions, play};

    let kubeconfig = args
        .kubeconfig
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("koord-playground.kubeconfig"));
    let options = StoryOptions {
        duration: args.duration,
        nodes: args.nodes,
        fake_cgroups: args.fake_cgroups,
        crds: args.crds.clone(),
        kubeconfig: Some(kubeconfig),
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        if wait_for_shutdown().await.is_ok() {
            on_signal.cancel();
        }
    });
    let result = if story_on_terminal(args) {
        let mut view = Tui::start(stop.clone())?;
        let result = play(&options, &mut view, stop).await;
        drop(view);
        result
    } else {
        let mut view = LinePrinter::new(std::io::stdout());
        play(&options, &mut view, stop).await
    };
    match result {
        Ok(summary) => {
            print!("{summary}");
            Ok(())
        }
        Err(StoryError::Interrupted) => {
            println!("interrupted: components stopped, pod processes killed, cgroups removed");
            Ok(())
        }
        Err(error) => Err(error).context("playing the story"),
    }
}

/// Whether the story shows its live view (stdout is a terminal and `--plain` is not given).
fn story_on_terminal(args: &Args) -> bool {
    use std::io::IsTerminal;
    args.story && !args.plain && std::io::stdout().is_terminal()
}
