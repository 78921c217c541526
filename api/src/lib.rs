//! # koord-api: the Koordinator vocabulary
//!
//! Everything the components say to each other, defined once and wire-compatible with upstream
//! Koordinator: the CRDs, the `slo-controller-config` ConfigMap, and the well-known labels,
//! annotations, resource names, QoS classes and priority classes.
//!
//! No I/O and no Kubernetes client live here: every function is pure, so the manager, the
//! webhook, koordlet and the offline `calc` / `plan` commands share one implementation.

pub mod config;
pub mod names;
pub mod nodeslo;
pub mod schema;
pub mod selector;

pub use config::{SloConfig, resolve_node};
pub use nodeslo::{NodeSLO, NodeSLOSpec};
