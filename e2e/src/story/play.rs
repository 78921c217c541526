//! The story engine: sets the stage, applies the seeds, deploys the pods, plays the timeline
//! while observing every node once a second, and summarises. Every change goes into the
//! [`StoryState`] and to the view.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Pod};
use koord_api::NodeMetric;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use tokio_util::sync::CancellationToken;

use super::memory::MemoryPlan;
use super::observe::Observer;
use super::seeds::{self, REPORT_INTERVAL_SECONDS};
use super::stage::{CgroupsUsed, FIRST_BATCH_TIMEOUT, Stage, StageOptions};
use super::state::{Admission, Eviction, StoryState};
use super::summary::{Summary, summarize};
use super::timeline::{self, MIN_DURATION, Step};
use super::workload::{self, BE_NAMESPACE, Role, StoryPod};
use super::{StoryError, StoryOptions, View};

/// How often the story looks at the cluster.
const TICK: Duration = Duration::from_secs(1);
/// How long pods may take to start.
const POD_START: Duration = Duration::from_secs(60);

/// Plays the story until its end or until `stop` is cancelled; the cluster, every process and
/// every cgroup are gone when this returns.
pub async fn play(
    options: &StoryOptions,
    view: &mut dyn View,
    stop: CancellationToken,
) -> Result<Summary, StoryError> {
    if options.duration < MIN_DURATION {
        return Err(StoryError::Options(format!(
            "--duration must be at least {}s",
            MIN_DURATION.as_secs()
        )));
    }
    let started = Instant::now();
    let names: Vec<String> = (1..=options.nodes).map(|i| format!("sim-node-{i}")).collect();
    let mut state = StoryState::new(&names, options.duration);
    state.log(format!(
        "starting the embedded cluster: {} simulated node(s), koord-webhook, koord-manager",
        options.nodes
    ));
    view.update(&state)?;
    let stage_options = StageOptions {
        nodes: options.nodes,
        fake_cgroups: options.fake_cgroups,
        crds: options.crds.clone(),
    };
    let mut stage = tokio::select! {
        stage = Stage::start(&stage_options) => stage?,
        () = stop.cancelled() => return Err(StoryError::Interrupted),
    };
    let mut story = Story {
        state,
        started,
        pods: Vec::new(),
    };
    let result = tokio::select! {
        result = story.run(&mut stage, view, options) => result,
        () = stop.cancelled() => Err(StoryError::Interrupted),
    };
    story.tick_log("stopping: components, pod processes, cgroups");
    let _ = view.update(&story.state);
    stage.shutdown().await;
    story.state.finished = true;
    let _ = view.update(&story.state);
    result
}

struct Story {
    state: StoryState,
    started: Instant,
    /// The pods created, with their UIDs once known.
    pods: Vec<(StoryPod, Option<String>)>,
}

impl Story {
    fn tick_log(&mut self, text: impl Into<String>) {
        self.state.elapsed = self.started.elapsed();
        self.state.log(text);
    }

    async fn run(
        &mut self,
        stage: &mut Stage,
        view: &mut dyn View,
        options: &StoryOptions,
    ) -> Result<Summary, StoryError> {
        let cgroups = stage.cgroups();
        self.state.cgroups = cgroups.to_string();
        self.tick_log(format!("API server {}; pods run as {cgroups}", stage.url()));
        if let Some(path) = &options.kubeconfig {
            stage.write_kubeconfig(path)?;
            self.tick_log(format!("kubeconfig for kubectl: {}", path.display()));
        }
        self.log_memory_plan(&stage.memory, stage.node_cpus);
        for line in seeds::apply_seeds(&stage.client).await? {
            self.tick_log(line);
        }
        for line in seeds::apply_overlay(&stage.client).await? {
            self.tick_log(line);
        }
        view.update(&self.state)?;
        wait_report_interval(&stage.client, &stage.node_names).await?;
        stage.start_koordlets().await?;
        self.tick_log("koordlet started on every node (BEMemoryEvict on)");
        view.update(&self.state)?;

        let mut observer = Observer::new(
            stage.client.clone(),
            &stage.node_infos(),
            cgroups == CgroupsUsed::RealV2,
        );
        let plan = stage.memory.clone();
        let initial = workload::initial_pods(&stage.node_names, plan.be_cache_bytes);
        for pod in initial.iter().filter(|p| !p.is_be()) {
            self.create(stage, pod.clone()).await?;
        }
        self.tick_log("LS app payment deployed in frontend: one replica per node");
        self.wait(
            stage,
            "batch-cpu on every node",
            FIRST_BATCH_TIMEOUT,
            &mut observer,
            view,
            |s| {
                s.nodes
                    .iter()
                    .all(|t| t.latest().and_then(|l| l.batch_cpu_milli).is_some_and(|v| v > 0))
            },
        )
        .await?;
        for pod in initial.iter().filter(|p| p.is_be()) {
            self.create(stage, pod.clone()).await?;
        }
        self.wait(stage, "BE pods running", POD_START, &mut observer, view, |s| {
            s.admissions.iter().all(|a| a.running)
        })
        .await?;

        let cues = timeline::timeline(options.duration);
        let t0 = Instant::now();
        self.tick_log(format!("the story plays for {}s", options.duration.as_secs()));
        let mut next = 0;
        loop {
            let played = t0.elapsed();
            self.state.played = Some(played);
            self.state.act = Some(timeline::act_at(options.duration, played));
            while let Some(cue) = cues.get(next).filter(|c| c.at <= played) {
                next += 1;
                if cue.step == Step::End {
                    break;
                }
                self.tick_log(cue.step.describe());
                self.act(stage, cue.step, &plan).await?;
            }
            self.observe(stage, &mut observer).await?;
            view.update(&self.state)?;
            if next >= cues.len() {
                break;
            }
            tokio::time::sleep(TICK).await;
        }
        self.state.act = None;
        self.tick_log(timeline::Step::End.describe());
        for line in self.state.status_lines() {
            self.tick_log(line);
        }
        view.update(&self.state)?;
        Ok(summarize(&self.state))
    }

