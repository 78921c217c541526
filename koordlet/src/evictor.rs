//! The evictor: carries out the engine's eviction picks through the Eviction API (so
//! PodDisruptionBudgets hold), with an Event on each pod and a dry-run switch.
//!
//! Rules users rely on:
//! - only BE pods, and pods labelled `koordinator.sh/eviction-enabled=true` for the node-level
//!   memory eviction (gate `MemoryEvict`): any other pick is dropped with an error log (the
//!   engine never makes one; this is the last line of defence);
//! - a pod being evicted is not picked again: accepted evictions enter an in-flight set keyed
//!   by UID that the engine reads (pods in flight count as released), until the pod is gone
//!   from the snapshot or the entry expires;
//! - the Eviction API's 429 (a PodDisruptionBudget forbids it now) is reported at once: the
//!   client given here must not retry it (see [`no_retry_client`]); the next round decides
//!   again with fresh numbers;
//! - the Eviction body's version is the one the server serves: `policy/v1` from Kubernetes 1.22,
//!   `policy/v1beta1` before (1.20 refuses a `policy/v1` body). It is read once from the
//!   `pods/eviction` entry of the core API discovery, cached, and read again when the server
//!   answers 400/404/415 to the version used (an upgraded or downgraded API server);
//! - Events as upstream: `evictPodSuccess` / `evictPodFail` (Warning) with the note
//!   `evict Pod:<name>, reason: <EvictPodBy...>, message: <numbers>`;
//! - when the Eviction API refuses (429) or cannot be reached, the configured
//!   [`EvictionFallback`] runs: none (default), delete the pod, or kill its containers;
//! - while the API server cannot be reached, nothing is queued for later except Events: each
//!   round decides again with fresh numbers and tries again (so a pod is evicted after
//!   recovery only if it still has to be, and once: accepted evictions are in flight), and the
//!   Events that could not be published wait in an [`EventBacklog`] (one per pod and reason)
//!   published at the start of the first round the server answers.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::Pod;
use koord_api::QoSClass;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::events::{Event, EventType, Reporter};
use tracing::{error, info, warn};

use crate::event_backlog::EventPublisher;
use crate::evict_fallback::{ContainerKiller, EvictionFallback};
use crate::states::PodMeta;
use crate::telemetry::Telemetry;
use koordlet_core::strategies::eviction::EvictionPick;
use koordlet_core::strategies::memory_evict;

/// Event reason of an accepted eviction (upstream's).
pub const EVENT_SUCCESS: &str = "evictPodSuccess";
/// Event reason of a refused or failed eviction (upstream's).
pub const EVENT_FAIL: &str = "evictPodFail";
/// How long an accepted eviction keeps its pod out of the picks when the pod never leaves the
/// snapshot (a stuck termination): after this the strategies may pick it again.
pub const IN_FLIGHT_TTL: Duration = Duration::from_secs(120);

/// A client for evictions: the same config with kube-rs's default retry of 429/503/504 off, so
/// a PDB-blocked eviction comes back at once instead of after minutes of backoff.
pub fn no_retry_client(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    kube::Client::try_from(config)
}

/// Picks that may be carried out: the pod is in the snapshot and BE, or the pick comes from the
/// node-level memory eviction and the pod is labelled `koordinator.sh/eviction-enabled=true`.
/// Others are returned apart (the caller logs them as errors): a last check, outside the
/// decision core, that no other pod is ever evicted.
pub fn evictable<'a>(
    picks: &'a [EvictionPick],
    pods: &'a [PodMeta],
) -> (Vec<(&'a EvictionPick, &'a PodMeta)>, Vec<&'a EvictionPick>) {
    let mut ok = Vec::new();
    let mut dropped = Vec::new();
    for pick in picks {
        match pods.iter().find(|p| p.uid.as_str() == pick.uid) {
            Some(p)
                if p.qos == QoSClass::Be
                    || (pick.strategy == memory_evict::BY_PRIORITY_STRATEGY && p.eviction_enabled()) =>
            {
                ok.push((pick, p))
            }
            _ => dropped.push(pick),
        }
    }
    (ok, dropped)
}

