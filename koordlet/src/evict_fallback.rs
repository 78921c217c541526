//! What the evictor does when the Eviction API does not evict a pod the strategies picked.
//!
//! The Eviction API answers 429 while a PodDisruptionBudget forbids the eviction, and nothing
//! at all while the API server is down. Upstream koordlet does not use the API by default: it
//! stops the pod's containers through the container runtime, which neither PDBs nor an
//! unreachable API server stop. We default to the API only (PDBs hold; the next round decides
//! again with fresh numbers), and let the operator choose otherwise with
//! `--eviction-fallback` ([`EvictionFallback`]).
//!
//! The fallback runs when the Eviction API answered 429 or a 5xx status, or could not be
//! reached; other answers (403 missing RBAC, 404 pod gone, 409 UID precondition) are reported
//! as failures without a fallback.

use std::path::PathBuf;
use std::sync::Arc;

use clap::ValueEnum;
use koordlet_core::KubeCgroupPaths;
use koordlet_core::resource::CgroupResource;

use crate::states::PodMeta;
use crate::system::{Cgroups, SystemError};

/// The choice of `--eviction-fallback`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum EvictionFallback {
    /// Report the failure (Event `evictPodFail`) and let the next round decide again.
    #[default]
    None,
    /// Delete the pod (UID precondition, default grace period): ignores PodDisruptionBudgets,
    /// needs the API server.
    Delete,
    /// SIGKILL every process in the pod's container cgroups, as upstream's default stops the
    /// containers through the runtime: works without the API server; the kubelet restarts
    /// the containers according to the pod's restartPolicy.
    KillContainers,
}

impl EvictionFallback {
    /// Whether the Eviction API's error `e` calls for the fallback: 429 (a PDB), a 5xx status,
    /// or no answer at all.
    pub fn applies_to(e: &kube::Error) -> bool {
        match e {
            kube::Error::Api(s) => s.code == 429 || s.code >= 500,
            _ => true,
        }
    }
}

/// Why the processes of a pod's containers could not be killed.
#[derive(Debug, thiserror::Error)]
pub enum KillError {
    /// The container's cgroup directory cannot be resolved.
    #[error("pod {pod}: container cgroup of {container}")]
    Cgroup {
        /// `namespace/name`.
        pod: String,
        /// Container name.
        container: String,
        /// The cause.
        #[source]
        source: SystemError,
    },
    /// `cgroup.procs` cannot be read.
    #[error("cannot read {path}")]
    Procs {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A process could not be signalled (other than already gone).
    #[error("cannot SIGKILL pid {pid}")]
    Signal {
        /// The process.
        pid: i32,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No container of the pod has a process (or a known container ID).
    #[error("pod {0}: no container process to kill")]
    NothingToKill(String),
}

/// Kills the processes of a pod's containers through their cgroups (the `kill-containers`
/// fallback). The pod sandbox (pause) is left alone, as upstream's `StopContainer`.
#[derive(Debug, Clone)]
pub struct ContainerKiller {
    cgroups: Arc<Cgroups>,
    paths: KubeCgroupPaths,
}

impl ContainerKiller {
    /// A killer for the pods of this node's cgroup tree.
    pub fn new(cgroups: Arc<Cgroups>, paths: KubeCgroupPaths) -> Self {
        ContainerKiller { cgroups, paths }
    }

    /// SIGKILLs every process of every container of `pod` with a known ID; returns how many
    /// were signalled. Processes that exit meanwhile do not count as errors.
    pub fn kill(&self, pod: &PodMeta) -> Result<usize, KillError> {
        let name = format!("{}/{}", pod.namespace, pod.name);
        let mut killed = 0;
        for container in &pod.containers {
            let Some(dir) = pod.container_dir(&self.paths, container) else {
                continue;
            };
            // The memory hierarchy holds every process on v1; v2 has one hierarchy.
            let dir_path = self
                .cgroups
                .dir_path(CgroupResource::MemoryUsage, &dir)
                .map_err(|source| KillError::Cgroup {
                    pod: name.clone(),
                    container: container.name.clone(),
                    source,
                })?;
            let path = dir_path.join("cgroup.procs");
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => return Err(KillError::Procs { path, source }),
            };
            for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                let Some(p) = rustix::process::Pid::from_raw(pid) else {
                    continue;
                };
                match rustix::process::kill_process(p, rustix::process::Signal::KILL) {
                    Ok(()) => killed += 1,
                    Err(rustix::io::Errno::SRCH) => {}
                    Err(e) => {
                        return Err(KillError::Signal {
                            pid,
                            source: e.into(),
                        });
                    }
                }
            }
        }
        if killed == 0 {
            return Err(KillError::NothingToKill(name));
        }
        Ok(killed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("refused", "TooManyRequests")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn fallback_applies_to_refusals_and_outages_only() {
        assert!(EvictionFallback::applies_to(&api(429)));
        assert!(EvictionFallback::applies_to(&api(500)));
        assert!(EvictionFallback::applies_to(&api(503)));
        for code in [400, 403, 404, 409] {
            assert!(!EvictionFallback::applies_to(&api(code)), "{code}");
        }
        assert!(EvictionFallback::applies_to(
            &kube::Error::LinesCodecMaxLineLengthExceeded
        ));
    }
}