    fn log_memory_plan(&mut self, plan: &MemoryPlan, cpus: u64) {
        let gib = |b: u64| format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30));
        self.tick_log(format!(
            "nodes: {cpus} CPUs each; node memory is the host's ({} in use), so sim-node-1 has {} and the others {}",
            gib(plan.host_used),
            gib(plan.node_capacity(0)),
            gib(plan.node_capacity(1))
        ));
        self.state.memory = Some(match &plan.skipped {
            Some(reason) => Err(reason.clone()),
            None => Ok((plan.first_node_capacity, plan.be_cache_bytes, plan.ls_cache_bytes)),
        });
        if let Some(reason) = &plan.skipped {
            self.tick_log(format!("memory act left out: {reason}"));
        }
    }

    /// Creates `pod`; for a BE pod, records how the webhook admitted it.
    async fn create(&mut self, stage: &Stage, pod: StoryPod) -> Result<(), StoryError> {
        let api: Api<Pod> = Api::namespaced(stage.client.clone(), pod.namespace);
        let created = api
            .create(&PostParams::default(), &pod.object()?)
            .await
            .map_err(|source| StoryError::Api {
                what: format!("creating pod {}/{}", pod.namespace, pod.name),
                source,
            })?;
        if pod.is_be() {
            let admission = Admission {
                pod: format!("{}/{}", pod.namespace, pod.name),
                node: pod.node.clone(),
                priority: created.spec.as_ref().and_then(|s| s.priority),
                batch_requests: workload::batch_requests(&created),
                mutated: workload::mutated(&created),
                running: false,
            };
            let line = match admission.batch_requests {
                Some((cpu, memory)) if admission.mutated => format!(
                    "BE pod {} admitted by the webhook: priority {}, batch-cpu {cpu}m, batch-memory {} MiB",
                    admission.pod,
                    admission.priority.unwrap_or_default(),
                    memory >> 20
                ),
                _ => format!(
                    "pod {} was NOT rewritten to batch resources by the webhook",
                    admission.pod
                ),
            };
            self.state.admissions.push(admission);
            self.tick_log(line);
        }
        self.pods.push((pod, created.metadata.uid.clone()));
        Ok(())
    }

    async fn delete(&mut self, stage: &Stage, role: Role) -> Result<(), StoryError> {
        let targets: Vec<StoryPod> = self
            .pods
            .iter()
            .filter(|(p, _)| p.role == role)
            .map(|(p, _)| p.clone())
            .collect();
        for pod in targets {
            let api: Api<Pod> = Api::namespaced(stage.client.clone(), pod.namespace);
            match api.delete(&pod.name, &DeleteParams::default()).await {
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(source) => {
                    return Err(StoryError::Api {
                        what: format!("deleting pod {}", pod.name),
                        source,
                    });
                }
            }
        }
        self.pods.retain(|(p, _)| p.role != role);
        Ok(())
    }

    async fn act(&mut self, stage: &Stage, step: Step, plan: &MemoryPlan) -> Result<(), StoryError> {
        match step {
            Step::LsRise => {
                for node in stage.node_names.clone() {
                    self.create(stage, StoryPod::new(Role::LsPeak, &node, 0, 0))
                        .await?;
                }
            }
            Step::LsFall => self.delete(stage, Role::LsPeak).await?,
            Step::MemoryPressure => match (&plan.skipped, stage.node_names.first()) {
                (None, Some(node)) => {
                    let bytes = plan.ls_cache_now();
                    let pod = StoryPod::new(Role::LsCache, node, 0, bytes);
                    self.tick_log(format!(
                        "{node}: {} fills {} MiB, to about 88 % of {} MiB; the seed's threshold is 70 %",
                        pod.name,
                        bytes >> 20,
                        plan.first_node_capacity >> 20
                    ));
                    self.create(stage, pod).await?;
                }
                (Some(reason), _) => self.tick_log(format!("memory act left out: {reason}")),
                (None, None) => {}
            },
            Step::MemoryRelief => self.delete(stage, Role::LsCache).await?,
            Step::End => {}
        }
        for line in self.state.status_lines() {
            self.tick_log(line);
        }
        Ok(())
    }

    /// One observation: node samples, BE pods that started, evictions with their Events.
    async fn observe(&mut self, stage: &Stage, observer: &mut Observer) -> Result<(), StoryError> {
        self.state.elapsed = self.started.elapsed();
        let samples = observer.sample().await?;
        self.state.record(samples);
        let pods: Api<Pod> = Api::namespaced(stage.client.clone(), BE_NAMESPACE);
        let listed = pods
            .list(&ListParams::default())
            .await
            .map_err(|source| StoryError::Api {
                what: "listing BE pods".into(),
                source,
            })?;
        let phases: BTreeMap<String, String> = listed
            .items
            .iter()
            .filter_map(|p| Some((p.metadata.name.clone()?, p.status.as_ref()?.phase.clone()?)))
            .collect();
        let mut started = Vec::new();
        for admission in self.state.admissions.iter_mut().filter(|a| !a.running) {
            let name = admission.pod.rsplit('/').next().unwrap_or_default();
            if phases.get(name).is_some_and(|p| p == "Running") {
                admission.running = true;
                started.push(format!(
                    "BE pod {} running on {} (batch resources)",
                    admission.pod, admission.node
                ));
            }
        }
        for line in started {
            self.tick_log(line);
        }
        let events: Api<Event> = Api::namespaced(stage.client.clone(), BE_NAMESPACE);
        let listed = events
            .list(&ListParams::default())
            .await
            .map_err(|source| StoryError::Api {
                what: "listing Events".into(),
                source,
            })?;
        for event in listed.items {
            let reason = event.reason.clone().unwrap_or_default();
            if reason != "evictPodSuccess" {
                continue;
            }
            let name = event.involved_object.name.clone().unwrap_or_default();
            let node = self
                .state
                .admissions
                .iter()
                .find(|a| a.pod.ends_with(&format!("/{name}")))
                .map(|a| a.node.clone())
                .unwrap_or_default();
            self.state.evicted(Eviction {
                pod: format!("{BE_NAMESPACE}/{name}"),
                node,
                reason,
                message: event.message.unwrap_or_default(),
                at: self.state.elapsed,
            });
        }
        Ok(())
    }

    /// Observes every tick until `done` holds for the state.
    async fn wait(
        &mut self,
        stage: &Stage,
        what: &str,
        timeout: Duration,
        observer: &mut Observer,
        view: &mut dyn View,
        done: impl Fn(&StoryState) -> bool,
    ) -> Result<(), StoryError> {
        let since = Instant::now();
        self.tick_log(format!("waiting for {what}"));
        loop {
            self.observe(stage, observer).await?;
            view.update(&self.state)?;
            if done(&self.state) {
                return Ok(());
            }
            if since.elapsed() > timeout {
                return Err(StoryError::Timeout {
                    what: what.to_string(),
                    after: timeout,
                });
            }
            tokio::time::sleep(TICK).await;
        }
    }
}

/// Waits until every node's NodeMetric asks for the story's report interval, so koordlet's
/// first report comes within seconds.
async fn wait_report_interval(client: &kube::Client, nodes: &[String]) -> Result<(), StoryError> {
    let api: Api<NodeMetric> = Api::all(client.clone());
    let timeout = Duration::from_secs(30);
    let since = Instant::now();
    loop {
        let listed = api
            .list(&ListParams::default())
            .await
            .map_err(|source| StoryError::Api {
                what: "listing NodeMetrics".into(),
                source,
            })?;
        let ready = nodes.iter().all(|node| {
            listed.items.iter().any(|m| {
                m.metadata.name.as_deref() == Some(node.as_str())
                    && m.spec
                        .metric_collect_policy
                        .as_ref()
                        .and_then(|p| p.report_interval_seconds)
                        == Some(REPORT_INTERVAL_SECONDS as i64)
            })
        });
        if ready {
            return Ok(());
        }
        if since.elapsed() > timeout {
            return Err(StoryError::Timeout {
                what: "NodeMetrics with the story's report interval".into(),
                after: timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