/// UIDs with an accepted eviction and when each entry expires.
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    until: HashMap<String, Instant>,
}

impl InFlight {
    /// Records an accepted eviction at `now`.
    pub fn insert(&mut self, uid: &str, now: Instant) {
        self.until.insert(uid.to_owned(), now + IN_FLIGHT_TTL);
    }

    /// Drops expired entries and pods no longer on the node; returns the set the engine reads.
    pub fn refresh(&mut self, pods: &[PodMeta], now: Instant) -> BTreeSet<String> {
        self.until
            .retain(|uid, until| *until > now && pods.iter().any(|p| p.uid.as_str() == uid));
        self.until.keys().cloned().collect()
    }
}

/// How one eviction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictOutcome {
    /// The API accepted it.
    Evicted,
    /// The Eviction API refused or was unreachable; the pod was deleted (fallback `delete`).
    Deleted,
    /// The Eviction API refused or was unreachable; the containers' processes were killed
    /// (fallback `kill-containers`).
    ContainersKilled,
    /// Dry-run: logged only.
    DryRun,
    /// Refused (429: a PodDisruptionBudget) or failed.
    Failed,
    /// Not a BE pod or not on the node any more: dropped.
    Dropped,
}

impl EvictOutcome {
    const ALL: [EvictOutcome; 6] = [
        EvictOutcome::Evicted,
        EvictOutcome::Deleted,
        EvictOutcome::ContainersKilled,
        EvictOutcome::DryRun,
        EvictOutcome::Failed,
        EvictOutcome::Dropped,
    ];

    fn label(self) -> &'static str {
        match self {
            EvictOutcome::Evicted => "evicted",
            EvictOutcome::Deleted => "deleted",
            EvictOutcome::ContainersKilled => "containers_killed",
            EvictOutcome::DryRun => "dry_run",
            EvictOutcome::Failed => "failed",
            EvictOutcome::Dropped => "dropped",
        }
    }
}

/// The `policy` version of the Eviction body the server takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionVersion {
    /// `policy/v1` (Kubernetes 1.22+).
    V1,
    /// `policy/v1beta1` (Kubernetes 1.18 to 1.21).
    V1beta1,
}

impl EvictionVersion {
    /// `apiVersion` of the body.
    pub fn api_version(self) -> &'static str {
        match self {
            EvictionVersion::V1 => "policy/v1",
            EvictionVersion::V1beta1 => "policy/v1beta1",
        }
    }

    /// The version named by the `pods/eviction` entry of the core `v1` resource list. Servers
    /// too old to name one (before 1.12) serve v1beta1; a list without the entry at all is
    /// answered with v1, the current API.
    pub fn from_core_resources(
        list: &k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList,
    ) -> Self {
        match list.resources.iter().find(|r| r.name == "pods/eviction") {
            Some(r) if r.version.as_deref() == Some("v1") => EvictionVersion::V1,
            Some(_) => EvictionVersion::V1beta1,
            None => EvictionVersion::V1,
        }
    }

    /// The Eviction body for `namespace/name`, its deletion guarded by the pod's UID (so a
    /// pod recreated under the same name is never evicted by a decision about the old one).
    pub fn body(self, namespace: &str, name: &str, uid: &str) -> serde_json::Value {
        let delete_options = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        serde_json::json!({
            "apiVersion": self.api_version(),
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": delete_options,
        })
    }
}

/// Asks the server which Eviction version `pods/eviction` takes.
pub async fn discover_eviction_version(client: &kube::Client) -> Result<EvictionVersion, kube::Error> {
    let list = client.list_core_api_resources("v1").await?;
    Ok(EvictionVersion::from_core_resources(&list))
}

