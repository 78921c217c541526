//! Bounds on what koordlet keeps of a pod's metadata, so annotation and label values of any
//! size cannot grow the agent's memory: koordlet keeps every pod of its node for the life of
//! the pod, and a pod's labels and annotations come from whoever created it.
//!
//! Rules, applied to every pod before it enters the pod list or the API server cache:
//! - `managedFields` and kubectl's `last-applied-configuration` annotation are dropped: koordlet
//!   never reads them and they are the largest part of most pods' metadata;
//! - annotations are kept up to [`MAX_ANNOTATION_BYTES`] in total (keys plus values, the API
//!   server's own limit), labels up to [`MAX_LABEL_BYTES`]. Past the bound the largest entries
//!   are dropped first (among equal sizes, others' before Koordinator's own `*koordinator.sh/`
//!   keys, which the strategies read) until the rest fits, so the many small entries a pod
//!   really uses survive one oversized value. Each drop is reported, never silent.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

/// The API server's `TotalAnnotationSizeLimitB`: no valid pod has more.
pub const MAX_ANNOTATION_BYTES: usize = 256 * 1024;
/// Labels: 64 KiB in total (a valid label value has at most 63 characters, so only a source
/// that skips validation comes near it).
pub const MAX_LABEL_BYTES: usize = 64 * 1024;
/// kubectl's copy of the whole applied object.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what koordlet does not keep; returns one note per dropped label or annotation past
/// the bounds (empty when the pod was within them).
pub fn bound_pod_metadata(pod: &mut Pod) -> Vec<String> {
    let meta = &mut pod.metadata;
    meta.managed_fields = None;
    let mut notes = Vec::new();
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
        for key in shrink(annotations, MAX_ANNOTATION_BYTES) {
            notes.push(format!(
                "annotation {key} dropped (annotations over {MAX_ANNOTATION_BYTES} bytes)"
            ));
        }
    }
    if let Some(labels) = meta.labels.as_mut() {
        for key in shrink(labels, MAX_LABEL_BYTES) {
            notes.push(format!(
                "label {key} dropped (labels over {MAX_LABEL_BYTES} bytes)"
            ));
        }
    }
    notes
}

fn entry_size(key: &str, value: &str) -> usize {
    key.len() + value.len()
}

fn is_koordinator_key(key: &str) -> bool {
    key.contains("koordinator.sh/")
}

/// Removes entries until the map's size is within `limit`; returns the removed keys
/// (truncated for the log).
fn shrink(map: &mut BTreeMap<String, String>, limit: usize) -> Vec<String> {
    let mut total: usize = map.iter().map(|(k, v)| entry_size(k, v)).sum();
    if total <= limit {
        return Vec::new();
    }
    let mut order: Vec<(bool, usize, String)> = map
        .iter()
        .map(|(k, v)| (is_koordinator_key(k), entry_size(k, v), k.clone()))
        .collect();
    // Largest first; among equal sizes others before Koordinator's.
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut dropped = Vec::new();
    for (_, size, key) in order {
        if total <= limit {
            break;
        }
        map.remove(&key);
        total -= size;
        dropped.push(key.chars().take(80).collect());
    }
    dropped
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pod(annotations: &[(&str, usize)], labels: &[(&str, usize)]) -> Pod {
        let map = |entries: &[(&str, usize)]| {
            Some(
                entries
                    .iter()
                    .map(|(k, n)| ((*k).to_string(), "x".repeat(*n)))
                    .collect(),
            )
        };
        let mut pod = Pod::default();
        pod.metadata.annotations = map(annotations);
        pod.metadata.labels = map(labels);
        pod.metadata.managed_fields = Some(vec![Default::default(); 3]);
        pod
    }

    fn kept_bytes(map: &Option<BTreeMap<String, String>>) -> usize {
        map.iter().flatten().map(|(k, v)| entry_size(k, v)).sum()
    }

    #[test]
    fn a_pod_within_the_bounds_keeps_everything_but_managed_fields() {
        let mut p = pod(
            &[
                ("koordinator.sh/cpuset", 100),
                ("team", 10),
                (LAST_APPLIED_ANNOTATION, 5000),
            ],
            &[("koordinator.sh/qosClass", 2)],
        );
        assert!(bound_pod_metadata(&mut p).is_empty());
        assert_eq!(p.metadata.managed_fields, None);
        let a = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(a.len(), 2, "{:?}", a.keys());
        assert!(!a.contains_key(LAST_APPLIED_ANNOTATION));
        assert_eq!(p.metadata.labels.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn huge_values_are_dropped_others_first_and_reported() {
        let mut p = pod(
            &[
                ("koordinator.sh/cpuset", 200),
                ("scheduling.koordinator.sh/resource-spec", 300_000),
                ("junk", 50 << 20),
                ("small", 10),
            ],
            &[("koordinator.sh/qosClass", 2), ("huge", 1 << 20)],
        );
        let notes = bound_pod_metadata(&mut p);
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes[0].contains("annotation junk dropped"), "{notes:?}");
        let a = p.metadata.annotations.as_ref().unwrap();
        assert!(a.contains_key("koordinator.sh/cpuset"));
        assert!(a.contains_key("small"));
        assert!(!a.contains_key("scheduling.koordinator.sh/resource-spec"));
        assert!(kept_bytes(&p.metadata.annotations) <= MAX_ANNOTATION_BYTES);
        assert!(kept_bytes(&p.metadata.labels) <= MAX_LABEL_BYTES);
        assert!(
            p.metadata
                .labels
                .as_ref()
                .unwrap()
                .contains_key("koordinator.sh/qosClass")
        );
    }
}
