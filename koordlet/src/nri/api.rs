//! The NRI API messages koordlet uses (`nri.pkg.api.v1alpha1`), declared by hand.
//!
//! Only the fields koordlet reads or writes are declared: protobuf decoding skips the others,
//! so a newer runtime that sends more fields still talks to us. Tags are those of NRI's
//! `pkg/api/api.proto`; they never change within `v1alpha1`.

use std::collections::HashMap;

/// The ttrpc service the runtime serves (plugins call it to register).
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
/// The ttrpc service a plugin serves (the runtime calls it with events).
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";

/// NRI lifecycle events (the `Event` enum); a plugin subscribes with a bit mask of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Event {
    /// A pod sandbox is being started.
    RunPodSandbox = 1,
    /// A pod sandbox was stopped.
    StopPodSandbox = 2,
    /// A pod sandbox was removed.
    RemovePodSandbox = 3,
    /// A container is being created (adjustable).
    CreateContainer = 4,
    /// A container's resources are being updated (adjustable).
    UpdateContainer = 8,
    /// A container is being stopped.
    StopContainer = 10,
}

impl Event {
    /// This event's bit in a subscription mask (`1 << (event - 1)`, as NRI's `EventMask`).
    pub fn mask(self) -> i32 {
        1 << ((self as i32) - 1)
    }

    /// The event with this number, if koordlet knows it.
    pub fn from_number(n: i32) -> Option<Self> {
        [
            Event::RunPodSandbox,
            Event::StopPodSandbox,
            Event::RemovePodSandbox,
            Event::CreateContainer,
            Event::UpdateContainer,
            Event::StopContainer,
        ]
        .into_iter()
        .find(|e| *e as i32 == n)
    }
}

/// `RegisterPluginRequest`: the plugin's name and invocation index.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RegisterPluginRequest {
    /// Plugin name.
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    /// Two-digit invocation index (plugins run in ascending order).
    #[prost(string, tag = "2")]
    pub plugin_idx: String,
}

/// `Empty`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// `ConfigureRequest`: the runtime's identity and timeouts.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureRequest {
    /// Plugin-specific configuration text, if any.
    #[prost(string, tag = "1")]
    pub config: String,
    /// Runtime name (`containerd`).
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    /// Runtime version.
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    /// Registration timeout in milliseconds.
    #[prost(int64, tag = "4")]
    pub registration_timeout: i64,
    /// Request timeout in milliseconds: every reply must arrive within it.
    #[prost(int64, tag = "5")]
    pub request_timeout: i64,
}

/// `ConfigureResponse`: the event subscription.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConfigureResponse {
    /// Bit mask of [`Event`]s.
    #[prost(int32, tag = "2")]
    pub events: i32,
}

/// `SynchronizeRequest`: the pods and containers the runtime has (possibly in several parts).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeRequest {
    /// Pods.
    #[prost(message, repeated, tag = "1")]
    pub pods: Vec<PodSandbox>,
    /// Containers.
    #[prost(message, repeated, tag = "2")]
    pub containers: Vec<Container>,
    /// More parts follow.
    #[prost(bool, tag = "3")]
    pub more: bool,
}

/// `SynchronizeResponse`: updates to existing containers.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SynchronizeResponse {
    /// Updates.
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    /// The plugin accepts more parts.
    #[prost(bool, tag = "2")]
    pub more: bool,
}

/// `RunPodSandboxRequest`, `RemovePodSandboxRequest` (same shape).
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxRequest {
    /// The pod.
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
}

/// `CreateContainerRequest`, `StopContainerRequest` (same shape).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerRequest {
    /// The container's pod.
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    /// The container.
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
}

/// `CreateContainerResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    /// Changes to the container being created.
    #[prost(message, optional, tag = "1")]
    pub adjust: Option<ContainerAdjustment>,
    /// Updates to other containers.
    #[prost(message, repeated, tag = "2")]
    pub update: Vec<ContainerUpdate>,
}

/// `UpdateContainerRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainerRequest {
    /// The container's pod.
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    /// The container.
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
    /// The resources the update asks for.
    #[prost(message, optional, tag = "3")]
    pub linux_resources: Option<LinuxResources>,
}

