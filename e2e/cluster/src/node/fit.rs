//! The minimal scheduler's decision: which simulated node has room for a pod.
//!
//! Pure data in, a node name (or the reasons none fits) out. Requests include extended
//! resources such as `kubernetes.io/batch-cpu`, so BE pods land only where the manager has
//! published batch allocatable, as with the real koord-scheduler.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::quantity::{QuantityError, parse_milli};

/// Resource name to amount in milli-units (`cpu: 1` is 1000, `memory: 1Ki` is 1 024 000).
pub type Resources = BTreeMap<String, i128>;

/// The pseudo-resource counting pods against `allocatable.pods`.
const PODS: &str = "pods";

/// What the scheduler knows about one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRoom {
    /// Node name.
    pub name: String,
    /// Node labels, matched against `spec.nodeSelector`.
    pub labels: BTreeMap<String, String>,
    /// `status.allocatable` in milli-units.
    pub allocatable: Resources,
    /// Sum of the requests of the non-terminated pods already bound to it.
    pub requested: Resources,
    /// False when cordoned (`spec.unschedulable`) or not Ready.
    pub schedulable: bool,
}

/// The effective requests of a pod as the scheduler counts them: per resource the larger of the
/// sum over containers and the largest init container, plus overhead, plus one `pods`.
/// A limit without a request counts as the request (API server defaulting).
pub fn pod_requests(spec: &PodSpec) -> Result<Resources, QuantityError> {
    let mut total = Resources::new();
    for container in &spec.containers {
        for (name, value) in container_requests(container)? {
            *total.entry(name).or_default() += value;
        }
    }
    for container in spec.init_containers.iter().flatten() {
        for (name, value) in container_requests(container)? {
            let entry = total.entry(name).or_default();
            *entry = (*entry).max(value);
        }
    }
    for (name, quantity) in spec.overhead.iter().flatten() {
        *total.entry(name.clone()).or_default() += parse_milli(&quantity.0)?;
    }
    *total.entry(PODS.to_string()).or_default() += 1000;
    Ok(total)
}

fn container_requests(container: &Container) -> Result<Resources, QuantityError> {
    let mut out = Resources::new();
    let Some(resources) = &container.resources else {
        return Ok(out);
    };
    for (name, quantity) in resources.limits.iter().flatten() {
        out.insert(name.clone(), parse_milli(&quantity.0)?);
    }
    for (name, quantity) in resources.requests.iter().flatten() {
        out.insert(name.clone(), parse_milli(&quantity.0)?);
    }
    Ok(out)
}

/// Adds `pod` to `sum` (used to build [`NodeRoom::requested`]).
pub fn add_requests(sum: &mut Resources, pod: &Resources) {
    for (name, value) in pod {
        *sum.entry(name.clone()).or_default() += value;
    }
}

/// Why one node cannot take a pod (the scheduler's words, shown in the pod's condition).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Misfit {
    /// The node is cordoned.
    #[error("not schedulable")]
    Unschedulable,
    /// The pod's node selector asks for a label the node does not have.
    #[error("node selector {key}={value} does not match")]
    Selector {
        /// Label key.
        key: String,
        /// Wanted value.
        value: String,
    },
    /// Not enough of a resource left.
    #[error("insufficient {resource} (requested {requested}m, free {free}m)")]
    Insufficient {
        /// Resource name.
        resource: String,
        /// What the pod requests, in milli-units.
        requested: i128,
        /// What the node has left, in milli-units.
        free: i128,
    },
}

/// Why no node can take a pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoNodeFits {
    /// The cluster has no simulated nodes at all.
    #[error("no simulated nodes")]
    NoNodes,
    /// Every node was rejected, each for its reason.
    #[error("{}", rejections(.0))]
    Rejected(Vec<(String, Misfit)>),
}

fn rejections(nodes: &[(String, Misfit)]) -> String {
    let reasons: Vec<String> = nodes.iter().map(|(node, why)| format!("{node}: {why}")).collect();
    reasons.join("; ")
}

/// Picks the node for a pod: among schedulable nodes whose labels match the node selector and
/// whose allocatable covers every positive request on top of what is already requested, the
/// one with the most CPU left afterwards (spreading load like the default scheduler's
/// least-allocated score); ties go to the smaller name. `Err` lists why each node was rejected.
pub fn choose_node(
    requests: &Resources,
    node_selector: &BTreeMap<String, String>,
    nodes: &[NodeRoom],
) -> Result<String, NoNodeFits> {
    let mut best: Option<(i128, &str)> = None;
    let mut rejected = Vec::new();
    for node in nodes {
        match fits(requests, node_selector, node) {
            Ok(cpu_left) => {
                let better = match best {
                    None => true,
                    Some((left, name)) => cpu_left > left || (cpu_left == left && node.name.as_str() < name),
                };
                if better {
                    best = Some((cpu_left, &node.name));
                }
            }
            Err(why) => rejected.push((node.name.clone(), why)),
        }
    }
    match best {
        Some((_, name)) => Ok(name.to_string()),
        None if nodes.is_empty() => Err(NoNodeFits::NoNodes),
        None => Err(NoNodeFits::Rejected(rejected)),
    }
}

/// The nodes a pod fits on, best first as [`choose_node`] ranks them (most CPU left, then
/// name): the candidates a scheduler extender is asked about.
pub fn feasible_nodes(
    requests: &Resources,
    node_selector: &BTreeMap<String, String>,
    nodes: &[NodeRoom],
) -> Vec<String> {
    let mut fit: Vec<(i128, &str)> = nodes
        .iter()
        .filter_map(|node| {
            fits(requests, node_selector, node)
                .ok()
                .map(|left| (left, node.name.as_str()))
        })
        .collect();
    fit.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    fit.into_iter().map(|(_, name)| name.to_owned()).collect()
}

