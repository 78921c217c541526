//! What a simulated container does: burn CPU and/or hold memory.
//!
//! # Convention
//!
//! For each container, in this order (the first that says something about a dimension wins):
//!
//! 1. Pod annotation `sim.koordinator.sh/cpu-load.<container-name>` /
//!    `sim.koordinator.sh/memory.<container-name>`: this container only.
//! 2. Pod annotation `sim.koordinator.sh/cpu-load` / `sim.koordinator.sh/memory`: every
//!    container of the pod. `cpu-load` is in cores (`"0.5"`, `"500m"`, `"2"`), `memory` is a
//!    Kubernetes quantity of bytes (`"200Mi"`).
//! 3. The container's command and args, when they run `stress` or `stress-ng` (also inside
//!    `sh -c "..."`; a `stress-ng` command runs the real program instead when it is installed,
//!    see [`super::host_binary`]),
//!    or as args of an image whose name contains `stress`:
//!    `-c/--cpu N` burns N full cores (stress-ng: times `-l/--cpu-load P`%),
//!    `-m/--vm N` with `--vm-bytes B` holds N×B bytes (stress default 256M; sizes as stress reads
//!    them: `k`, `m`, `g` are powers of 1024). Other flags (`--vm-keep`, `--timeout`, `--io`) are
//!    accepted and ignored.
//! 4. Otherwise the container idles (a sleeping process, so its cgroup still has a task).
//!
//! A CPU load is duty-cycled: each worker process is busy for `load` of every 100 ms period;
//! loads above one core use `ceil(load)` worker processes. Memory is allocated and every page
//! touched, so it counts as resident (rss) in the container's memory cgroup.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Container;
use thiserror::Error;

use super::quantity::{QuantityError, parse_milli, parse_units};

/// Pod annotation: CPU cores each container burns (`"0.5"`, `"500m"`); suffix `.<container>`
/// for one container.
pub const ANNOTATION_CPU_LOAD: &str = "sim.koordinator.sh/cpu-load";
/// Pod annotation: bytes each container allocates and touches (`"200Mi"`); suffix
/// `.<container>` for one container.
pub const ANNOTATION_MEMORY: &str = "sim.koordinator.sh/memory";

/// The default `--vm-bytes` of `stress`.
const STRESS_DEFAULT_VM_BYTES: u64 = 256 << 20;

/// What one container's processes do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Workload {
    /// CPU to burn, in milli-cores.
    pub cpu_milli: u64,
    /// Memory to allocate and touch, in bytes.
    pub memory_bytes: u64,
}

/// Why a container's workload could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WorkloadError {
    /// An annotation holds something that is not a quantity.
    #[error("annotation {key}: {source}")]
    Annotation {
        /// The annotation key.
        key: String,
        /// The parse error.
        source: QuantityError,
    },
    /// A negative load or size.
    #[error("{what} must not be negative, got {value:?}")]
    Negative {
        /// Which setting.
        what: String,
        /// The text given.
        value: String,
    },
    /// A stress flag without a readable value.
    #[error("stress flag {flag}: cannot read value {value:?}")]
    StressFlag {
        /// The flag.
        flag: String,
        /// The value given (empty when missing).
        value: String,
    },
}

/// Reads the container's workload from the pod annotations and its command (see module docs).
pub fn container_workload(
    annotations: &BTreeMap<String, String>,
    container: &Container,
) -> Result<Workload, WorkloadError> {
    let from_command = command_workload(container)?;
    let cpu = annotation(annotations, ANNOTATION_CPU_LOAD, &container.name, parse_milli)?;
    let memory = annotation(annotations, ANNOTATION_MEMORY, &container.name, parse_units)?;
    Ok(Workload {
        cpu_milli: cpu.map_or(Ok(from_command.cpu_milli), |(key, v)| non_negative(&key, v))?,
        memory_bytes: memory.map_or(Ok(from_command.memory_bytes), |(key, v)| non_negative(&key, v))?,
    })
}

fn annotation(
    annotations: &BTreeMap<String, String>,
    base: &str,
    container: &str,
    parse: fn(&str) -> Result<i128, QuantityError>,
) -> Result<Option<(String, i128)>, WorkloadError> {
    for key in [format!("{base}.{container}"), base.to_string()] {
        if let Some(text) = annotations.get(&key) {
            let value = parse(text).map_err(|source| WorkloadError::Annotation {
                key: key.clone(),
                source,
            })?;
            return Ok(Some((key, value)));
        }
    }
    Ok(None)
}

fn non_negative(what: &str, value: i128) -> Result<u64, WorkloadError> {
    u64::try_from(value).map_err(|_| WorkloadError::Negative {
        what: what.to_string(),
        value: value.to_string(),
    })
}

/// The workload a `stress`/`stress-ng` command line asks for; idle for any other command.
pub fn command_workload(container: &Container) -> Result<Workload, WorkloadError> {
    let tokens: Vec<&str> = container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .flat_map(|t| t.split_whitespace())
        .collect();
    let program = |t: &&str| matches!(t.rsplit('/').next(), Some("stress" | "stress-ng"));
    let flags: &[&str] = match tokens.iter().position(program) {
        Some(at) => &tokens[at + 1..],
        None if container.image.as_deref().is_some_and(|i| i.contains("stress")) => &tokens,
        None => return Ok(Workload::default()),
    };
    parse_stress_flags(flags)
}

