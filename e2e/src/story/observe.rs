//! What the story watches on each node, once a second: the Node's batch allocatable (what
//! koord-manager published), and from the node's cgroups the LS and BE usage, the BE tier's
//! CFS quota and cpuset (what koordlet's suppress wrote) and the LS pods' CFS burst.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use koord_api::names::{RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY};
use koord_testcluster::node::NodeInfo;
use kube::Api;
use kube::api::ListParams;

use super::StoryError;

/// One node at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeSample {
    /// `kubernetes.io/batch-cpu` allocatable, milli-cores.
    pub batch_cpu_milli: Option<i64>,
    /// `kubernetes.io/batch-memory` allocatable, bytes.
    pub batch_memory_bytes: Option<i64>,
    /// CPU used by LS pods (`kubepods` minus `besteffort`) since the last sample, milli-cores.
    pub ls_cpu_milli: Option<u64>,
    /// CPU used by BE pods (`kubepods/besteffort`) since the last sample, milli-cores.
    pub be_cpu_milli: Option<u64>,
    /// Resident memory of LS pods, bytes.
    pub ls_memory_bytes: Option<u64>,
    /// Resident memory of BE pods, bytes.
    pub be_memory_bytes: Option<u64>,
    /// `kubepods/besteffort` CFS quota (µs per 100 ms period; −1 unlimited).
    pub be_quota_us: Option<i64>,
    /// `kubepods/besteffort` cpuset.
    pub be_cpuset: Option<String>,
    /// Largest CFS burst of an LS container, µs.
    pub ls_burst_us: Option<i64>,
}

/// The cgroup files of one node, v1 (also the fake tree) or v2.
#[derive(Debug, Clone)]
struct NodeFiles {
    root: PathBuf,
    v2: bool,
}

impl NodeFiles {
    fn path(&self, controller: &str, dir: &str, file: &str) -> PathBuf {
        if self.v2 {
            self.root.join(dir).join(file)
        } else {
            self.root.join(controller).join(dir).join(file)
        }
    }

    /// Cumulative CPU time in ns.
    fn cpu_ns(&self, dir: &str) -> Option<u64> {
        if self.v2 {
            let text = read(&self.path("", dir, "cpu.stat"))?;
            return stat_field(&text, "usage_usec").map(|us| us * 1000);
        }
        read(&self.path("cpuacct", dir, "cpuacct.usage"))?.parse().ok()
    }

    /// Resident (anonymous) memory in bytes.
    fn rss(&self, dir: &str) -> Option<u64> {
        let text = read(&self.path("memory", dir, "memory.stat"))?;
        if self.v2 {
            stat_field(&text, "anon")
        } else {
            stat_field(&text, "total_rss")
        }
    }

    fn quota_us(&self, dir: &str) -> Option<i64> {
        if self.v2 {
            let text = read(&self.path("", dir, "cpu.max"))?;
            let quota = text.split_whitespace().next()?;
            return if quota == "max" {
                Some(-1)
            } else {
                quota.parse().ok()
            };
        }
        read(&self.path("cpu", dir, "cpu.cfs_quota_us"))?.parse().ok()
    }

    fn cpuset(&self, dir: &str) -> Option<String> {
        let file = if self.v2 {
            "cpuset.cpus.effective"
        } else {
            "cpuset.cpus"
        };
        read(&self.path("cpuset", dir, file))
    }

    fn burst_us(&self, dir: &Path) -> Option<i64> {
        if self.v2 {
            return read(&dir.join("cpu.max.burst"))?.parse().ok();
        }
        read(&dir.join("cpu.cfs_burst_us"))?.parse().ok()
    }

    /// The largest burst among LS (burstable and guaranteed) pods and their containers.
    fn ls_burst_us(&self) -> Option<i64> {
        let base = if self.v2 {
            self.root.join("kubepods")
        } else {
            self.root.join("cpu").join("kubepods")
        };
        let mut pods: Vec<PathBuf> = Vec::new();
        for dir in [base.clone(), base.join("burstable")] {
            if let Ok(entries) = std::fs::read_dir(&dir) {
                pods.extend(
                    entries
                        .filter_map(Result::ok)
                        .filter(|e| e.file_name().to_string_lossy().starts_with("pod"))
                        .map(|e| e.path()),
                );
            }
        }
        let mut largest = None;
        for pod in pods {
            let containers = std::fs::read_dir(&pod)
                .map(|entries| {
                    entries
                        .filter_map(Result::ok)
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            for dir in std::iter::once(pod).chain(containers) {
                if let Some(burst) = self.burst_us(&dir) {
                    largest = Some(largest.map_or(burst, |l: i64| l.max(burst)));
                }
            }
        }
        largest
    }
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn stat_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == name).then(|| value.trim().parse().ok()).flatten()
    })
}

