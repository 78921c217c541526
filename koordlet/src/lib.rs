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
//! - [`qos`]: the QoS strategies' pure decisions (BE limits, suppress, burst, eviction).
//! - [`states`]: the node's Node, Pods, NodeSLO and NodeMetric spec as one snapshot.

pub mod executor;
pub mod metrics;
pub mod qos;
pub mod report;
pub mod states;
pub mod system;
