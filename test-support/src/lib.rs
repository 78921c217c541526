//! Helpers every koordinator-rs test suite needs and none should write again.
//!
//! - [`poll`]: wait until a probe answers (async and blocking), with a message naming what was
//!   awaited when it never does.
//! - [`cgroup`]: a real cgroup v1 subtree that is removed on drop (also while a panic unwinds),
//!   after the processes inside are killed or moved out; plus the removal and stale-run sweep the
//!   embedded cluster's simulated nodes use.

pub mod cgroup;
pub mod poll;

pub use cgroup::{CgroupV1Tree, Unavailable};
pub use poll::{Poll, TimedOut, eventually, wait_for, wait_for_blocking};
