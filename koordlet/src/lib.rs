//! # koordlet: the Koordinator node agent
//!
//! This crate is a library with a thin binary on top, so the e2e crate can run it in-process.
//! Layout (see `DESIGN.md`): decisions are pure functions over plain data that return plans;
//! the edges ([`system`], [`executor`]) do the I/O.
//!
//! - [`system`]: cgroup v1/v2 and `/proc` access; every root is a parameter.
//! - [`executor`]: applies plans of cgroup writes safely (validated, ordered, skip-if-equal,
//!   audited, dry-run).
//! - [`metrics`]: bounded in-memory metric storage with window queries.
//! - [`koordlet_core`]: the pure decisions (strategies, engine, cgroup paths, the typed write).
//! - [`evictor`]: evicts the pods the eviction strategies pick, through the API server.
//! - [`suppress_loop`]: the 50 ms fast loop of CPU suppress on a few node-level counters.
//! - [`states`]: the node's Node, Pods, NodeSLO and NodeMetric spec as one snapshot.

pub mod agent;
pub mod cli;
pub mod evictor;
pub mod executor;
pub mod gather;
pub mod metrics;
pub mod plan;
pub mod qos_loop;
pub mod report;
pub mod states;
pub mod suppress_loop;
pub mod system;
pub mod telemetry;

/// Runs koordlet with command-line `args` (program name first); returns the process exit code.
/// In-process callers (the e2e crate) use this or [`agent::run_agent`] directly.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::Parser;
    let args = match cli::Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match args.command {
        Some(cli::Command::Plan {
            file,
            cgroup_version,
            cgroup_driver,
            cgroup_root,
            feature_gates,
        }) => run_plan(&file, cgroup_version, cgroup_driver, cgroup_root, &feature_gates),
        None => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            if let Err(e) = koord_runtime::init_logging(args.agent.log_format, "info") {
                eprintln!("koordlet: {e}");
                return 2;
            }
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("koordlet: cannot start the async runtime: {e}");
                    return 1;
                }
            };
            match runtime.block_on(agent::run_agent(args.agent, koord_runtime::shutdown_signal())) {
                Ok(()) => 0,
                Err(e) => {
                    tracing::error!(error = %e, "koordlet failed");
                    eprintln!("koordlet: {e}");
                    1
                }
            }
        }
    }
}

fn run_plan(
    file: &str,
    version: cli::VersionArg,
    driver: cli::DriverArg,
    root: Option<std::path::PathBuf>,
    feature_gates: &str,
) -> i32 {
    let gates = match koordlet_core::FeatureGates::parse(feature_gates) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("koordlet plan: {e}");
            return 2;
        }
    };
    use std::io::Read;
    let text = if file == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map(|_| s)
    } else {
        std::fs::read_to_string(file)
    };
    let text = match text {
        Ok(t) => t,
        Err(e) => {
            eprintln!("koordlet plan: cannot read {file}: {e}");
            return 2;
        }
    };
    let input = match plan::parse_input(&text) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("koordlet plan: {file}: {e}");
            return 2;
        }
    };
    let version = match version {
        cli::VersionArg::V1 => system::CgroupVersion::V1,
        cli::VersionArg::V2 => system::CgroupVersion::V2,
    };
    let driver = match driver {
        cli::DriverArg::Systemd => system::CgroupDriver::Systemd,
        _ => system::CgroupDriver::Cgroupfs,
    };
    let cgroups = root.map(|r| {
        let layout = match version {
            system::CgroupVersion::V1 => system::CgroupLayout::v1(),
            system::CgroupVersion::V2 => system::CgroupLayout::v2(),
        };
        std::sync::Arc::new(system::Cgroups::new(r, layout))
    });
    let out = plan::plan(
        &input,
        &plan::PlanOptions {
            version,
            driver,
            cgroups,
            gates,
            collect_interval_seconds: 1.0,
        },
    );
    match serde_json::to_string_pretty(&out) {
        Ok(s) => {
            println!("{s}");
            0
        }
        Err(e) => {
            eprintln!("koordlet plan: {e}");
            1
        }
    }
}
