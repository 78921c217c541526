//! What the decisions may know about the cluster, behind one trait: the server answers from
//! reflector caches, the offline commands and the tests from objects given to them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::mutate::profile::CompiledProfile;

/// The facts of a PriorityClass a profile copies into the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityClassInfo {
    /// `value`, written to `spec.priority`.
    pub value: i32,
    /// `preemptionPolicy`, written to `spec.preemptionPolicy`.
    pub preemption_policy: Option<String>,
}

/// Read-only cluster state used by mutation and validation.
pub trait ClusterView: Send + Sync {
    /// Every ClusterColocationProfile, compiled.
    fn profiles(&self) -> Vec<Arc<CompiledProfile>>;
    /// Labels of Namespace `name`, `None` when it is unknown.
    fn namespace_labels(&self, name: &str) -> Option<BTreeMap<String, String>>;
    /// PriorityClass `name`, `None` when it does not exist.
    fn priority_class(&self, name: &str) -> Option<PriorityClassInfo>;
    /// Name and labels of every Node.
    fn node_labels(&self) -> Vec<(String, BTreeMap<String, String>)>;
}

/// A fixed view built from objects (offline commands, tests, benchmarks).
#[derive(Debug, Clone, Default)]
pub struct StaticView {
    /// Profiles.
    pub profiles: Vec<Arc<CompiledProfile>>,
    /// Namespace name -> labels.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// PriorityClass name -> facts.
    pub priority_classes: BTreeMap<String, PriorityClassInfo>,
    /// Node name -> labels.
    pub nodes: BTreeMap<String, BTreeMap<String, String>>,
}

impl StaticView {
    /// A view that knows the four Koordinator PriorityClasses the chart ships (values 9000,
    /// 7000, 5000, 3000).
    pub fn with_koordinator_priority_classes() -> Self {
        let mut view = Self::default();
        for (name, value) in [
            ("koord-prod", 9000),
            ("koord-mid", 7000),
            ("koord-batch", 5000),
            ("koord-free", 3000),
        ] {
            view.priority_classes.insert(
                name.to_string(),
                PriorityClassInfo {
                    value,
                    preemption_policy: Some("PreemptLowerPriority".to_string()),
                },
            );
        }
        view
    }
}

impl ClusterView for StaticView {
    fn profiles(&self) -> Vec<Arc<CompiledProfile>> {
        self.profiles.clone()
    }

    fn namespace_labels(&self, name: &str) -> Option<BTreeMap<String, String>> {
        self.namespaces.get(name).cloned()
    }

    fn priority_class(&self, name: &str) -> Option<PriorityClassInfo> {
        self.priority_classes.get(name).cloned()
    }

    fn node_labels(&self) -> Vec<(String, BTreeMap<String, String>)> {
        self.nodes
            .iter()
            .map(|(name, labels)| (name.clone(), labels.clone()))
            .collect()
    }
}
