//! Follows `slo-controller-config`: applies each version per key, reports broken keys, and
//! tells every controller to reconcile all nodes when the effective config changes.

use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use koord_api::config::ConfigKey;
use kube::{
    Api, Resource,
    runtime::{
        WatchStreamExt,
        events::{Event, EventType},
        watcher,
    },
};
use tokio::sync::broadcast;

use crate::{
    config_state::ConfigState,
    leader::Leadership,
    metrics::{KeyLabels, Metrics},
};

/// The reason of the Warning Event for a broken `key`: upstream Koordinator's, so that
/// `kubectl get events --field-selector reason=...` and alerts on them keep working.
pub fn event_reason(key: ConfigKey) -> &'static str {
    match key {
        ConfigKey::Colocation => "ColocationCfgUnmarshalFailed",
        ConfigKey::ResourceThreshold
        | ConfigKey::ResourceQos
        | ConfigKey::CpuBurst
        | ConfigKey::System
        | ConfigKey::HostApplication => "SLOCfgUnmarshalFailed",
        ConfigKey::CpuNormalization => "CPUNormalizationCfgUnmarshalFailed",
        ConfigKey::ResourceAmplification => "ResourceAmplificationCfgUnmarshalFailed",
    }
}

/// Which spec a key is parsed into, as upstream's `*_spec_parse_count` counts it: `Some(false)`
/// the NodeSLO's, `Some(true)` the NodeMetric's (`colocation-config`'s metric settings), `None`
/// neither (read by the node resource controller).
fn spec_of(key: ConfigKey) -> Option<bool> {
    match key {
        ConfigKey::Colocation => Some(true),
        ConfigKey::ResourceThreshold
        | ConfigKey::ResourceQos
        | ConfigKey::CpuBurst
        | ConfigKey::System
        | ConfigKey::HostApplication => Some(false),
        ConfigKey::CpuNormalization | ConfigKey::ResourceAmplification => None,
    }
}

/// What the config watcher needs.
pub struct ConfigWatch {
    /// The ConfigMap's namespace and name.
    pub api: Api<ConfigMap>,
    /// The ConfigMap's name.
    pub name: String,
    /// Shared config state.
    pub state: Arc<RwLock<ConfigState>>,
    /// Reconcile-all trigger for every controller.
    pub changed: broadcast::Sender<()>,
    /// Events are writes: only the leader publishes them.
    pub leadership: Leadership,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Publishes Events on the ConfigMap.
    pub recorder: koord_runtime::EventPublisher,
    /// Flipped when the config has been loaded.
    pub readiness: koord_runtime::Readiness,
}

impl ConfigWatch {
    /// Runs until the watch stream ends (it does not, short of shutdown).
    pub async fn run(self) {
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        let events = watcher(self.api.clone(), config).default_backoff();
        let mut events = koord_runtime::log_watch_errors(events, "ConfigMap").boxed();
        let mut seen_in_list = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init) => seen_in_list = false,
                Ok(watcher::Event::InitApply(cm) | watcher::Event::Apply(cm)) => {
                    seen_in_list = true;
                    self.load(Some(&cm)).await;
                }
                Ok(watcher::Event::InitDone) => {
                    let loaded = self.state.read().unwrap_or_else(|p| p.into_inner()).is_loaded();
                    if !seen_in_list && !loaded {
                        tracing::info!(name = %self.name, "ConfigMap not found: using built-in defaults");
                        self.load(None).await;
                    }
                }
                Ok(watcher::Event::Delete(_)) => tracing::warn!(
                    name = %self.name,
                    "ConfigMap deleted: keeping the last config until it is recreated"
                ),
                // Logged once per outage by log_watch_errors; the watcher retries.
                Err(_) => {}
            }
        }
    }

    async fn load(&self, cm: Option<&ConfigMap>) {
        let data = cm.map(|cm| cm.data.clone().unwrap_or_default());
        let change = {
            let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
            state.apply(data.as_ref())
        };
        self.readiness.set("config", true);
        for key in ConfigKey::ALL {
            let broken = change.errors.iter().any(|e| e.key == key);
            let labels = KeyLabels { key: key.to_string() };
            self.metrics
                .config_key_invalid
                .get_or_create(&labels)
                .set(i64::from(broken));
            if let Some(nodemetric) = spec_of(key) {
                self.metrics.spec_parsed(nodemetric, &key.to_string(), !broken);
            }
        }
        for key in &change.recovered {
            tracing::info!(%key, "ConfigMap key valid again");
        }
        for error in &change.errors {
            tracing::warn!(key = %error.key, %error, "invalid ConfigMap key: keeping its last good value");
            if let (Some(cm), true) = (cm, self.leadership.is_leader()) {
                let event = Event {
                    type_: EventType::Warning,
                    reason: event_reason(error.key).to_owned(),
                    note: Some(
                        format!("key {}: {error}; its last good value stays in force", error.key)
                            .chars()
                            .take(1000)
                            .collect(),
                    ),
                    action: "LoadConfig".to_owned(),
                    secondary: None,
                };
                if let Err(e) = self.recorder.publish(&event, &cm.object_ref(&())).await {
                    tracing::warn!(error = %e, "could not publish the config Event");
                }
            }
        }
        if change.changed {
            tracing::info!("effective config changed: reconciling every node");
            // No receiver only means no controller runs yet; they reconcile everything at start.
            let _ = self.changed.send(());
        }
    }
}
