//! Fuzz targets: one function per kind of untrusted input, each of which must return (with a
//! value or an error) for every byte string, never panic, hang or allocate without bound.
//!
//! The targets are plain functions so the same code runs under three drivers: the AFL++
//! binary (`src/bin/koord-fuzz.rs`, feature `afl`, run by `scripts/fuzz.sh`), the corpus replay
//! test of this crate (`cargo test -p koord-fuzz`) and anyone reproducing a finding
//! (`koord-fuzz <target> < input`). Beyond "no panic" each target checks invariants a bug would
//! break (a quantity round-trips, an accepted cgroup name stays below its root, ...).

mod agent;
mod api;
mod apiserver;
mod components;

use std::fmt;

/// Everything fuzzed, by the name the driver and the corpus directories use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The slo-controller-config keys: parse, validate, merge with the last good config and
    /// resolve one node.
    Config,
    /// `koord-manager calc`: NodeSLO/NodeMetric/Pod/Node YAML to batch resources.
    Calc,
    /// `koordlet plan`: a node's objects to the cgroup writes the agent would make.
    Plan,
    /// The webhook: offline `mutate`/`validate` documents and raw AdmissionReview bodies.
    Webhook,
    /// cgroup and procfs file parsers (cpu.stat, memory.stat, meminfo, /proc/stat, PSI, cpu
    /// lists, flat keyed files).
    CgroupFiles,
    /// resctrl: schemata, cpuinfo flags, mount table, task lists.
    Resctrl,
    /// Kubernetes quantities.
    Quantity,
    /// Label selectors (typed, from JSON) and overlap detection.
    Selector,
    /// The embedded API server: label/field selector strings and patch bodies.
    Apiserver,
    /// Pod UIDs, container IDs and cgroup paths: whatever is accepted stays below the root.
    CgroupNames,
}

impl Target {
    /// Every target, in the order scripts run them.
    pub const ALL: [Target; 10] = [
        Target::Config,
        Target::Calc,
        Target::Plan,
        Target::Webhook,
        Target::CgroupFiles,
        Target::Resctrl,
        Target::Quantity,
        Target::Selector,
        Target::Apiserver,
        Target::CgroupNames,
    ];

    /// The name used on the command line and for `fuzz/corpus/<name>`.
    pub fn name(self) -> &'static str {
        match self {
            Target::Config => "config",
            Target::Calc => "calc",
            Target::Plan => "plan",
            Target::Webhook => "webhook",
            Target::CgroupFiles => "cgroup_files",
            Target::Resctrl => "resctrl",
            Target::Quantity => "quantity",
            Target::Selector => "selector",
            Target::Apiserver => "apiserver",
            Target::CgroupNames => "cgroup_names",
        }
    }

    /// The target named `name`.
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Feeds one input to the target.
    pub fn run(self, data: &[u8]) {
        match self {
            Target::Config => api::config(data),
            Target::Calc => components::calc(data),
            Target::Plan => components::plan(data),
            Target::Webhook => components::webhook(data),
            Target::CgroupFiles => agent::cgroup_files(data),
            Target::Resctrl => agent::resctrl(data),
            Target::Quantity => api::quantity(data),
            Target::Selector => api::selector(data),
            Target::Apiserver => apiserver::requests(data),
            Target::CgroupNames => agent::cgroup_names(data),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Inputs as text: parsers take `&str`, and invalid UTF-8 is the transport's problem (every
/// caller reads files and bodies as UTF-8 first), so it is replaced rather than skipped.
fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// Splits off the first byte as a selector among `n` variants of a target.
fn choose(data: &[u8], n: u8) -> (u8, &[u8]) {
    match data.split_first() {
        Some((first, rest)) => (first % n, rest),
        None => (0, data),
    }
}
