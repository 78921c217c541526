//! Simulated nodes: a kubelet stand-in whose pods are real processes in real cgroups.
//!
//! [`SimulatedNodes::start`] registers Nodes through any `kube::Client`, binds pending pods to
//! nodes with room (a minimal scheduler that counts extended resources such as
//! `kubernetes.io/batch-cpu`), creates for every bound pod the cgroups a kubelet with the
//! cgroupfs driver creates, runs each container as python3 worker processes (CPU burner and/or
//! memory holder, see [`workload`] for the convention) or, when its command names an installed
//! `nginx`, `memcached` or `stress-ng`, as that real program ([`host_binary`]), reports the pod Running with
//! `containerd://` ids, serves the kubelet `/pods` endpoint for koordlet, and on delete or
//! eviction stops the processes, removes the cgroups and finishes the deletion.
//!
//! Each node exposes a cgroup root and a proc root ([`NodeInfo`]) for koordlet. Dropping the
//! fleet kills every process and removes every cgroup, also during a panic.

pub mod cgroup;
pub mod extender;
pub mod fakefs;
pub mod fit;
mod fleet;
pub mod host_binary;
mod koordlet_flags;
pub mod limits;
pub mod objects;
mod plan;
pub mod pods_endpoint;
pub mod process;
pub mod qos;
pub mod quantity;
pub mod runtime;
pub mod workload;

pub use cgroup::{CgroupError, CgroupMode, CgroupTree, NodeCgroups};
pub use extender::SchedulerExtender;
pub use fleet::{FleetConfig, NodeError, NodeInfo, SimulatedNodes};
pub use objects::NodeSpec;
pub use qos::KubeQos;
pub use workload::{ANNOTATION_CPU_LOAD, ANNOTATION_MEMORY, Workload};
