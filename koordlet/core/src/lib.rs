//! # koordlet-core: the node agent's decisions
//!
//! Everything koordlet decides, as pure functions over plain data: the QoS strategies and the
//! engine that runs them in one round, the fast-suppress state machine, the cgroup path
//! arithmetic of the kubelet's layout and the one typed [`CgroupWrite`]. Nothing here reads a
//! file, a clock or the API server: the agent (crate `koordlet`) observes, calls the core and
//! applies the writes it returns, and `koordlet plan` prints the same writes offline.
//!
//! - [`paths`]: kubepods, QoS, pod, container and host-application cgroup directories.
//! - [`resource`]: the table of cgroup files (v1 name, v2 name, value domain, conversion).
//! - [`cpuset`]: CPU lists.
//! - [`pod`]: the facts about one pod every part needs, resolved once.
//! - [`features`]: feature gates with upstream's names and defaults.
//! - [`prediction`]: decaying usage histograms and the prod-reclaimable peak predictors.
//! - [`resctrl`]: schemata lines, resctrl tree facts, class groups and the schemata write.
//! - [`strategies`]: be_limits, cpu_suppress, cpu_burst, cpu_evict, memory_evict, cpu_qos,
//!   fast suppress and the engine.
//! - [`write`]: the typed write.

pub mod cpuset;
pub mod error;
pub mod features;
pub mod paths;
pub mod pod;
pub mod prediction;
pub mod resctrl;
pub mod resource;
pub mod strategies;
pub mod write;

pub use cpuset::CpuSet;
pub use error::{NameError, ParseError};
pub use features::FeatureGates;
pub use paths::{CgroupDir, CgroupDriver, ContainerId, ContainerRuntime, KubeCgroupPaths, PodUid};
pub use pod::{ContainerMeta, PodMeta};
pub use resource::{CgroupResource, CgroupValue, CgroupVersion, Domain, Subsystem};
pub use write::CgroupWrite;
