//! Tests of the `slo-controller-config` parse, merge, validation and per-node result.

mod bench;
mod defaults;
mod merge;
mod network_bandwidth;
mod pod_burst;
mod proptests;
mod roundtrip;
mod seeds;
mod validation;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// ConfigMap data from `(key, value)` pairs.
pub fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A string map from pairs.
pub fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    data(pairs)
}

/// A Node with labels and annotations.
pub fn node(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some("node-1".to_owned()),
            labels: Some(map(labels)),
            annotations: Some(map(annotations)),
            ..Default::default()
        },
        ..Default::default()
    }
}
