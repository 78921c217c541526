//! `koord-playground`: the embedded cluster with simulated nodes, for trying koordinator-rs
//! with kubectl.
//!
//! ```text
//! cargo run --release -p koord-e2e --bin koord-playground -- --nodes 2
//! ```
//!
//! Starts the embedded API server, installs the CRDs from `charts/koordinator/crds/` (skipped
//! with a log line when absent), applies the seed-001 `slo-controller-config` ConfigMap, starts
//! N simulated nodes (pods run as real processes in real cgroups where the machine allows, a
//! fake cgroupfs otherwise), writes a kubeconfig and runs until Ctrl-C or SIGTERM, then kills
//! every pod process and removes every cgroup.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;
use koord_testcluster::node::{FleetConfig, NodeInfo, NodeSpec, SimulatedNodes};
use koord_testcluster::{ClusterOptions, TestCluster};
use serde_json::json;

/// The seed-001 ConfigMap: colocation on, memory eviction above 70 %.
const SEED_001_COLOCATION: &str = "{\n  \"enable\": true\n}\n";
const SEED_001_RESOURCE_THRESHOLD: &str =
    "{\n  \"clusterStrategy\": {\n    \"enable\": true,\n    \"memoryEvictThresholdPercent\": 70\n  }\n}\n";

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
    /// Listen address of the API server.
    #[arg(long, default_value = "127.0.0.1:0")]
    bind: std::net::SocketAddr,
    /// Log filter (tracing env-filter syntax), also read from RUST_LOG.
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    log: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&args.log))
        .init();
    let _ = rustls::crypto::ring::default_provider().install_default();

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
    install_crds(&cluster, &args.crds).await?;
    apply_seed_config(&cluster).await?;

    let specs = (1..=args.nodes)
        .map(|i| {
            NodeSpec::new(&format!("sim-node-{i}"))
                .with_resource("cpu", &args.node_cpu)
                .with_resource("memory", &args.node_memory)
        })
        .collect();
    let config = FleetConfig {
        force_fake_cgroups: args.fake_cgroups,
        ..FleetConfig::default()
    };
    let nodes = SimulatedNodes::start(cluster.client()?, specs, config)
        .await
        .context("starting simulated nodes")?;

    // Component runners go here: manager, webhook and one koordlet per node (see each
    // component's issue); each gets the cluster's kubeconfig and, for koordlet, the node's
    // NodeInfo (cgroup root, proc root, /pods URL).
    start_components(&cluster, nodes.nodes());

    print_usage(&cluster, &kubeconfig, &nodes);
    wait_for_shutdown().await?;
    tracing::info!("shutting down: stopping pods, removing cgroups");
    nodes.shutdown().await;
    drop(cluster);
    Ok(())
}

async fn install_crds(cluster: &TestCluster, dir: &Path) -> anyhow::Result<()> {
    if !dir.is_dir() {
        tracing::info!(dir = %dir.display(), "no CRD directory; skipping CRD installation");
        return Ok(());
    }
    let names = cluster
        .install_crds_from_dir(dir)
        .await
        .with_context(|| format!("installing CRDs from {}", dir.display()))?;
    tracing::info!(count = names.len(), ?names, "CRDs installed");
    Ok(())
}

async fn apply_seed_config(cluster: &TestCluster) -> anyhow::Result<()> {
    use koord_api::names::{
        DEFAULT_CONFIG_NAMESPACE, DEFAULT_SLO_CONFIG_NAME, KEY_COLOCATION_CONFIG,
        KEY_RESOURCE_THRESHOLD_CONFIG,
    };
    let data: std::collections::BTreeMap<&str, &str> = [
        (KEY_COLOCATION_CONFIG, SEED_001_COLOCATION),
        (KEY_RESOURCE_THRESHOLD_CONFIG, SEED_001_RESOURCE_THRESHOLD),
    ]
    .into();
    cluster
        .apply_object(json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": DEFAULT_CONFIG_NAMESPACE } }))
        .await
        .context("creating namespace koordinator-system")?;
    cluster
        .apply_object(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": DEFAULT_SLO_CONFIG_NAME, "namespace": DEFAULT_CONFIG_NAMESPACE },
            "data": data,
        }))
        .await
        .context("applying the seed-001 slo-controller-config")?;
    Ok(())
}

/// Where component runners start; none exists yet, so this only says so.
fn start_components(_cluster: &TestCluster, nodes: &[NodeInfo]) {
    tracing::info!(
        nodes = nodes.len(),
        "no component runners yet (manager, webhook, koordlet come with their issues)"
    );
}

fn print_usage(cluster: &TestCluster, kubeconfig: &Path, nodes: &SimulatedNodes) {
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