fn parse_stress_flags(tokens: &[&str]) -> Result<Workload, WorkloadError> {
    let mut cpu_workers: u64 = 0;
    let mut cpu_percent: u64 = 100;
    let mut vm_workers: u64 = 0;
    let mut vm_bytes: u64 = STRESS_DEFAULT_VM_BYTES;
    let mut i = 0;
    while i < tokens.len() {
        let (flag, inline) = match tokens[i].split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v)),
            _ => (tokens[i], None),
        };
        i += 1;
        let takes_value = matches!(
            flag,
            "-c" | "--cpu" | "-l" | "--cpu-load" | "-m" | "--vm" | "--vm-bytes"
        );
        if !takes_value {
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => {
                let v = tokens.get(i).copied().unwrap_or("");
                i += 1;
                v
            }
        };
        let bad = || WorkloadError::StressFlag {
            flag: flag.to_string(),
            value: value.to_string(),
        };
        match flag {
            "-c" | "--cpu" => cpu_workers = value.parse().map_err(|_| bad())?,
            "-l" | "--cpu-load" => {
                cpu_percent = value.parse::<u64>().ok().filter(|p| *p <= 100).ok_or_else(bad)?
            }
            "-m" | "--vm" => vm_workers = value.parse().map_err(|_| bad())?,
            _ => vm_bytes = parse_stress_size(value).ok_or_else(bad)?,
        }
    }
    Ok(Workload {
        cpu_milli: cpu_workers.saturating_mul(cpu_percent).saturating_mul(10),
        memory_bytes: vm_workers.saturating_mul(vm_bytes),
    })
}

/// A size as `stress` reads it: digits with an optional `b`, `k`, `m`, `g` (powers of 1024).
fn parse_stress_size(text: &str) -> Option<u64> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    let number: u64 = digits.parse().ok()?;
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "ki" => 10,
        "m" | "mb" | "mi" => 20,
        "g" | "gb" | "gi" => 30,
        "t" | "tb" | "ti" => 40,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(name: &str, image: &str, command: &[&str], args: &[&str]) -> Container {
        let strings = |v: &[&str]| (!v.is_empty()).then(|| v.iter().map(|s| s.to_string()).collect());
        Container {
            name: name.into(),
            image: Some(image.into()),
            command: strings(command),
            args: strings(args),
            ..Default::default()
        }
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reads_the_seed_002_pod_and_shell_line() {
        let pod = container("stress", "polinux/stress", &["stress"], &["-c", "4", "--vm", "1"]);
        assert_eq!(
            command_workload(&pod),
            Ok(Workload {
                cpu_milli: 4000,
                memory_bytes: 256 << 20
            })
        );
        let shell = container(
            "s",
            "busybox",
            &["sh", "-c", "stress --cpu 1 --vm 1 --vm-bytes 10G --vm-keep"],
            &[],
        );
        assert_eq!(
            command_workload(&shell),
            Ok(Workload {
                cpu_milli: 1000,
                memory_bytes: 10 << 30
            })
        );
        let args_only = container("s", "polinux/stress", &[], &["--cpu=2", "--timeout", "60s"]);
        assert_eq!(
            command_workload(&args_only),
            Ok(Workload {
                cpu_milli: 2000,
                memory_bytes: 0
            })
        );
        let ng = container(
            "s",
            "x",
            &["/usr/bin/stress-ng"],
            &["--cpu", "2", "--cpu-load", "25", "--vm", "2", "--vm-bytes", "64m"],
        );
        assert_eq!(
            command_workload(&ng),
            Ok(Workload {
                cpu_milli: 500,
                memory_bytes: 128 << 20
            })
        );
        let idle = container("s", "nginx", &["nginx"], &["-g", "daemon off;"]);
        assert_eq!(command_workload(&idle), Ok(Workload::default()));
    }

    #[test]
    fn annotations_override_per_dimension_and_per_container() {
        let c = container(
            "main",
            "polinux/stress",
            &["stress"],
            &["--cpu", "1", "--vm", "1", "--vm-bytes", "1k"],
        );
        let a = annotations(&[(ANNOTATION_CPU_LOAD, "0.5")]);
        assert_eq!(
            container_workload(&a, &c),
            Ok(Workload {
                cpu_milli: 500,
                memory_bytes: 1024
            })
        );
        let a = annotations(&[
            (ANNOTATION_CPU_LOAD, "0.5"),
            ("sim.koordinator.sh/cpu-load.main", "250m"),
            (ANNOTATION_MEMORY, "200Mi"),
        ]);
        assert_eq!(
            container_workload(&a, &c),
            Ok(Workload {
                cpu_milli: 250,
                memory_bytes: 200 << 20
            })
        );
        let other = container("side", "busybox", &["sleep"], &["3600"]);
        assert_eq!(
            container_workload(&a, &other),
            Ok(Workload {
                cpu_milli: 500,
                memory_bytes: 200 << 20
            })
        );
    }

    #[test]
    fn bad_values_are_clear_errors() {
        let c = container("main", "busybox", &[], &[]);
        let err = container_workload(&annotations(&[(ANNOTATION_CPU_LOAD, "fast")]), &c);
        assert!(matches!(err, Err(WorkloadError::Annotation { .. })), "{err:?}");
        let err = container_workload(&annotations(&[(ANNOTATION_MEMORY, "-1Mi")]), &c);
        assert!(matches!(err, Err(WorkloadError::Negative { .. })), "{err:?}");
        for args in [
            &["--cpu"][..],
            &["--cpu", "x"],
            &["--vm-bytes", "10Q"],
            &["--cpu-load", "150"],
        ] {
            let c = container("s", "x", &["stress"], args);
            assert!(
                matches!(command_workload(&c), Err(WorkloadError::StressFlag { .. })),
                "{args:?}"
            );
        }
    }
}
