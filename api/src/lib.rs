//! # koord-api: the Koordinator vocabulary
//!
//! Everything the components say to each other, defined once and wire-compatible with upstream
//! Koordinator: the CRDs, the `slo-controller-config` ConfigMap, and the well-known labels,
//! annotations, resource names, QoS classes and priority classes.
//!
//! No I/O and no Kubernetes client live here: every function is pure, so the manager, the
//! webhook, koordlet and the offline `calc` / `plan` commands share one implementation.

pub mod canonical_quantity;
pub mod config;
pub mod cpu_normalization;
#[cfg(feature = "crd")]
pub mod crds;
pub mod duration;
pub mod names;
pub mod nodemetric;
pub mod nodeslo;
pub mod priority;
pub mod profile;
pub mod qos;
pub mod quantity;
#[cfg(feature = "crd")]
pub mod reference;
pub mod resource_status;
pub mod resources;
pub mod schema;
pub mod selector;
pub mod topology;

pub use canonical_quantity::canonical_quantity;
pub use config::{SloConfig, resolve_node};
#[cfg(feature = "crd")]
pub use nodemetric::NodeMetric;
pub use nodemetric::{NodeMetricSpec, NodeMetricStatus};
#[cfg(feature = "crd")]
pub use nodeslo::NodeSLO;
pub use nodeslo::NodeSLOSpec;
pub use priority::PriorityClass;
#[cfg(feature = "crd")]
pub use profile::ClusterColocationProfile;
pub use profile::ClusterColocationProfileSpec;
pub use qos::{KubeQoSClass, QoSClass};
pub use quantity::{ExactQuantity, QuantityError, ResourceAmounts, ResourceList};
