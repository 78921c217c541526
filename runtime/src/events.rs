//! Events for every kind of object, on every supported Kubernetes version.
//!
//! kube's [`Recorder`] puts the Event of a cluster-scoped object (a Node) in the `default`
//! namespace. API servers before Kubernetes 1.22 refuse that for `events.k8s.io/v1` Events
//! (`involvedObject.namespace: Invalid value: "": does not match event.namespace`): there an
//! Event about a cluster-scoped object must live in `kube-system`, which every version accepts.
//! [`EventPublisher`] sends those there and everything else through the [`Recorder`].

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Where Events about cluster-scoped objects are created.
pub const CLUSTER_SCOPED_EVENT_NAMESPACE: &str = "kube-system";

/// Publishes Events: namespaced objects' through kube's [`Recorder`] (with its deduplication),
/// cluster-scoped objects' in [`CLUSTER_SCOPED_EVENT_NAMESPACE`].
#[derive(Clone)]
pub struct EventPublisher {
    recorder: Recorder,
    client: Client,
    reporter: Reporter,
}

impl EventPublisher {
    /// A publisher reporting as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        EventPublisher {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            client,
            reporter,
        }
    }

    /// Publishes `event` about the object of `reference`.
    pub async fn publish(&self, event: &Event, reference: &ObjectReference) -> Result<(), kube::Error> {
        if reference.namespace.as_deref().is_some_and(|ns| !ns.is_empty()) {
            return self.recorder.publish(event, reference).await;
        }
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), CLUSTER_SCOPED_EVENT_NAMESPACE);
        api.create(&PostParams::default(), &self.cluster_scoped(event, reference))
            .await
            .map(|_| ())
    }

    fn cluster_scoped(&self, event: &Event, reference: &ObjectReference) -> K8sEvent {
        let now = jiff::Timestamp::now();
        let name = reference.name.as_deref().unwrap_or(&self.reporter.controller);
        K8sEvent {
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(reference.clone()),
            related: event.secondary.clone(),
            note: event.note.clone(),
            metadata: ObjectMeta {
                namespace: Some(CLUSTER_SCOPED_EVENT_NAMESPACE.to_owned()),
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_owned(),
            ),
            ..K8sEvent::default()
        }
    }
}
