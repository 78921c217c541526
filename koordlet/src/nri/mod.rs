//! Runtime hooks over NRI (containerd's Node Resource Interface): koordlet adjusts a BE
//! container's CPU shares, CFS quota and memory limit, a container's cpuset under the CPU set
//! policies, and its resctrl class, inside the runtime before the container starts, instead of
//! after the next QoS round. The values come from the same decision code as the reconcile loop
//! ([`koordlet_core::strategies::be_limits`], [`koordlet_core::strategies::cpuset_policy`],
//! [`koordlet_core::strategies::resctrl::ResctrlClasses`]), so neither undoes the other.
//!
//! - [`mux`]: NRI's socket multiplexer (logical connections over one unix socket).
//! - [`ttrpc`]: the unary subset of ttrpc spoken on each logical connection.
//! - [`api`]: the NRI messages koordlet uses, hand-declared prost structs.
//! - [`hooks`]: a pod and container in, the adjustment out (pure but for the pod cgroup's CPUs).
//! - [`rdt`]: the resctrl class of a container being created.
//! - [`pod_cgroups`]: the pod cgroup a sandbox stands for, on this node's tree.
//! - [`session`]: one registered connection to the runtime, and the reconnect loop around it.
//! - [`state`]: the connection state and the NRI metrics.
//!
//! Failure policy: the container always starts. A hook that cannot decide within
//! [`PluginConfig::reply_deadline`] (well inside the runtime's 2 s request timeout) answers
//! "no change", logs it and counts it; the reconcile loop applies the limits on its next round.
//! A value the runtime would refuse is never sent: no cpuset outside the pod cgroup's CPUs (v1),
//! no resctrl class naming a group that does not exist.

pub mod api;
pub mod hooks;
pub mod mux;
pub mod pod_cgroups;
pub mod rdt;
pub mod session;
pub mod state;
pub mod ttrpc;

use std::path::PathBuf;
use std::time::Duration;

pub use hooks::{HookSettings, PodCgroup, PodCgroups, RuntimeHooks};
pub use pod_cgroups::NodePodCgroups;
pub use rdt::{NoRdtClass, RdtAvailability};
pub use session::{NriHandler, run_plugin};
pub use state::{ConnectionState, NriTelemetry};

/// The runtime's NRI socket when nothing else is configured.
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";
/// The name koordlet registers under (upstream's, so operators recognise it in runtime logs).
pub const PLUGIN_NAME: &str = "koordlet_nri";
/// The invocation index (first among plugins, as upstream).
pub const PLUGIN_INDEX: &str = "00";

/// What can go wrong on an NRI connection.
#[derive(Debug, thiserror::Error)]
pub enum NriError {
    /// Socket I/O.
    #[error("NRI socket: {0}")]
    Io(#[source] std::io::Error),
    /// Connecting to the runtime's socket.
    #[error("connecting to NRI socket {path}: {source}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A frame or message above the protocol's size limit.
    #[error("{what} of {len} bytes exceeds the limit of {max} bytes")]
    Oversized {
        /// Frame or message.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The peer closed the socket in the middle of a frame.
    #[error("NRI socket closed inside a {0}")]
    Truncated(&'static str),
    /// Connection ID 0 is reserved by the multiplexer.
    #[error("mux connection 0 is reserved")]
    ReservedConnection,
    /// A message that does not decode.
    #[error("decoding {what}: {source}")]
    Decode {
        /// Which message.
        what: &'static str,
        /// Why.
        #[source]
        source: prost::DecodeError,
    },
    /// The runtime refused the registration.
    #[error("the runtime refused registration: code {code}: {message}")]
    Refused {
        /// gRPC code.
        code: i32,
        /// The runtime's message.
        message: String,
    },
    /// No answer to registration in time.
    #[error("no answer to registration within {0:?}")]
    RegistrationTimeout(Duration),
    /// The runtime closed the connection.
    #[error("the runtime closed the NRI connection")]
    Closed,
}

/// How koordlet connects and answers.
#[derive(Debug, Clone)]
pub struct PluginConfig {
    /// The runtime's NRI socket.
    pub socket: PathBuf,
    /// Registered plugin name.
    pub name: String,
    /// Registered invocation index (two digits).
    pub index: String,
    /// The longest a hook may take before koordlet answers "no change" (the container then
    /// starts as the kubelet asked; the reconcile loop applies the limits).
    pub reply_deadline: Duration,
    /// How long to wait for the runtime to accept the registration.
    pub registration_timeout: Duration,
    /// First reconnect delay; doubles up to [`PluginConfig::max_backoff`].
    pub initial_backoff: Duration,
    /// Longest reconnect delay.
    pub max_backoff: Duration,
}

impl PluginConfig {
    /// Upstream's name and index, a 1 s reply deadline (half of containerd's default 2 s
    /// request timeout), 5 s registration timeout, 1 s to 30 s backoff.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        PluginConfig {
            socket: socket.into(),
            name: PLUGIN_NAME.to_string(),
            index: PLUGIN_INDEX.to_string(),
            reply_deadline: Duration::from_secs(1),
            registration_timeout: Duration::from_secs(5),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}