/// Posts one Eviction of `version`.
async fn post_eviction(
    client: &kube::Client,
    version: EvictionVersion,
    pod: &PodMeta,
    uid: &str,
) -> Result<(), kube::Error> {
    let body =
        serde_json::to_vec(&version.body(&pod.namespace, &pod.name, uid)).map_err(kube::Error::SerdeError)?;
    let req = http::Request::post(format!(
        "/api/v1/namespaces/{}/pods/{}/eviction",
        pod.namespace, pod.name
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(body)
    .map_err(kube::Error::HttpError)?;
    client.request::<serde_json::Value>(req).await.map(|_| ())
}

/// Whether an error may mean the server does not take this Eviction version.
fn version_refused(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if matches!(s.code, 400 | 404 | 415))
}

/// Carries out picks; keeps the in-flight set.
pub struct Evictor {
    client: kube::Client,
    /// The discovered Eviction version (`None` until the first eviction, or after a refusal).
    version: Option<EvictionVersion>,
    events: EventPublisher,
    dry_run: bool,
    in_flight: InFlight,
    telemetry: Telemetry,
    fallback: EvictionFallback,
    killer: Option<ContainerKiller>,
}

fn reference(p: &PodMeta) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(p.namespace.clone()),
        name: Some(p.name.clone()),
        uid: Some(p.uid.as_str().to_owned()),
        ..ObjectReference::default()
    }
}

impl Evictor {
    /// An evictor using `client` (build it with [`no_retry_client`]); Events are reported by
    /// `koordlet` with the node name as instance.
    pub fn new(client: kube::Client, node: &str, dry_run: bool, telemetry: Telemetry) -> Self {
        init_series(&telemetry);
        let reporter = Reporter {
            controller: "koordlet".into(),
            instance: Some(node.to_owned()),
        };
        Evictor {
            events: EventPublisher::new(client.clone(), reporter),
            client,
            version: None,
            dry_run,
            in_flight: InFlight::default(),
            telemetry,
            fallback: EvictionFallback::None,
            killer: None,
        }
    }

    /// What to do when the Eviction API refuses or cannot be reached (default: nothing but
    /// the failure Event). `kill-containers` kills through `killer`'s cgroup tree.
    pub fn with_fallback(mut self, fallback: EvictionFallback, killer: ContainerKiller) -> Self {
        self.fallback = fallback;
        self.killer = Some(killer);
        self
    }

    /// Runs the fallback after the Eviction API's error `e`; `Err` carries why it did not run
    /// or failed (for the Event and the log).
    async fn fall_back(&self, pod: &PodMeta, uid: &str, e: &kube::Error) -> Result<EvictOutcome, String> {
        if !EvictionFallback::applies_to(e) {
            return Err(format!("eviction failed: {e}"));
        }
        match self.fallback {
            EvictionFallback::None => Err(format!("eviction refused: {e} (eviction fallback: none)")),
            EvictionFallback::Delete => {
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.to_owned()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                pods.delete(&pod.name, &params)
                    .await
                    .map(|_| EvictOutcome::Deleted)
                    .map_err(|d| format!("eviction refused: {e}; fallback delete failed: {d}"))
            }
            EvictionFallback::KillContainers => {
                let Some(killer) = &self.killer else {
                    return Err(format!(
                        "eviction refused: {e}; no cgroup tree to kill containers in"
                    ));
                };
                match killer.kill(pod) {
                    Ok(n) => {
                        info!(pod = %format!("{}/{}", pod.namespace, pod.name), processes = n,
                              "eviction fallback: container processes killed");
                        Ok(EvictOutcome::ContainersKilled)
                    }
                    Err(k) => Err(format!(
                        "eviction refused: {e}; fallback kill-containers failed: {k}"
                    )),
                }
            }
        }
    }

    /// The UIDs the engine must treat as in flight this round.
    pub fn in_flight(&mut self, pods: &[PodMeta], now: Instant) -> BTreeSet<String> {
        self.in_flight.refresh(pods, now)
    }