/// Watches every node; keeps the previous CPU counters to turn them into usage.
pub struct Observer {
    client: kube::Client,
    nodes: Vec<(String, NodeFiles)>,
    previous: BTreeMap<String, (Instant, u64, u64)>,
}

impl Observer {
    /// An observer of `nodes`; `v2` when the cgroups are real v2.
    pub fn new(client: kube::Client, nodes: &[NodeInfo], v2: bool) -> Self {
        Observer {
            client,
            nodes: nodes
                .iter()
                .map(|n| {
                    (
                        n.name.clone(),
                        NodeFiles {
                            root: n.cgroup_root.clone(),
                            v2,
                        },
                    )
                })
                .collect(),
            previous: BTreeMap::new(),
        }
    }

    /// One sample per node, in node order.
    pub async fn sample(&mut self) -> Result<Vec<(String, NodeSample)>, StoryError> {
        let api: Api<Node> = Api::all(self.client.clone());
        let listed = api
            .list(&ListParams::default())
            .await
            .map_err(|source| StoryError::Api {
                what: "listing nodes".into(),
                source,
            })?;
        let allocatable: BTreeMap<String, (Option<i64>, Option<i64>)> = listed
            .items
            .iter()
            .filter_map(|n| {
                let name = n.metadata.name.clone()?;
                let alloc = n.status.as_ref()?.allocatable.as_ref()?;
                let value = |key: &str| {
                    alloc
                        .get(key)
                        .and_then(|q| koord_api::ExactQuantity::from_k8s(q).ok())
                        .map(koord_api::ExactQuantity::value)
                };
                Some((name, (value(RESOURCE_BATCH_CPU), value(RESOURCE_BATCH_MEMORY))))
            })
            .collect();
        let now = Instant::now();
        let mut samples = Vec::new();
        for (name, files) in &self.nodes {
            let (batch_cpu_milli, batch_memory_bytes) = allocatable.get(name).copied().unwrap_or_default();
            let all = files.cpu_ns("kubepods");
            let be = files.cpu_ns("kubepods/besteffort");
            let (mut ls_cpu_milli, mut be_cpu_milli) = (None, None);
            if let (Some(all), Some(be)) = (all, be) {
                if let Some((then, all_before, be_before)) = self.previous.get(name) {
                    let ns = now.duration_since(*then).as_nanos().max(1) as f64;
                    let milli =
                        |after: u64, before: u64| (after.saturating_sub(before) as f64 / ns * 1000.0) as u64;
                    let be_used = milli(be, *be_before);
                    be_cpu_milli = Some(be_used);
                    ls_cpu_milli = Some(milli(all, *all_before).saturating_sub(be_used));
                }
                self.previous.insert(name.clone(), (now, all, be));
            }
            let all_rss = files.rss("kubepods");
            let be_rss = files.rss("kubepods/besteffort");
            samples.push((
                name.clone(),
                NodeSample {
                    batch_cpu_milli,
                    batch_memory_bytes,
                    ls_cpu_milli,
                    be_cpu_milli,
                    ls_memory_bytes: all_rss.zip(be_rss).map(|(a, b)| a.saturating_sub(b)),
                    be_memory_bytes: be_rss,
                    be_quota_us: files.quota_us("kubepods/besteffort"),
                    be_cpuset: files.cpuset("kubepods/besteffort"),
                    ls_burst_us: files.ls_burst_us(),
                },
            ));
        }
        Ok(samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_v1_files_of_a_node() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path();
        let write = |rel: &str, text: &str| {
            let path = root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap_or(root)).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
        };
        write("cpu/kubepods/besteffort/cpu.cfs_quota_us", "240000\n");
        write("cpuset/kubepods/besteffort/cpuset.cpus", "0-1\n");
        write("memory/kubepods/memory.stat", "rss 1\ntotal_rss 300\n");
        write("memory/kubepods/besteffort/memory.stat", "total_rss 100\n");
        write("cpu/kubepods/burstable/podabc/c1/cpu.cfs_burst_us", "100000\n");
        write("cpu/kubepods/burstable/podabc/cpu.cfs_burst_us", "0\n");
        let files = NodeFiles {
            root: root.to_path_buf(),
            v2: false,
        };
        assert_eq!(files.quota_us("kubepods/besteffort"), Some(240_000));
        assert_eq!(files.cpuset("kubepods/besteffort").as_deref(), Some("0-1"));
        assert_eq!(files.rss("kubepods"), Some(300));
        assert_eq!(files.ls_burst_us(), Some(100_000));
    }
}
