//! Each node's NodeResourceTopology, boiled down to what the manager reads: the
//! `cpu-basic-info` annotation koordlet reports (CPU normalization) and, per NUMA zone, the
//! cpu/memory allocatable and the batch entries it carries (NUMA-level batch resources). Only
//! those are kept, never the object.

use std::{
    collections::HashMap,
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, Ordering},
    },
};

use futures::{Stream, StreamExt};
use koord_api::{names::ANNOTATION_CPU_BASIC_INFO, topology::NodeResourceTopology};
use kube::runtime::watcher;

use crate::batch::{TopologyZones, zone_entries_of};

/// What the manager keeps of one NodeResourceTopology.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeTopology {
    /// The `node.koordinator.sh/cpu-basic-info` annotation.
    pub basic_info: Option<String>,
    /// The zones as the NUMA-level formula reads them.
    pub zones: TopologyZones,
}

type Topologies = HashMap<String, NodeTopology>;

/// The shared index; cheap to clone.
#[derive(Clone, Default)]
pub struct TopologyIndex {
    inner: Arc<RwLock<(Topologies, Option<Topologies>)>>,
    /// Whether the last watch call failed (one warning per failure streak).
    failing: Arc<AtomicBool>,
}

fn entry(nrt: &NodeResourceTopology) -> Option<(String, NodeTopology)> {
    let name = nrt.metadata.name.clone()?;
    Some((
        name,
        NodeTopology {
            basic_info: nrt.annotation(ANNOTATION_CPU_BASIC_INFO).map(str::to_owned),
            zones: zone_entries_of(&nrt.zones),
        },
    ))
}

