//! `koord-soak`: the pod-churn soak of koordlet and koord-manager (see `docs/reliability.md`).
//!
//! ```text
//! cargo run --release -p koord-e2e --bin koord-soak -- --duration 30m --plot docs/soak.png
//! ```
//!
//! Starts the embedded cluster, one simulated node with `--pods` pods (real processes in real
//! cgroups where the machine allows), koordlet and koord-manager in processes of their own,
//! then deletes the oldest pod and creates a new one every `--churn-every` for `--duration`,
//! sampling both components' RSS, open descriptors and threads and the node's cgroup
//! directories and tasks. Writes `samples.csv` (and the component logs) to `--out`, prints the
//! verdict per figure and exits 1 when a figure grew beyond its bound.
//!
//! `koord-soak koordlet ARGS` and `koord-soak manager ARGS` run one component (the soak starts
//! itself that way); they take the component's own flags.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use koord_e2e::soak::{self, SoakConfig, plot, verdict};

/// The pod-churn soak.
#[derive(Debug, Parser)]
#[command(name = "koord-soak", about)]
struct Args {
    /// How long pods are churned, after the population runs (`30m`, `45s`).
    #[arg(long, default_value = "30m", value_parser = koord_runtime::parse_interval)]
    duration: Duration,
    /// The first part of the churn the verdict leaves out (koordlet's metric rings fill up).
    #[arg(long, default_value = "3m", value_parser = koord_runtime::parse_interval)]
    warm_up: Duration,
    /// Pods kept on the node.
    #[arg(long, default_value_t = 250)]
    pods: usize,
    /// One pod deleted and one created per interval.
    #[arg(long, default_value = "1s", value_parser = koord_runtime::parse_interval)]
    churn_every: Duration,
    /// Time between samples.
    #[arg(long, default_value = "10s", value_parser = koord_runtime::parse_interval)]
    sample_every: Duration,
    /// koordlet's `--collect-interval` (below the default 1 s: accelerated).
    #[arg(long, default_value = "250ms")]
    collect_interval: String,
    /// Output directory: samples.csv, kubeconfig, component logs.
    #[arg(long, default_value = "target/soak")]
    out: PathBuf,
    /// Draw the plot into this PNG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// TrueType font for the plot's text.
    #[arg(long, default_value = plot::DEFAULT_FONT)]
    font: PathBuf,
}

fn main() -> anyhow::Result<ExitCode> {
    let mut argv = std::env::args_os();
    let program = argv.next().unwrap_or_default();
    let rest: Vec<_> = argv.collect();
    match rest.first().and_then(|a| a.to_str()) {
        Some("koordlet") => return Ok(ExitCode::from(koordlet::run(rest).clamp(0, 255) as u8)),
        Some("manager") => return run_manager(rest),
        _ => {}
    }
    let args = Args::parse_from(std::iter::once(program).chain(rest));
    // The simulated node logs every pod start and stop: warnings only, unless RUST_LOG says more.
    koord_runtime::init_logging(koord_runtime::LogFormat::Text, "warn,koord_e2e::soak=info")?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = SoakConfig {
        duration: args.duration,
        warm_up: args.warm_up,
        pods: args.pods,
        churn_every: args.churn_every,
        sample_every: args.sample_every,
        collect_interval: args.collect_interval.clone(),
        out_dir: args.out.clone(),
        component_exe: std::env::current_exe().context("this binary's path")?,
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let report = runtime.block_on(soak::run(&config))?;
    println!(
        "soak: {} pods, {} churned over {:?} (population ran in {:.1?}), {} samples, load1 median {:.2}",
        args.pods,
        report.churned,
        args.duration,
        report.population_took,
        report.samples.len(),
        {
            let mut loads: Vec<f64> = report.samples.iter().map(|s| s.load1).collect();
            loads.sort_by(f64::total_cmp);
            loads.get(loads.len() / 2).copied().unwrap_or(0.0)
        }
    );
    if let Some(png) = &args.plot {
        let title = format!(
            "koordlet and koord-manager under pod churn: {} pods, 1 pod / {:?}, {:?}",
            args.pods, args.churn_every, args.duration
        );
        plot::draw(&report.samples, png, &args.font, &title)?;
        println!("plot: {}", png.display());
    }
    let Some(outcomes) = verdict::judge(&report.samples, args.warm_up) else {
        println!("too few samples to judge; run longer or sample more often");
        return Ok(ExitCode::FAILURE);
    };
    for outcome in &outcomes {
        println!("{outcome}");
    }
    Ok(if outcomes.iter().all(|o| o.flat) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn run_manager(argv: Vec<std::ffi::OsString>) -> anyhow::Result<ExitCode> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = koord_manager::cli::Cli::parse_from(argv);
    koord_runtime::init_logging(cli.run.log_format, "info")?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let client = koord_manager::run::client(&cli.run).await?;
        koord_manager::run::run(cli.run, client, koord_runtime::shutdown_signal()).await?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}
