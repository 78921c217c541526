//! NodeMetric reports per node, kept as [`UsageReport`] only (a NodeMetric carries every pod's
//! usage; the formula needs a few numbers of each).

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
};

use futures::{Stream, StreamExt};
use koord_api::NodeMetric;
use kube::runtime::watcher;

use crate::{
    batch::UsageReport,
    snapshot::{self, FieldError},
};

type Reports = HashMap<String, Result<UsageReport, FieldError>>;

/// The shared report index; cheap to clone.
#[derive(Clone, Default)]
pub struct UsageIndex {
    inner: Arc<RwLock<(Reports, Option<Reports>)>>,
}

impl UsageIndex {
    /// Applies one watcher event; returns the node it concerns.
    pub fn apply(&self, event: watcher::Event<NodeMetric>) -> Option<String> {
        let mut inner = self.inner.write().unwrap_or_else(|poison| poison.into_inner());
        let (reports, relist) = &mut *inner;
        match event {
            watcher::Event::Apply(metric) => {
                let name = metric.metadata.name.clone()?;
                reports.insert(name.clone(), snapshot::usage_report(&metric));
                Some(name)
            }
            watcher::Event::Delete(metric) => {
                let name = metric.metadata.name.clone()?;
                reports.remove(&name);
                Some(name)
            }
            watcher::Event::Init => {
                *relist = Some(Reports::new());
                None
            }
            watcher::Event::InitApply(metric) => {
                let name = metric.metadata.name.clone()?;
                if let Some(relist) = relist.as_mut() {
                    relist.insert(name, snapshot::usage_report(&metric));
                }
                None
            }
            watcher::Event::InitDone => {
                if let Some(fresh) = relist.take() {
                    *reports = fresh;
                }
                None
            }
        }
    }

    /// The node's report: `None` without a NodeMetric, `Some(Err)` when it is unreadable.
    pub fn report(&self, node: &str) -> Option<Result<UsageReport, FieldError>> {
        self.inner
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .0
            .get(node)
            .cloned()
    }

    /// Feeds the index from a watcher stream; yields the nodes whose report changed.
    pub fn follow(
        self,
        events: impl Stream<Item = Result<watcher::Event<NodeMetric>, watcher::Error>> + Send + 'static,
    ) -> impl Stream<Item = String> + Send + 'static {
        koord_runtime::log_watch_errors(events, "NodeMetric").filter_map(move |event| {
            let index = self.clone();
            // Errors are logged once per outage by log_watch_errors; the watcher retries.
            async move { index.apply(event.ok()?) }
        })
    }
}
