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
//! - [`resctrl_loop`]: the class groups' cache and bandwidth (resctrl) and their tasks.
//! - [`suppress_loop`]: the 50 ms fast loop of CPU suppress on a few node-level counters.
//! - [`states`]: the node's Node, Pods, NodeSLO and NodeMetric spec as one snapshot.
//! - [`prediction`]: the peak predictor behind the NodeMetric's `prodReclaimableMetric`.

pub mod act;
pub mod agent;
pub mod cli;
pub mod command;
pub mod cpuset_state;
pub mod event_backlog;
pub mod evict_fallback;
pub mod evictor;
pub mod executor;
pub mod gather;
pub mod metrics;
pub mod nri;
pub mod plan;
pub mod prediction;
pub mod qos_loop;
pub mod report;
pub mod resctrl_loop;
pub mod states;
pub mod suppress_loop;
pub mod system;
pub mod system_config;
pub mod telemetry;
pub mod upstream_metrics;

pub use command::run;
/// Feature gates are the agent's flag vocabulary too (`--feature-gates`); they live in the core.
pub use koordlet_core::features;
