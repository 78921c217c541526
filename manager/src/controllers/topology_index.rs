//! The `cpu-basic-info` annotation of every NodeResourceTopology, per node: the CPU facts
//! koordlet reports and CPU normalization reads. Only that string is kept (an NRT object can
//! carry every NUMA zone of the node).

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

type Infos = HashMap<String, String>;

/// The shared index; cheap to clone.
#[derive(Clone, Default)]
pub struct TopologyIndex {
    inner: Arc<RwLock<(Infos, Option<Infos>)>>,
    /// Whether the last watch call failed (one warning per failure streak).
    failing: Arc<AtomicBool>,
}

fn entry(nrt: &NodeResourceTopology) -> Option<(String, Option<String>)> {
    let name = nrt.metadata.name.clone()?;
    Some((name, nrt.annotation(ANNOTATION_CPU_BASIC_INFO).map(str::to_owned)))
}

impl TopologyIndex {
    /// Applies one watcher event; returns the nodes whose `cpu-basic-info` changed.
    pub fn apply(&self, event: watcher::Event<NodeResourceTopology>) -> Vec<String> {
        let mut inner = self.inner.write().unwrap_or_else(|poison| poison.into_inner());
        let (infos, relist) = &mut *inner;
        let set = |infos: &mut Infos, name: String, info: Option<String>| -> bool {
            let changed = infos.get(&name) != info.as_ref();
            match info {
                Some(info) => infos.insert(name, info),
                None => infos.remove(&name),
            };
            changed
        };
        match event {
            watcher::Event::Apply(nrt) => match entry(&nrt) {
                Some((name, info)) => {
                    if set(infos, name.clone(), info) {
                        vec![name]
                    } else {
                        Vec::new()
                    }
                }
                None => Vec::new(),
            },
            watcher::Event::Delete(nrt) => match entry(&nrt) {
                Some((name, _)) => {
                    if set(infos, name.clone(), None) {
                        vec![name]
                    } else {
                        Vec::new()
                    }
                }
                None => Vec::new(),
            },
            watcher::Event::Init => {
                *relist = Some(Infos::new());
                Vec::new()
            }
            watcher::Event::InitApply(nrt) => {
                if let (Some(relist), Some((name, Some(info)))) = (relist.as_mut(), entry(&nrt)) {
                    relist.insert(name, info);
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                let Some(fresh) = relist.take() else {
                    return Vec::new();
                };
                let mut changed: Vec<String> = fresh
                    .iter()
                    .filter(|(name, info)| infos.get(*name) != Some(*info))
                    .map(|(name, _)| name.clone())
                    .collect();
                changed.extend(infos.keys().filter(|name| !fresh.contains_key(*name)).cloned());
                *infos = fresh;
                changed
            }
        }
    }

    /// The node's `cpu-basic-info`, if its NodeResourceTopology carries one.
    pub fn basic_info(&self, node: &str) -> Option<String> {
        self.inner
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .0
            .get(node)
            .cloned()
    }

    /// Feeds the index from a watcher stream; yields the nodes whose `cpu-basic-info` changed.
    /// A cluster without the NodeResourceTopology CRD gets one warning per failure streak (the
    /// watcher retries with backoff); CPU normalization then has no CPU facts to work from.
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
                        tracing::warn!(
                            %error,
                            "cannot watch NodeResourceTopologies (is the CRD noderesourcetopologies.topology.node.k8s.io installed?); \
                             CPU normalization has no CPU facts until it works; retrying with backoff"
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
    fn only_changes_of_the_basic_info_trigger() {
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