/// `UpdateContainerResponse`, `StopContainerResponse` (same field 1).
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainerResponse {
    /// Updates.
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
}

/// `StateChangeEvent`: pod events of older runtimes arrive this way.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StateChangeEvent {
    /// [`Event`] number.
    #[prost(int32, tag = "1")]
    pub event: i32,
    /// The pod.
    #[prost(message, optional, tag = "2")]
    pub pod: Option<PodSandbox>,
    /// The container, for container events.
    #[prost(message, optional, tag = "3")]
    pub container: Option<Container>,
}

/// `PodSandbox`: the pod's identity, labels and annotations.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    /// Sandbox ID.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Pod name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Pod UID.
    #[prost(string, tag = "3")]
    pub uid: String,
    /// Pod namespace.
    #[prost(string, tag = "4")]
    pub namespace: String,
    /// Pod labels (`koordinator.sh/qosClass`).
    #[prost(map = "string, string", tag = "5")]
    pub labels: HashMap<String, String>,
    /// Pod annotations (`node.koordinator.sh/extended-resource-spec`).
    #[prost(map = "string, string", tag = "6")]
    pub annotations: HashMap<String, String>,
    /// Linux details.
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandbox>,
}

/// `LinuxPodSandbox`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandbox {
    /// The pod's cgroup parent as the kubelet set it.
    #[prost(string, tag = "3")]
    pub cgroup_parent: String,
}

/// `Container`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Container {
    /// Container ID.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Its sandbox's ID.
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    /// Container name in the pod spec.
    #[prost(string, tag = "3")]
    pub name: String,
    /// `ContainerState` (1 created, 2 paused, 3 running, 4 stopped).
    #[prost(int32, tag = "4")]
    pub state: i32,
    /// Linux details.
    #[prost(message, optional, tag = "11")]
    pub linux: Option<LinuxContainer>,
}

/// `ContainerState` value of a stopped container.
pub const CONTAINER_STOPPED: i32 = 4;

/// `LinuxContainer`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainer {
    /// The resources the container has now.
    #[prost(message, optional, tag = "3")]
    pub resources: Option<LinuxResources>,
    /// Its cgroups path.
    #[prost(string, tag = "5")]
    pub cgroups_path: String,
}

/// `LinuxResources` (the parts koordlet sets).
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxResources {
    /// Memory.
    #[prost(message, optional, tag = "1")]
    pub memory: Option<LinuxMemory>,
    /// CPU.
    #[prost(message, optional, tag = "2")]
    pub cpu: Option<LinuxCpu>,
    /// The resctrl (RDT) class: the runtime makes it the OCI spec's `linux.intelRdt.closID`.
    /// Set only with a group name: an empty value tells the runtime to clear the container's
    /// RDT settings.
    #[prost(message, optional, tag = "5")]
    pub rdt_class: Option<OptionalString>,
}

/// `LinuxMemory`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxMemory {
    /// `memory.limit_in_bytes` (-1 unlimited).
    #[prost(message, optional, tag = "1")]
    pub limit: Option<OptionalInt64>,
}

/// `LinuxCPU`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxCpu {
    /// `cpu.shares`.
    #[prost(message, optional, tag = "1")]
    pub shares: Option<OptionalUInt64>,
    /// `cpu.cfs_quota_us` (-1 unlimited).
    #[prost(message, optional, tag = "2")]
    pub quota: Option<OptionalInt64>,
    /// `cpu.cfs_period_us`.
    #[prost(message, optional, tag = "3")]
    pub period: Option<OptionalUInt64>,
    /// `cpuset.cpus`.
    #[prost(string, tag = "6")]
    pub cpus: String,
    /// `cpuset.mems`.
    #[prost(string, tag = "7")]
    pub mems: String,
}

/// `OptionalString`: a set value (absence of the message means "unchanged").
#[derive(Clone, PartialEq, prost::Message)]
pub struct OptionalString {
    /// The value.
    #[prost(string, tag = "1")]
    pub value: String,
}

