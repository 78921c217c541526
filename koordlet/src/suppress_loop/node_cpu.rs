//! The node's CPU capacity and reservation from the Node object, as the suppress budget needs
//! them: `reserved = max(capacity − allocatable, node.koordinator.sh/reservation)`.

use k8s_openapi::api::core::v1::Node;
use koord_api::names::ANNOTATION_NODE_RESERVATION;
use koord_api::quantity::ExactQuantity;
use serde::Deserialize;

use koordlet_core::strategies::cpuset::CpuList;
use koordlet_core::strategies::fast_suppress::NodeCpu;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Reservation {
    #[serde(default)]
    resources:
        Option<std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    #[serde(default, rename = "reservedCPUs")]
    reserved_cpus: Option<String>,
}

fn milli(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> i64 {
    q.and_then(|q| ExactQuantity::from_k8s(q).ok())
        .and_then(|q| q.milli_value().ok())
        .unwrap_or(0)
        .max(0)
}

/// Capacity and reservation of `node` in milli-cores; an unparsable reservation annotation
/// counts as none (the manager reports it on the node; suppress must not stop over it).
pub fn node_cpu(node: &Node) -> NodeCpu {
    let status = node.status.as_ref();
    let capacity = milli(
        status
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("cpu")),
    );
    let allocatable = status
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get("cpu"))
        .map_or(capacity, |q| milli(Some(q)));
    let annotated = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_NODE_RESERVATION))
        .and_then(|raw| serde_json::from_str::<Reservation>(raw).ok())
        .map_or(0, |r| {
            match r.reserved_cpus.as_deref().filter(|c| !c.trim().is_empty()) {
                Some(cpus) => CpuList::parse(cpus).map_or(0, |l| i64::try_from(l.len()).unwrap_or(0) * 1000),
                None => milli(r.resources.as_ref().and_then(|r| r.get("cpu"))),
            }
        });
    NodeCpu {
        capacity_milli: capacity,
        reserved_milli: capacity.saturating_sub(allocatable).max(annotated).max(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(capacity: &str, allocatable: &str, annotation: Option<&str>) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "annotations": annotation.map(|a| serde_json::json!({ANNOTATION_NODE_RESERVATION: a}))},
            "status": {"capacity": {"cpu": capacity}, "allocatable": {"cpu": allocatable}}
        }))
        .unwrap()
    }

    #[test]
    fn capacity_and_reservation() {
        let n = node("8", "7500m", None);
        assert_eq!(
            node_cpu(&n),
            NodeCpu {
                capacity_milli: 8000,
                reserved_milli: 500
            }
        );
        let n = node("8", "7500m", Some(r#"{"resources":{"cpu":"2"}}"#));
        assert_eq!(node_cpu(&n).reserved_milli, 2000);
        let n = node("8", "8", Some(r#"{"reservedCPUs":"0-2"}"#));
        assert_eq!(node_cpu(&n).reserved_milli, 3000);
        let n = node("8", "8", Some("not json"));
        assert_eq!(node_cpu(&n).reserved_milli, 0);
        assert_eq!(node_cpu(&Node::default()), NodeCpu::default());
    }
}