    fn count(&self, pick: &EvictionPick, outcome: EvictOutcome) {
        if matches!(
            outcome,
            EvictOutcome::Evicted | EvictOutcome::Deleted | EvictOutcome::ContainersKilled
        ) {
            self.telemetry.upstream.record_eviction(pick.reason);
        }
        let strategy = pick.strategy;
        self.telemetry
            .evictions
            .get_or_create(&vec![
                ("strategy".to_string(), strategy.to_string()),
                ("result".to_string(), outcome.label().to_string()),
            ])
            .inc();
    }

    /// Publishes `event`, or keeps it in the backlog when the API server cannot be reached.
    async fn publish(&mut self, event: Event, pod: &PodMeta) {
        self.events
            .publish(event, reference(pod), jiff::Timestamp::now())
            .await;
    }

    /// Publishes the Events kept while the API server could not be reached (a no-op when none
    /// wait); called at the start of every QoS round.
    pub async fn flush_backlog(&mut self) -> usize {
        if self.events.waiting() == 0 {
            return 0;
        }
        self.events.flush().await
    }

    /// Events waiting for the API server.
    pub fn backlog_len(&self) -> usize {
        self.events.waiting()
    }

    async fn event(&mut self, pod: &PodMeta, pick: &EvictionPick, reason: &str, detail: &str) {
        let note = format!(
            "evict Pod:{}, reason: {}, message: {}{detail}",
            pod.name, pick.reason, pick.message
        );
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: pick.reason.into(),
            secondary: None,
        };
        self.publish(event, pod).await;
    }

    /// Publishes a Warning Event on `pod` for a decision that could not be carried out (e.g. a
    /// CPU set policy that cannot be satisfied); a failure to publish is logged.
    pub async fn warn_pod(&mut self, pod: &PodMeta, reason: &str, action: &str, note: &str) {
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: action.into(),
            secondary: None,
        };
        self.publish(event, pod).await;
    }

    /// The Eviction version to use, discovered on first use.
    async fn version(&mut self) -> Result<EvictionVersion, kube::Error> {
        if let Some(v) = self.version {
            return Ok(v);
        }
        let v = discover_eviction_version(&self.client).await?;
        info!(api_version = v.api_version(), "Eviction API version discovered");
        self.version = Some(v);
        Ok(v)
    }

    /// Posts the eviction in the server's version; when the server refuses the version used,
    /// discovers again and retries once if the answer changed.
    async fn post(&mut self, pod: &PodMeta, uid: &str) -> Result<(), kube::Error> {
        let used = self.version().await?;
        match post_eviction(&self.client, used, pod, uid).await {
            Err(e) if version_refused(&e) => {
                self.version = None;
                let now = self.version().await?;
                if now == used {
                    return Err(e);
                }
                post_eviction(&self.client, now, pod, uid).await
            }
            other => other,
        }
    }

    /// Skips discovery: the caller knows the server's Eviction version. A refusal still
    /// triggers discovery.
    pub fn with_eviction_version(mut self, version: EvictionVersion) -> Self {
        self.version = Some(version);
        self
    }

    /// The Eviction version in use (`None` before the first eviction).
    pub fn eviction_version(&self) -> Option<EvictionVersion> {
        self.version
    }

    /// Evicts every pick ([`evictable`] ones only) and returns each outcome in order.
    pub async fn evict(
        &mut self,
        picks: &[EvictionPick],
        pods: &[PodMeta],
        now: Instant,
    ) -> Vec<EvictOutcome> {
        let (ok, dropped) = evictable(picks, pods);
        let mut outcomes = Vec::with_capacity(picks.len());
        for pick in dropped {
            error!(pod = %format!("{}/{}", pick.namespace, pick.name), strategy = pick.strategy,
                   "eviction pick dropped: not a BE pod (or, for memory_evict_by_priority, a pod labelled koordinator.sh/eviction-enabled=true) on this node");
            self.count(pick, EvictOutcome::Dropped);
            outcomes.push(EvictOutcome::Dropped);
        }
        for (pick, pod) in ok {
            let name = format!("{}/{}", pod.namespace, pod.name);
            if self.dry_run {
                info!(pod = %name, strategy = pick.strategy, reason = pick.reason, message = %pick.message,
                      "dry-run: would evict");
                self.in_flight.insert(&pick.uid, now);
                self.count(pick, EvictOutcome::DryRun);
                outcomes.push(EvictOutcome::DryRun);
                continue;
            }
            let outcome = match self.post(pod, &pick.uid).await {
                Ok(_) => {
                    info!(pod = %name, strategy = pick.strategy, reason = pick.reason, message = %pick.message,
                          "pod evicted");
                    self.in_flight.insert(&pick.uid, now);
                    self.event(pod, pick, EVENT_SUCCESS, "").await;
                    EvictOutcome::Evicted
                }
                Err(e) => match self.fall_back(pod, &pick.uid, &e).await {
                    Ok(outcome) => {
                        warn!(pod = %name, strategy = pick.strategy, reason = pick.reason, error = %e,
                              fallback = outcome.label(), "eviction refused; fallback done");
                        self.in_flight.insert(&pick.uid, now);
                        let detail = format!("; Eviction API refused ({e}), fallback: {}", outcome.label());
                        self.event(pod, pick, EVENT_SUCCESS, &detail).await;
                        outcome
                    }
                    Err(why) => {
                        warn!(pod = %name, strategy = pick.strategy, reason = pick.reason, error = %why,
                              "eviction refused or failed");
                        self.event(pod, pick, EVENT_FAIL, &format!("; {why}")).await;
                        EvictOutcome::Failed
                    }
                },
            };
            self.count(pick, outcome);
            outcomes.push(outcome);
        }
        outcomes
    }
}

