//! # koord-webhook: admission for Koordinator colocation
//!
//! Pods join colocation through ClusterColocationProfiles without their owners editing every
//! manifest; this crate decides how a pod is mutated and whether pods, the
//! `slo-controller-config` ConfigMap and profiles are valid. Decisions are pure functions over
//! typed objects ([`mutate`], [`validate`]); the HTTPS server ([`server`]) and the offline
//! commands ([`offline`]) are thin adapters around the same code.

pub mod certs;
pub mod cli;
pub mod cluster;
pub mod metrics;
pub mod mutate;
pub mod offline;
pub mod review;
pub mod serve;
pub mod server;
pub mod tls;
pub mod validate;
pub mod view;
pub mod wire;
