//! Helpers every koordinator-rs test suite needs and none should write again.
//!
//! - [`poll`]: wait until a probe answers (async and blocking), with a message naming what was
//!   awaited when it never does.
//! - [`cgroup`]: a real cgroup v1 subtree that is removed on drop (also while a panic unwinds),
//!   after the processes inside are killed or moved out; plus the removal and stale-run sweep the
//!   embedded cluster's simulated nodes use.
//! - [`scrape`]: a component's `/metrics` read over HTTP, and one sample of it.
//! - [`vm`]: runs a host-built test binary inside a small qemu VM booted on a pure cgroup v2
//!   kernel, for the kernel rules a cgroup v1 host cannot exercise.

pub mod cgroup;
pub mod footprint;
pub mod poll;
pub mod scrape;
pub mod vm;

pub use cgroup::{CgroupV1Tree, Unavailable};
pub use poll::{Poll, TimedOut, eventually, wait_for, wait_for_blocking};
pub use scrape::{free_loopback_addr, sample, scrape};
