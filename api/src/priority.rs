//! Koordinator priority classes and how a pod's class is resolved.
//!
//! The priority class decides which resources a pod is accounted against: Prod (and Mid and
//! unclassified pods) count as high priority when batch resources are computed, Batch and Free
//! pods consume batch resources. Every component must agree on the rules, so they live here once.

use std::fmt;
use std::ops::RangeInclusive;

use k8s_openapi::api::core::v1::Pod;

use crate::names::LABEL_PRIORITY_CLASS;
use crate::qos::{QoSClass, qos_class_with_default};

/// A Koordinator priority class (`koord-prod`, `koord-mid`, `koord-batch`, `koord-free`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum PriorityClass {
    /// `koord-prod`: 9000-9999, latency-sensitive online services.
    Prod,
    /// `koord-mid`: 7000-7999, reclaimed Prod resources with a stability promise.
    Mid,
    /// `koord-batch`: 5000-5999, batch jobs on batch resources.
    Batch,
    /// `koord-free`: 3000-3999, the lowest tier.
    Free,
    /// No Koordinator class (the name `""`): any other priority value or label.
    #[default]
    None,
}

impl PriorityClass {
    /// The four named classes, highest first.
    pub const NAMED: [PriorityClass; 4] = [
        PriorityClass::Prod,
        PriorityClass::Mid,
        PriorityClass::Batch,
        PriorityClass::Free,
    ];

    /// The wire name (`koord-prod`, ...); `""` for [`PriorityClass::None`].
    pub fn name(self) -> &'static str {
        match self {
            PriorityClass::Prod => "koord-prod",
            PriorityClass::Mid => "koord-mid",
            PriorityClass::Batch => "koord-batch",
            PriorityClass::Free => "koord-free",
            PriorityClass::None => "",
        }
    }

    /// The class with this wire name; any unknown name (including `""`) is None, as upstream.
    pub fn from_name(name: &str) -> PriorityClass {
        Self::NAMED
            .into_iter()
            .find(|class| class.name() == name)
            .unwrap_or(PriorityClass::None)
    }

    /// The `spec.priority` values that belong to the class; None has no range.
    pub fn value_range(self) -> Option<RangeInclusive<i32>> {
        match self {
            PriorityClass::Prod => Some(9000..=9999),
            PriorityClass::Mid => Some(7000..=7999),
            PriorityClass::Batch => Some(5000..=5999),
            PriorityClass::Free => Some(3000..=3999),
            PriorityClass::None => None,
        }
    }

    /// The value used when only the class is known (9500, 7500, 5500, 3500; None is 0).
    pub fn default_value(self) -> i32 {
        match self {
            PriorityClass::Prod => 9500,
            PriorityClass::Mid => 7500,
            PriorityClass::Batch => 5500,
            PriorityClass::Free => 3500,
            PriorityClass::None => 0,
        }
    }

    /// The class whose range holds `priority`; None outside every range.
    pub fn from_priority_value(priority: i32) -> PriorityClass {
        Self::NAMED
            .into_iter()
            .find(|class| class.value_range().is_some_and(|range| range.contains(&priority)))
            .unwrap_or(PriorityClass::None)
    }

    /// "Higher priority than" as upstream compares host applications with pod classes:
    /// by default value, so None (0) is below every named class.
    pub fn is_higher_than(self, other: PriorityClass) -> bool {
        self.default_value() > other.default_value()
    }

    /// The class a QoS class implies when a pod names none: SYSTEM, LSE, LSR and LS are Prod,
    /// BE is Batch, an unknown QoS is None.
    pub fn from_qos(qos: QoSClass) -> PriorityClass {
        match qos {
            QoSClass::System | QoSClass::Lse | QoSClass::Lsr | QoSClass::Ls => PriorityClass::Prod,
            QoSClass::Be => PriorityClass::Batch,
            QoSClass::None => PriorityClass::None,
        }
    }
}

impl fmt::Display for PriorityClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The class a pod states: the `koordinator.sh/priority-class` label if present (an unknown
/// value is None, the label still wins), else `spec.priority` mapped into the ranges.
pub fn priority_class_raw(pod: &Pod) -> PriorityClass {
    if let Some(label) = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(LABEL_PRIORITY_CLASS))
    {
        return PriorityClass::from_name(label);
    }
    match pod.spec.as_ref().and_then(|spec| spec.priority) {
        Some(priority) => PriorityClass::from_priority_value(priority),
        None => PriorityClass::None,
    }
}