/// Creates every eviction series at 0, so the first eviction is an increase Prometheus sees
/// (`increase()` and `rate()` miss the first sample of a series that appears at 1) and a
/// scrape lists the series before anything was evicted.
fn init_series(telemetry: &Telemetry) {
    use koordlet_core::strategies::cpu_evict;
    for (strategy, reason) in [
        (cpu_evict::STRATEGY, cpu_evict::REASON),
        (memory_evict::STRATEGY, memory_evict::REASON),
        (
            memory_evict::BY_PRIORITY_STRATEGY,
            memory_evict::BY_PRIORITY_REASON,
        ),
    ] {
        telemetry.upstream.init_eviction(reason);
        for outcome in EvictOutcome::ALL {
            drop(telemetry.evictions.get_or_create(&vec![
                ("strategy".to_string(), strategy.to_string()),
                ("result".to_string(), outcome.label().to_string()),
            ]));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    #[test]
    fn every_eviction_series_is_served_at_zero_before_the_first_eviction() {
        let mut registry = prometheus_client::registry::Registry::with_prefix("koordlet");
        let telemetry = Telemetry::register(&mut registry, "node-1");
        init_series(&telemetry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"koordlet_pod_eviction{node="node-1",reason="EvictPodByNodeMemoryUsage"} 0"#,
            r#"koordlet_pod_eviction{node="node-1",reason="EvictPodByBECPUSatisfaction"} 0"#,
            r#"koordlet_evictions_total{strategy="memory_evict",result="failed"} 0"#,
            r#"koordlet_evictions_total{strategy="cpu_evict",result="evicted"} 0"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    fn pod(name: &str, qos: &str) -> PodMeta {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "labels": {"koordinator.sh/qosClass": qos}},
            "spec": {"containers": []}
        }))
        .unwrap();
        PodMeta::new(Arc::new(pod)).unwrap()
    }

    fn pick(name: &str) -> EvictionPick {
        EvictionPick {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            strategy: "memory_evict",
            reason: "EvictPodByNodeMemoryUsage",
            message: String::new(),
        }
    }

    fn core_list(eviction: Option<&str>) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList {
        let mut resources = vec![
            serde_json::json!({"name": "pods", "namespaced": true, "kind": "Pod", "singularName": "", "verbs": ["get"]}),
        ];
        if let Some(v) = eviction {
            let mut e = serde_json::json!({"name": "pods/eviction", "namespaced": true, "kind": "Eviction",
                                           "singularName": "", "verbs": ["create"], "group": "policy"});
            if !v.is_empty() {
                e["version"] = serde_json::json!(v);
            }
            resources.push(e);
        }
        serde_json::from_value(serde_json::json!({"groupVersion": "v1", "resources": resources})).unwrap()
    }

    #[test]
    fn eviction_version_follows_the_core_discovery_entry() {
        assert_eq!(
            EvictionVersion::from_core_resources(&core_list(Some("v1"))),
            EvictionVersion::V1
        );
        assert_eq!(
            EvictionVersion::from_core_resources(&core_list(Some("v1beta1"))),
            EvictionVersion::V1beta1
        );
        assert_eq!(
            EvictionVersion::from_core_resources(&core_list(Some(""))),
            EvictionVersion::V1beta1
        );
        assert_eq!(
            EvictionVersion::from_core_resources(&core_list(None)),
            EvictionVersion::V1
        );
    }

    #[test]
    fn eviction_body_carries_version_name_and_uid_precondition() {
        let b = EvictionVersion::V1beta1.body("ns", "p", "uid-1");
        assert_eq!(b["apiVersion"], "policy/v1beta1");
        assert_eq!(b["kind"], "Eviction");
        assert_eq!(b["metadata"]["name"], "p");
        assert_eq!(b["metadata"]["namespace"], "ns");
        assert_eq!(b["deleteOptions"]["preconditions"]["uid"], "uid-1");
        assert_eq!(
            EvictionVersion::V1.body("ns", "p", "u")["apiVersion"],
            "policy/v1"
        );
    }

    #[test]
    fn only_be_pods_on_the_node_pass() {
        let pods = [pod("be", "BE"), pod("ls", "LS"), pod("sys", "SYSTEM")];
        let picks = [pick("be"), pick("ls"), pick("sys"), pick("gone")];
        let (ok, dropped) = evictable(&picks, &pods);
        assert_eq!(
            ok.iter().map(|(p, _)| p.name.as_str()).collect::<Vec<_>>(),
            ["be"]
        );
        assert_eq!(
            dropped.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["ls", "sys", "gone"]
        );
    }

    #[test]
    fn opted_in_pods_pass_for_the_node_level_memory_eviction_only() {
        let mut opted_in = pod("ls-opted-in", "LS");
        let mut labelled = (*opted_in.pod).clone();
        labelled
            .metadata
            .labels
            .get_or_insert_default()
            .insert("koordinator.sh/eviction-enabled".into(), "true".into());
        opted_in = PodMeta::new(Arc::new(labelled)).unwrap();
        let pods = [opted_in, pod("ls", "LS")];
        let by_priority = |name: &str| EvictionPick {
            strategy: memory_evict::BY_PRIORITY_STRATEGY,
            reason: memory_evict::BY_PRIORITY_REASON,
            ..pick(name)
        };
        let picks = [by_priority("ls-opted-in"), by_priority("ls"), pick("ls-opted-in")];
        let (ok, dropped) = evictable(&picks, &pods);
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].0.strategy, memory_evict::BY_PRIORITY_STRATEGY);
        assert_eq!(
            dropped
                .iter()
                .map(|p| (p.name.as_str(), p.strategy))
                .collect::<Vec<_>>(),
            [
                ("ls", memory_evict::BY_PRIORITY_STRATEGY),
                ("ls-opted-in", "memory_evict")
            ]
        );
    }

    #[test]
    fn in_flight_expires_and_forgets_gone_pods() {
        let pods = vec![pod("a", "BE"), pod("b", "BE")];
        let t0 = Instant::now();
        let mut f = InFlight::default();
        f.insert("uid-a", t0);
        f.insert("uid-b", t0);
        assert_eq!(f.refresh(&pods, t0).len(), 2);
        // b left the node.
        assert_eq!(
            f.refresh(&pods[..1], t0 + Duration::from_secs(1)),
            BTreeSet::from(["uid-a".to_string()])
        );
        assert!(f.refresh(&pods, t0 + IN_FLIGHT_TTL).is_empty());
    }
}