/// `Ok(cpu milli left after placing)` or why the pod does not fit.
fn fits(
    requests: &Resources,
    node_selector: &BTreeMap<String, String>,
    node: &NodeRoom,
) -> Result<i128, Misfit> {
    if !node.schedulable {
        return Err(Misfit::Unschedulable);
    }
    for (key, value) in node_selector {
        if node.labels.get(key) != Some(value) {
            return Err(Misfit::Selector {
                key: key.clone(),
                value: value.clone(),
            });
        }
    }
    for (name, wanted) in requests.iter().filter(|(_, v)| **v > 0) {
        let allocatable = node.allocatable.get(name).copied().unwrap_or(0);
        let used = node.requested.get(name).copied().unwrap_or(0);
        if used + wanted > allocatable {
            return Err(Misfit::Insufficient {
                resource: name.clone(),
                requested: *wanted,
                free: allocatable - used,
            });
        }
    }
    let cpu = |m: &Resources| m.get("cpu").copied().unwrap_or(0);
    Ok(cpu(&node.allocatable) - cpu(&node.requested) - cpu(requests))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn res(pairs: &[(&str, i128)]) -> Resources {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn node(name: &str, allocatable: &[(&str, i128)], requested: &[(&str, i128)]) -> NodeRoom {
        NodeRoom {
            name: name.into(),
            labels: BTreeMap::new(),
            allocatable: res(allocatable),
            requested: res(requested),
            schedulable: true,
        }
    }

    #[test]
    fn requests_sum_containers_and_respect_init_and_batch() {
        let c = |req: &[(&str, &str)], lim: &[(&str, &str)]| Container {
            resources: Some(ResourceRequirements {
                requests: Some(
                    req.iter()
                        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                        .collect(),
                ),
                limits: Some(
                    lim.iter()
                        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let spec = PodSpec {
            containers: vec![
                c(&[("cpu", "500m")], &[]),
                c(&[], &[("cpu", "1"), ("kubernetes.io/batch-memory", "1Ki")]),
            ],
            init_containers: Some(vec![c(&[("cpu", "2")], &[])]),
            ..Default::default()
        };
        assert_eq!(
            pod_requests(&spec),
            Ok(res(&[
                ("cpu", 2000),
                ("kubernetes.io/batch-memory", 1_024_000),
                ("pods", 1000)
            ]))
        );
    }

    #[test]
    fn chooses_a_node_with_room_and_spreads() {
        let nodes = vec![
            node("a", &[("cpu", 4000), ("pods", 110_000)], &[("cpu", 3000)]),
            node("b", &[("cpu", 4000), ("pods", 110_000)], &[("cpu", 1000)]),
            node(
                "c",
                &[
                    ("cpu", 4000),
                    ("pods", 110_000),
                    ("kubernetes.io/batch-cpu", 2000),
                ],
                &[("cpu", 2000)],
            ),
        ];
        let empty = BTreeMap::new();
        assert_eq!(
            choose_node(&res(&[("cpu", 1000), ("pods", 1000)]), &empty, &nodes),
            Ok("b".into())
        );
        // Only c publishes batch-cpu.
        assert_eq!(
            choose_node(
                &res(&[("kubernetes.io/batch-cpu", 1000), ("pods", 1000)]),
                &empty,
                &nodes
            ),
            Ok("c".into())
        );
        let too_big = choose_node(&res(&[("kubernetes.io/batch-cpu", 3000)]), &empty, &nodes);
        assert_eq!(
            too_big.map_err(|e| e.to_string()),
            Err(
                "a: insufficient kubernetes.io/batch-cpu (requested 3000m, free 0m); \
                 b: insufficient kubernetes.io/batch-cpu (requested 3000m, free 0m); \
                 c: insufficient kubernetes.io/batch-cpu (requested 3000m, free 2000m)"
                    .into()
            )
        );
        // Zero requests need nothing; ties go to the smaller name.
        let twins = vec![node("y", &[("cpu", 1000)], &[]), node("x", &[("cpu", 1000)], &[])];
        assert_eq!(
            choose_node(&res(&[("memory", 0)]), &empty, &twins),
            Ok("x".into())
        );
    }

    #[test]
    fn honours_selector_and_cordon() {
        let mut a = node("a", &[("cpu", 1000)], &[]);
        a.labels.insert("zone".into(), "z1".into());
        let mut b = node("b", &[("cpu", 8000)], &[]);
        let selector: BTreeMap<String, String> = [("zone".to_string(), "z1".to_string())].into();
        assert_eq!(
            choose_node(&res(&[]), &selector, &[a.clone(), b.clone()]),
            Ok("a".into())
        );
        b.schedulable = false;
        a.schedulable = false;
        assert_eq!(
            choose_node(&res(&[]), &selector, &[a.clone()]).map_err(|e| e.to_string()),
            Err("a: not schedulable".into())
        );
        a.schedulable = true;
        let elsewhere: BTreeMap<String, String> = [("zone".to_string(), "z2".to_string())].into();
        assert_eq!(
            choose_node(&res(&[]), &elsewhere, &[a.clone(), b]),
            Err(NoNodeFits::Rejected(vec![
                (
                    "a".into(),
                    Misfit::Selector {
                        key: "zone".into(),
                        value: "z2".into()
                    }
                ),
                ("b".into(), Misfit::Unschedulable),
            ]))
        );
        assert_eq!(
            choose_node(&res(&[]), &BTreeMap::new(), &[]),
            Err(NoNodeFits::NoNodes)
        );
    }
}
