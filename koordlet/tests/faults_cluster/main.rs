//! Embedded cluster (tier 4) fault scenarios for koordlet, each on its own cluster and
//! simulated node (pods are real processes in real cgroups; without writable cgroups every
//! scenario prints `skipped: <reason>`):
//! - [`outage`]: the API server unreachable for `KOORD_OUTAGE_SECONDS` (default 30; the long
//!   run: `KOORD_OUTAGE_SECONDS=300 cargo test -p koordlet --test faults_cluster outage`);
//! - [`restart`]: a koordlet restarted on a steady node writes nothing in its first rounds;
//! - [`watches`]: every watch ended with 410 Gone at once; the NodeSLO deleted and recreated.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

#[path = "../common/mod.rs"]
mod common;

mod cut;
mod env;
mod outage;
mod restart;
mod watches;

/// One scenario at a time: they read node memory and CPU of a shared machine.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