/// `OptionalInt64`: a set value (absence of the message means "unchanged").
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct OptionalInt64 {
    /// The value.
    #[prost(int64, tag = "1")]
    pub value: i64,
}

/// `OptionalUInt64`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct OptionalUInt64 {
    /// The value.
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

/// `ContainerAdjustment`: changes to a container being created.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerAdjustment {
    /// Linux changes.
    #[prost(message, optional, tag = "6")]
    pub linux: Option<LinuxContainerAdjustment>,
}

/// `LinuxContainerAdjustment`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerAdjustment {
    /// Resources.
    #[prost(message, optional, tag = "2")]
    pub resources: Option<LinuxResources>,
}

/// `ContainerUpdate`: changes to an existing container.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerUpdate {
    /// Which container.
    #[prost(string, tag = "1")]
    pub container_id: String,
    /// Linux changes.
    #[prost(message, optional, tag = "2")]
    pub linux: Option<LinuxContainerUpdate>,
    /// A failed update is not an error for the runtime (the reconcile loop retries).
    #[prost(bool, tag = "3")]
    pub ignore_failure: bool,
}

/// `LinuxContainerUpdate`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerUpdate {
    /// Resources.
    #[prost(message, optional, tag = "1")]
    pub resources: Option<LinuxResources>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use prost::Message as _;

    /// The adjustment naming resctrl class `BE`, as NRI's `api.proto` lays it out:
    /// `CreateContainerResponse.adjust` (1) -> `ContainerAdjustment.linux` (6) ->
    /// `LinuxContainerAdjustment.resources` (2) -> `LinuxResources.rdt_class` (5) ->
    /// `OptionalString.value` (1).
    const RDT_CLASS_BE: [u8; 12] = [
        0x0a, 0x0a, // adjust, 10 bytes
        0x32, 0x08, // linux, 8 bytes
        0x12, 0x06, // resources, 6 bytes
        0x2a, 0x04, // rdt_class, 4 bytes
        0x0a, 0x02, b'B', b'E', // value "BE"
    ];

    fn rdt_reply(class: &str) -> CreateContainerResponse {
        CreateContainerResponse {
            adjust: Some(ContainerAdjustment {
                linux: Some(LinuxContainerAdjustment {
                    resources: Some(LinuxResources {
                        rdt_class: Some(OptionalString { value: class.into() }),
                        ..LinuxResources::default()
                    }),
                }),
            }),
            update: Vec::new(),
        }
    }

    #[test]
    fn rdt_class_encodes_as_nri_lays_it_out() {
        assert_eq!(rdt_reply("BE").encode_to_vec(), RDT_CLASS_BE);
        assert_eq!(
            CreateContainerResponse::decode(&RDT_CLASS_BE[..]).unwrap(),
            rdt_reply("BE")
        );
    }

    #[test]
    fn rdt_class_round_trips_beside_the_other_resources() {
        let mut reply = rdt_reply("LSR");
        let resources = reply
            .adjust
            .as_mut()
            .and_then(|a| a.linux.as_mut())
            .and_then(|l| l.resources.as_mut())
            .unwrap();
        resources.cpu = Some(LinuxCpu {
            shares: Some(OptionalUInt64 { value: 2 }),
            cpus: "0-1".into(),
            ..LinuxCpu::default()
        });
        resources.memory = Some(LinuxMemory {
            limit: Some(OptionalInt64 { value: 1 << 30 }),
        });
        let bytes = reply.encode_to_vec();
        assert_eq!(CreateContainerResponse::decode(bytes.as_slice()).unwrap(), reply);
        // Unset, the field is absent from the wire (the runtime leaves the class alone);
        // bytes from a runtime that also sends blockio_class (4) decode, skipping it.
        let none = LinuxResources::default();
        assert!(none.encode_to_vec().is_empty());
        let with_blockio = [0x22, 0x03, 0x0a, 0x01, b'x', 0x2a, 0x04, 0x0a, 0x02, b'L', b'S'];
        assert_eq!(
            LinuxResources::decode(&with_blockio[..]).unwrap().rdt_class,
            Some(OptionalString { value: "LS".into() })
        );
    }
}
