//! The API objects a simulated kubelet writes: its Node, heartbeats and pod statuses.
//!
//! Pure functions from plain data (time passed in) to JSON, so what the node reports is testable
//! without a server.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// The address every simulated node and pod host uses: everything runs on loopback.
pub const HOST_IP: &str = "127.0.0.1";

/// What to register: name, labels and resources (quantity strings, extended resources allowed).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    /// Node name (also the cgroup directory of the node).
    pub name: String,
    /// Extra labels; `kubernetes.io/hostname`, `kubernetes.io/os` and `kubernetes.io/arch` are added.
    pub labels: BTreeMap<String, String>,
    /// `status.capacity`.
    pub capacity: BTreeMap<String, String>,
    /// `status.allocatable`; the capacity when `None`.
    pub allocatable: Option<BTreeMap<String, String>>,
}

impl NodeSpec {
    /// A node with 4 CPUs, 8 GiB and 110 pods, the shape of a small real node.
    pub fn new(name: &str) -> Self {
        let capacity = [
            ("cpu", "4"),
            ("memory", "8Gi"),
            ("pods", "110"),
            ("ephemeral-storage", "100Gi"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        NodeSpec {
            name: name.to_string(),
            labels: BTreeMap::new(),
            capacity,
            allocatable: None,
        }
    }

    /// Sets one capacity resource (e.g. `kubernetes.io/batch-cpu`), in allocatable too.
    #[must_use]
    pub fn with_resource(mut self, name: &str, quantity: &str) -> Self {
        self.capacity.insert(name.to_string(), quantity.to_string());
        if let Some(allocatable) = &mut self.allocatable {
            allocatable.insert(name.to_string(), quantity.to_string());
        }
        self
    }

    /// Adds a label.
    #[must_use]
    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_string(), value.to_string());
        self
    }
}

/// The Node object (metadata and spec; status goes through [`node_status`]).
pub fn node_object(spec: &NodeSpec) -> Value {
    let mut labels = spec.labels.clone();
    labels.insert("kubernetes.io/hostname".into(), spec.name.clone());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    labels.insert(
        "kubernetes.io/arch".into(),
        std::env::consts::ARCH
            .replace("x86_64", "amd64")
            .replace("aarch64", "arm64"),
    );
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": spec.name, "labels": labels },
        "spec": {},
    })
}

/// The full node status: resources, Ready, loopback address and the `/pods` endpoint port in
/// `daemonEndpoints.kubeletEndpoint`.
pub fn node_status(spec: &NodeSpec, kubelet_port: u16, now: &str) -> Value {
    json!({
        "status": {
            "capacity": spec.capacity,
            "allocatable": spec.allocatable.as_ref().unwrap_or(&spec.capacity),
            "conditions": conditions(now),
            "addresses": [
                { "type": "InternalIP", "address": HOST_IP },
                { "type": "Hostname", "address": spec.name },
            ],
            "daemonEndpoints": { "kubeletEndpoint": { "Port": kubelet_port } },
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "",
                "kernelVersion": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
                "osImage": "koord-testcluster simulated node",
                "containerRuntimeVersion": "containerd://simulated",
                "kubeletVersion": "v1.33.0-koord-sim",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": std::env::consts::ARCH,
            },
            "phase": "Running",
        }
    })
}

/// The heartbeat: only the conditions, so the allocatable the manager writes is left alone.
pub fn heartbeat(now: &str) -> Value {
    json!({ "status": { "conditions": conditions(now) } })
}

fn conditions(now: &str) -> Value {
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({ "type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now })
    };
    json!([
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "simulated node"
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "simulated node"
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "simulated node"
        ),
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "simulated kubelet is posting ready status"
        ),
    ])
}

/// One started container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartedContainer {
    /// Container name.
    pub name: String,
    /// Image from the spec.
    pub image: String,
    /// `containerd://<64 hex>`.
    pub container_id: String,
}

/// A fresh `containerd://<64 hex>` id.
pub fn new_container_id() -> String {
    format!(
        "containerd://{:032x}{:032x}",
        uuid::Uuid::new_v4().as_u128(),
        uuid::Uuid::new_v4().as_u128()
    )
}

/// The status of a pod whose containers all run.
pub fn running_status(containers: &[StartedContainer], pod_ip: &str, qos_class: &str, now: &str) -> Value {
    let statuses: Vec<Value> = containers
        .iter()
        .map(|c| {
            json!({
                "name": c.name, "image": c.image, "imageID": format!("{}@sha256:simulated", c.image),
                "containerID": c.container_id, "ready": true, "started": true, "restartCount": 0,
                "state": { "running": { "startedAt": now } },
            })
        })
        .collect();
    let condition = |kind: &str| json!({ "type": kind, "status": "True", "lastTransitionTime": now });
    json!({
        "status": {
            "phase": "Running",
            "conditions": [condition("PodScheduled"), condition("Initialized"), condition("ContainersReady"), condition("Ready")],
            "hostIP": HOST_IP, "hostIPs": [{ "ip": HOST_IP }],
            "podIP": pod_ip, "podIPs": [{ "ip": pod_ip }],
            "startTime": now,
            "qosClass": qos_class,
            "containerStatuses": statuses,
        }
    })
}

/// The status of a pod the node could not start (bad workload annotation, no python3, ...).
pub fn failed_start_status(container_names: &[String], message: &str, now: &str) -> Value {
    let statuses: Vec<Value> = container_names
        .iter()
        .map(|name| {
            json!({ "name": name, "image": "", "imageID": "", "ready": false, "started": false, "restartCount": 0,
                    "state": { "waiting": { "reason": "CreateContainerError", "message": message } } })
        })
        .collect();
    json!({
        "status": {
            "phase": "Pending",
            "conditions": [{ "type": "PodScheduled", "status": "True", "lastTransitionTime": now },
                           { "type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": message, "lastTransitionTime": now }],
            "hostIP": HOST_IP,
            "containerStatuses": statuses,
        }
    })
}

/// Kubernetes' timestamp format (RFC 3339, whole seconds, UTC).
pub fn timestamp(now: jiff::Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_status_has_resources_ready_and_the_pods_endpoint() {
        let spec = NodeSpec::new("n1")
            .with_resource("kubernetes.io/batch-cpu", "2000")
            .with_label("zone", "z1");
        let status = node_status(&spec, 4321, "2026-01-01T00:00:00Z");
        assert_eq!(status["status"]["allocatable"]["kubernetes.io/batch-cpu"], "2000");
        assert_eq!(
            status["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
            4321
        );
        let ready = status["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        let node = node_object(&spec);
        assert_eq!(node["metadata"]["labels"]["zone"], "z1");
        assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], "n1");
    }

    #[test]
    fn container_ids_and_pod_status() {
        let id = new_container_id();
        let hash = id.strip_prefix("containerd://").unwrap();
        assert_eq!(hash.len(), 64);
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(id, new_container_id());
        let c = StartedContainer {
            name: "main".into(),
            image: "busybox".into(),
            container_id: id.clone(),
        };
        let status = running_status(&[c], "10.88.0.2", "BestEffort", "2026-01-01T00:00:00Z");
        assert_eq!(status["status"]["phase"], "Running");
        assert_eq!(
            status["status"]["containerStatuses"][0]["containerID"],
            id.as_str()
        );
        assert_eq!(status["status"]["qosClass"], "BestEffort");
        assert_eq!(
            timestamp(jiff::Timestamp::from_second(0).unwrap()),
            "1970-01-01T00:00:00Z"
        );
    }
}
