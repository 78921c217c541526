//! Helpers shared by the workspace's tests.
//!
//! - [`vm`]: runs a host-built test binary inside a small qemu VM booted on a pure cgroup v2
//!   kernel, for the kernel rules a cgroup v1 host cannot exercise.

pub mod vm;