/// The class a pod is treated as: its raw class, else the one its QoS class (with default)
/// implies. A Guaranteed pod without labels is therefore Prod, a BestEffort one Batch.
pub fn priority_class_with_default(pod: &Pod) -> PriorityClass {
    match priority_class_raw(pod) {
        PriorityClass::None => PriorityClass::from_qos(qos_class_with_default(pod)),
        class => class,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::LABEL_QOS_CLASS;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    fn pod(labels: &[(&str, &str)], priority: Option<i32>, kube_qos: Option<&str>) -> Pod {
        let mut pod = Pod::default();
        if !labels.is_empty() {
            pod.metadata.labels = Some(labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect());
        }
        pod.spec = Some(PodSpec {
            priority,
            ..Default::default()
        });
        pod.status = kube_qos.map(|q| PodStatus {
            qos_class: Some(q.into()),
            ..Default::default()
        });
        pod
    }

    #[test]
    fn priority_value_ranges_at_every_boundary() {
        let cases = [
            (i32::MIN, PriorityClass::None),
            (-1, PriorityClass::None),
            (0, PriorityClass::None),
            (2999, PriorityClass::None),
            (3000, PriorityClass::Free),
            (3500, PriorityClass::Free),
            (3999, PriorityClass::Free),
            (4000, PriorityClass::None),
            (4999, PriorityClass::None),
            (5000, PriorityClass::Batch),
            (5999, PriorityClass::Batch),
            (6000, PriorityClass::None),
            (6999, PriorityClass::None),
            (7000, PriorityClass::Mid),
            (7999, PriorityClass::Mid),
            (8000, PriorityClass::None),
            (8999, PriorityClass::None),
            (9000, PriorityClass::Prod),
            (9999, PriorityClass::Prod),
            (10000, PriorityClass::None),
            (2_000_000_000, PriorityClass::None),
            (i32::MAX, PriorityClass::None),
        ];
        for (value, class) in cases {
            assert_eq!(PriorityClass::from_priority_value(value), class, "{value}");
            assert_eq!(
                priority_class_raw(&pod(&[], Some(value), None)),
                class,
                "pod {value}"
            );
        }
    }

    #[test]
    fn names_defaults_and_ranges() {
        for class in PriorityClass::NAMED {
            assert_eq!(PriorityClass::from_name(class.name()), class);
            let range = class.value_range().unwrap();
            assert!(range.contains(&class.default_value()));
            assert_eq!(PriorityClass::from_priority_value(class.default_value()), class);
        }
        assert_eq!(PriorityClass::Batch.to_string(), "koord-batch");
        assert_eq!(PriorityClass::from_name(""), PriorityClass::None);
        assert_eq!(PriorityClass::from_name("koord-Prod"), PriorityClass::None);
        assert_eq!(PriorityClass::from_name("prod"), PriorityClass::None);
        assert_eq!(PriorityClass::None.default_value(), 0);
        assert_eq!(PriorityClass::None.value_range(), None);
    }

    #[test]
    fn label_wins_over_spec_priority_even_when_unknown() {
        let batch_label = [(LABEL_PRIORITY_CLASS, "koord-batch")];
        assert_eq!(
            priority_class_raw(&pod(&batch_label, Some(9500), None)),
            PriorityClass::Batch
        );
        let bogus_label = [(LABEL_PRIORITY_CLASS, "gold")];
        assert_eq!(
            priority_class_raw(&pod(&bogus_label, Some(9500), None)),
            PriorityClass::None
        );
        assert_eq!(
            priority_class_raw(&pod(&[("other", "x")], Some(7000), None)),
            PriorityClass::Mid
        );
        assert_eq!(priority_class_raw(&pod(&[], None, None)), PriorityClass::None);
        assert_eq!(priority_class_raw(&Pod::default()), PriorityClass::None);
    }

    #[test]
    fn with_default_falls_back_through_qos() {
        type Case<'a> = (
            &'a [(&'a str, &'a str)],
            Option<i32>,
            Option<&'a str>,
            PriorityClass,
        );
        let cases: [Case<'_>; 10] = [
            (&[], Some(5500), Some("Guaranteed"), PriorityClass::Batch),
            (&[(LABEL_QOS_CLASS, "BE")], None, None, PriorityClass::Batch),
            (&[(LABEL_QOS_CLASS, "LS")], None, None, PriorityClass::Prod),
            (&[(LABEL_QOS_CLASS, "LSR")], None, None, PriorityClass::Prod),
            (&[(LABEL_QOS_CLASS, "LSE")], None, None, PriorityClass::Prod),
            (&[(LABEL_QOS_CLASS, "SYSTEM")], Some(0), None, PriorityClass::Prod),
            (&[], None, Some("Guaranteed"), PriorityClass::Prod),
            (&[], None, Some("Burstable"), PriorityClass::Prod),
            (&[], Some(100), Some("BestEffort"), PriorityClass::Batch),
            (&[], None, Some("Unknown"), PriorityClass::None),
        ];
        for (labels, priority, kube_qos, expected) in cases {
            let p = pod(labels, priority, kube_qos);
            assert_eq!(
                priority_class_with_default(&p),
                expected,
                "{labels:?} {priority:?} {kube_qos:?}"
            );
        }
        // No status and no resources: computed BestEffort, so Batch.
        assert_eq!(
            priority_class_with_default(&pod(&[], None, None)),
            PriorityClass::Batch
        );
    }

    #[test]
    fn higher_than_compares_default_values() {
        assert!(PriorityClass::Prod.is_higher_than(PriorityClass::Mid));
        assert!(PriorityClass::Mid.is_higher_than(PriorityClass::Batch));
        assert!(PriorityClass::Batch.is_higher_than(PriorityClass::Free));
        assert!(PriorityClass::Free.is_higher_than(PriorityClass::None));
        assert!(!PriorityClass::Batch.is_higher_than(PriorityClass::Batch));
        assert!(!PriorityClass::None.is_higher_than(PriorityClass::Free));
        // Host applications count as system usage when higher than batch: prod and mid only.
        let counted: Vec<_> = [
            PriorityClass::Prod,
            PriorityClass::Mid,
            PriorityClass::Batch,
            PriorityClass::Free,
            PriorityClass::None,
        ]
        .into_iter()
        .filter(|class| class.is_higher_than(PriorityClass::Batch))
        .collect();
        assert_eq!(counted, [PriorityClass::Prod, PriorityClass::Mid]);
    }
}