impl TopologyIndex {
    /// Applies one watcher event; returns the nodes whose topology changed.
    pub fn apply(&self, event: watcher::Event<NodeResourceTopology>) -> Vec<String> {
        let mut inner = self.inner.write().unwrap_or_else(|poison| poison.into_inner());
        let (topologies, relist) = &mut *inner;
        let set =
            |topologies: &mut Topologies, name: String, topology: Option<NodeTopology>| -> Vec<String> {
                let changed = topologies.get(&name) != topology.as_ref();
                match topology {
                    Some(topology) => topologies.insert(name.clone(), topology),
                    None => topologies.remove(&name),
                };
                if changed { vec![name] } else { Vec::new() }
            };
        match event {
            watcher::Event::Apply(nrt) => match entry(&nrt) {
                Some((name, topology)) => set(topologies, name, Some(topology)),
                None => Vec::new(),
            },
            watcher::Event::Delete(nrt) => match entry(&nrt) {
                Some((name, _)) => set(topologies, name, None),
                None => Vec::new(),
            },
            watcher::Event::Init => {
                *relist = Some(Topologies::new());
                Vec::new()
            }
            watcher::Event::InitApply(nrt) => {
                if let (Some(relist), Some((name, topology))) = (relist.as_mut(), entry(&nrt)) {
                    relist.insert(name, topology);
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                let Some(fresh) = relist.take() else {
                    return Vec::new();
                };
                let mut changed: Vec<String> = fresh
                    .iter()
                    .filter(|(name, topology)| topologies.get(*name) != Some(*topology))
                    .map(|(name, _)| name.clone())
                    .collect();
                changed.extend(
                    topologies
                        .keys()
                        .filter(|name| !fresh.contains_key(*name))
                        .cloned(),
                );
                *topologies = fresh;
                changed
            }
        }
    }

    fn get<T>(&self, node: &str, pick: impl FnOnce(&NodeTopology) -> T) -> Option<T> {
        self.inner
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .0
            .get(node)
            .map(pick)
    }

    /// The node's `cpu-basic-info`, if its NodeResourceTopology carries one.
    pub fn basic_info(&self, node: &str) -> Option<String> {
        self.get(node, |t| t.basic_info.clone()).flatten()
    }

    /// The zones of the node's NodeResourceTopology; `None` when it has none.
    pub fn zones(&self, node: &str) -> Option<TopologyZones> {
        self.get(node, |t| t.zones.clone())
    }

    /// Feeds the index from a watcher stream; yields the nodes whose topology changed. A
    /// cluster without the NodeResourceTopology CRD gets one warning per failure streak (the
    /// watcher retries with backoff); CPU normalization then has no CPU facts to work from and
    /// no NUMA-level batch resources are computed.
    pub fn follow(
        self,
        events: impl Stream<Item = Result<watcher::Event<NodeResourceTopology>, watcher::Error>> + Send + 'static,
    ) -> impl Stream<Item = String> + Send + 'static {
        events
            .map(move |event| match event {
                Ok(event) => {
                    if self.failing.swap(false, Ordering::Relaxed) {
                        tracing::info!("NodeResourceTopology watch works again");
                    }
                    self.apply(event)
                }
                Err(error) => {
                    if !self.failing.swap(true, Ordering::Relaxed) {
                        let why = if koord_runtime::watch_error_status(&error) == Some(404) {
                            "cannot watch NodeResourceTopologies: the CRD noderesourcetopologies.topology.node.k8s.io is not installed"
                        } else {
                            "cannot watch NodeResourceTopologies"
                        };
                        tracing::warn!(
                            %error,
                            "{why}; CPU normalization and NUMA-level batch resources wait until it works; retrying with backoff"
                        );
                    } else {
                        tracing::debug!(%error, "NodeResourceTopology watch still failing");
                    }
                    Vec::new()
                }
            })
            .flat_map(futures::stream::iter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nrt(name: &str, info: Option<&str>) -> NodeResourceTopology {
        let annotations = info
            .map(|i| [(ANNOTATION_CPU_BASIC_INFO.to_owned(), i.to_owned())].into())
            .unwrap_or_default();
        NodeResourceTopology::for_node(name, annotations)
    }

    #[test]
    fn basic_info_changes_trigger() {
        let index = TopologyIndex::default();
        assert_eq!(index.apply(watcher::Event::Apply(nrt("a", Some("x")))), ["a"]);
        assert_eq!(
            index.apply(watcher::Event::Apply(nrt("a", Some("x")))),
            Vec::<String>::new()
        );
        assert_eq!(index.basic_info("a").as_deref(), Some("x"));
        assert_eq!(index.apply(watcher::Event::Apply(nrt("a", None))), ["a"]);
        assert_eq!(index.basic_info("a"), None);
        assert_eq!(index.apply(watcher::Event::Apply(nrt("b", Some("y")))), ["b"]);
        assert_eq!(index.apply(watcher::Event::Delete(nrt("b", Some("y")))), ["b"]);
        assert_eq!(index.basic_info("b"), None);
    }

    #[test]
    fn zone_changes_trigger_and_the_index_keeps_their_numbers() {
        let index = TopologyIndex::default();
        let with_zones = |cpu: &str, costs: i64| {
            let mut nrt = nrt("a", None);
            nrt.zones = vec![serde_json::json!({
                "name": "node-0", "type": "Node", "costs": [{"name": "node-0", "value": costs}],
                "resources": [{"name": "cpu", "capacity": cpu, "allocatable": cpu, "available": cpu}],
            })];
            nrt
        };
        assert_eq!(index.apply(watcher::Event::Apply(with_zones("4", 10))), ["a"]);
        let zones = index.zones("a").unwrap();
        assert_eq!(zones.zones[0].allocatable.cpu, 4000);
        // What the manager does not read changes nothing.
        assert_eq!(
            index.apply(watcher::Event::Apply(with_zones("4", 20))),
            Vec::<String>::new()
        );
        assert_eq!(index.apply(watcher::Event::Apply(with_zones("8", 20))), ["a"]);
        assert_eq!(index.zones("a").unwrap().zones[0].allocatable.cpu, 8000);
        assert_eq!(index.zones("b"), None);
    }

    #[test]
    fn a_relist_reports_what_changed_while_the_watch_was_down() {
        let index = TopologyIndex::default();
        index.apply(watcher::Event::Apply(nrt("kept", Some("k"))));
        index.apply(watcher::Event::Apply(nrt("gone", Some("g"))));
        index.apply(watcher::Event::Apply(nrt("changed", Some("old"))));
        index.apply(watcher::Event::Init);
        index.apply(watcher::Event::InitApply(nrt("kept", Some("k"))));
        index.apply(watcher::Event::InitApply(nrt("changed", Some("new"))));
        index.apply(watcher::Event::InitApply(nrt("new", Some("n"))));
        // Until the relist is done, the old view answers.
        assert_eq!(index.basic_info("gone").as_deref(), Some("g"));
        let mut changed = index.apply(watcher::Event::InitDone);
        changed.sort();
        assert_eq!(changed, ["changed", "gone", "new"]);
        assert_eq!(index.basic_info("changed").as_deref(), Some("new"));
        assert_eq!(index.basic_info("gone"), None);
    }
}
