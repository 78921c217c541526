//! # koord-manager: the Koordinator control plane
//!
//! Turns one ConfigMap (`slo-controller-config`) into per-node behaviour and publishes the
//! capacity BE pods are scheduled on:
//!
//! - `nodeslo`: one NodeSLO per Node, from the ConfigMap merged for that node.
//! - `nodemetric`: one NodeMetric per Node, carrying the metric collect policy.
//! - `noderesource`: `kubernetes.io/batch-cpu` / `batch-memory` in Node status.
//!
//! Every decision is a pure function over plain data ([`batch`]); the controllers observe the
//! cluster, call it, and act.

pub mod batch;
pub mod calc;
pub mod cli;
pub mod config_state;
pub mod controllers;
pub mod desired;
pub mod leader;
pub mod metrics;
pub mod mid;
pub mod plan;
pub mod pod_index;
pub mod run;
pub mod snapshot;
