//! noderesource: `kubernetes.io/batch-cpu` / `batch-memory` in Node status.

use std::{collections::BTreeMap, sync::Arc};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use koord_api::{
    cpu_normalization::{NormalizationRatio, RatioDecision},
    names,
};
use koord_runtime::Endpoint;
use kube::{
    Api, Resource,
    runtime::{
        controller::Action,
        events::{Event, EventType},
    },
};

use super::{
    Context, Error, FIELD_MANAGER, STATUS_FIELD_MANAGER, apply, name_of,
    node_owned::{self, PairUpdate},
    nrt_zones::{self, ZoneWrite},
};
use crate::{
    batch::{self, BatchOutcome, BatchStatus, TopologyZones, UpdateDecision, ZoneOutcome},
    desired,
    mid::MidOutcome,
    plan::{NodeBatchPlan, NormalizationPlan, ZonePlan, plan_node_batch},
    snapshot,
};

/// Controller name, in metrics and logs.
pub const NAME: &str = "noderesource";

/// Recomputes the node's batch resources and writes them when the change is worth it.
pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile_started(NAME);
    let result = reconcile_node(node, &ctx).await;
    // Upstream runs its controllers on the leader only: followers' skipped rounds do not count.
    if ctx.leadership.is_leader() {
        ctx.metrics
            .reconcile_finished(NAME, result.as_ref().err().map(Error::metric_label));
    }
    result
}

async fn reconcile_node(node: Arc<Node>, ctx: &Arc<Context>) -> Result<Action, Error> {
    let state = ctx.config();
    if !state.is_loaded() || !ctx.leadership.is_leader() || !ctx.pods.is_ready() {
        return Ok(Action::requeue(ctx.resync));
    }
    let name = name_of(&node)?;
    let now = Timestamp::now();
    let effective = desired::effective(&state, &node);
    let pods = ctx.pods.pods_on(&name);
    let report = match ctx.usage.report(&name) {
        None => None,
        Some(Ok(report)) => Some(report),
        Some(Err(source)) => return Err(Error::Field { node: name, source }),
    };
    let field_error = |source| Error::Field {
        node: name.clone(),
        source,
    };
    let basic_info = ctx.topology.basic_info(&name);
    let topology = ctx.topology.zones(&name);
    let plan = plan_node_batch(
        &state,
        &effective,
        &node,
        &pods,
        report.as_ref(),
        basic_info.as_deref(),
        topology.as_ref(),
        now,
    )
    .map_err(field_error)?;
    let NodeBatchPlan::Decided {
        strategy,
        outcome,
        status,
        normalization,
        mid,
        zones,
    } = plan
    else {
        tracing::debug!(node = %name, "colocation-config has no good value yet; node left untouched");
        return Ok(Action::requeue(ctx.resync));
    };
    ctx.metrics
        .batch_computed(&name, status.published.map(|p| (p.cpu, p.memory)));
    let (capacity, allocatable) = snapshot::published_batch(&node).map_err(field_error)?;
    let last_write = ctx
        .last_batch_write
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&name)
        .copied();
    let decision = batch::decide_update(
        capacity,
        allocatable,
        status.published,
        last_write,
        now,
        &strategy,
    );
    let api: Api<Node> = Api::all(ctx.client.clone());
    let ratio_written = match &normalization {
        Some(plan) => write_normalization(ctx, &api, &node, &name, plan).await?,
        None => None,
    };
    let batch_reason = match decision {
        UpdateDecision::Write(reason) => Some(reason),
        // batch-cpu follows the new ratio at once, whatever the diff threshold says.
        _ if ratio_written.is_some()
            && status.published.is_some()
            && decision != UpdateDecision::Unchanged =>
        {
            Some(batch::UpdateReason::NormalizationRatio)
        }
        _ => None,
    };
    let (mid_capacity, mid_allocatable) = snapshot::published_mid(&node).map_err(field_error)?;
    let last_mid_write = ctx
        .last_mid_write
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&name)
        .copied();
    let mid_reason = match batch::decide_update(
        mid_capacity,
        mid_allocatable,
        mid.amounts(),
        last_mid_write,
        now,
        &strategy,
    ) {
        UpdateDecision::Write(reason) => Some(reason),
        UpdateDecision::Unchanged | UpdateDecision::Postpone => None,
    };
    if batch_reason.is_none() && mid_reason.is_none() {
        sync_zones(ctx, &node, &name, topology.as_ref(), &zones, &strategy, now).await?;
        return Ok(Action::requeue(ctx.resync));
    }

    // Keyed by name, valid for the node's UID only: a Node deleted and created again under its
    // name starts with nothing applied.
    let uid = node.metadata.uid.clone().unwrap_or_default();
    let applied = ctx
        .applied_pairs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&name)
        .filter(|(applied_uid, _)| *applied_uid == uid)
        .map(|(_, applied)| *applied)
        .unwrap_or_default();
    let batch_update = PairUpdate::for_pair(batch_reason.is_some(), status.published, applied.batch);
    let mid_update = PairUpdate::for_pair(mid_reason.is_some(), mid.amounts(), applied.mid);
    let body = node_owned::status_apply(&node, batch_update, mid_update);
    let endpoint = (STATUS_FIELD_MANAGER, Endpoint::Status);
    apply(
        ctx,
        &api,
        endpoint,
        "nodes/status",
        &body,
        &node_owned::STATUS_OWNED,
    )
    .await?;
    ctx.applied_pairs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.clone(), (uid, applied.after(batch_update, mid_update)));
    if let Some(reason) = batch_reason {
        let mut updates = BTreeMap::from([(
            names::ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE,
            status.origin_annotation(),
        )]);
        // The Node read at the start predates the ratio written this round.
        if let Some(ratio) = ratio_written {
            updates.insert(names::ANNOTATION_CPU_NORMALIZATION_RATIO, ratio);
        }
        let body = node_owned::metadata_apply(&node, &updates);
        let endpoint = (FIELD_MANAGER, Endpoint::Main);
        apply(ctx, &api, endpoint, "nodes", &body, &node_owned::METADATA_OWNED).await?;
        ctx.last_batch_write
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), now);
        ctx.metrics.batch_writes.inc();
        ctx.metrics
            .batch_published(&name, status.published.map(|p| (p.cpu, p.memory)));
        explain(ctx, &node, &name, &outcome, &status, reason).await;
    }
    if let Some(reason) = mid_reason {
        ctx.last_mid_write
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), now);
        explain_mid(ctx, &node, &name, &mid, reason).await;
    }
    sync_zones(ctx, &node, &name, topology.as_ref(), &zones, &strategy, now).await?;
    Ok(Action::requeue(ctx.resync))
}

/// Writes the batch entries of the node's NUMA zones when the change is worth it (the node
/// rule, per entry). Disabled, degraded, or without zones: the object is left as it is.
async fn sync_zones(
    ctx: &Context,
    node: &Node,
    name: &str,
    topology: Option<&TopologyZones>,
    plan: &ZonePlan,
    strategy: &batch::BatchStrategy,
    now: Timestamp,
) -> Result<(), Error> {
    let (ZoneOutcome::Allocatable { zones, notes }, Some(topology)) = (&plan.outcome, topology) else {
        return Ok(());
    };
    let last_write = ctx
        .last_zone_write
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(name)
        .copied();
    let UpdateDecision::Write(reason) =
        batch::decide_zone_update(&topology.entries, &plan.targets, last_write, now, strategy)
    else {
        return Ok(());
    };
    let written = nrt_zones::write(&ctx.client, name, &plan.targets).await;
    match &written {
        Ok(ZoneWrite::Written) => ctx.metrics.zone_write_finished(true),
        // The object already said so (our own write not yet seen by the watch), or is gone.
        Ok(ZoneWrite::AlreadyInPlace | ZoneWrite::NoZones) => {}
        Err(_) => ctx.metrics.zone_write_finished(false),
    }
    let written = written?;
    if written != ZoneWrite::NoZones {
        ctx.metrics.zone_batch_published(name, &plan.targets);
    }
    ctx.last_zone_write
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.to_owned(), now);
    let mut note: Vec<String> = zones
        .iter()
        .map(|zone| format!("{}: {}", zone.name, zone.explain))
        .collect();
    note.extend(notes.iter().cloned());
    note.extend(plan.skipped.iter().map(|skipped| format!("{skipped}: left out")));
    if written == ZoneWrite::Written {
        let note = note.join("; ");
        tracing::info!(node = name, reason = ?reason, "NUMAZoneBatchResourceUpdated: {note}");
        node_event(
            ctx,
            node,
            name,
            "NUMAZoneBatchResourceUpdated",
            note,
            "UpdateNodeResourceTopology",
        )
        .await;
    } else {
        tracing::debug!(
            node = name,
            "NUMA zone batch entries already up to date: {}",
            note.join("; ")
        );
    }
    Ok(())
}

/// One log line and one Node Event for a mid resource write.
async fn explain_mid(ctx: &Context, node: &Node, name: &str, mid: &MidOutcome, reason: batch::UpdateReason) {
    let event_reason = match mid {
        MidOutcome::Disabled | MidOutcome::Degraded(_) => "MidResourceRemoved",
        MidOutcome::Static(_) | MidOutcome::Allocatable(_) => "MidResourceUpdated",
    };
    let note = mid.to_string();
    tracing::info!(node = name, reason = ?reason, "{event_reason}: {note}");
    node_event(ctx, node, name, event_reason, note, "UpdateNodeStatus").await;
}

/// A Normal Event on the Node; a failure to publish is logged, never an error of the reconcile.
async fn node_event(ctx: &Context, node: &Node, name: &str, reason: &str, note: String, action: &str) {
    let event = Event {
        type_: EventType::Normal,
        reason: reason.to_owned(),
        // The Events API caps notes at 1 KiB.
        note: Some(note.chars().take(1000).collect()),
        action: action.to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &node.object_ref(&())).await {
        tracing::warn!(node = name, %error, reason, "could not publish the Node Event");
    }
}

/// Writes the node's `cpu-normalization-ratio` annotation when it should change; logs (once
/// per reason) why no ratio can be decided. Returns the value it wrote.
async fn write_normalization(
    ctx: &Context,
    api: &Api<Node>,
    node: &Node,
    name: &str,
    plan: &NormalizationPlan,
) -> Result<Option<String>, Error> {
    ctx.metrics
        .cpu_normalization_ratio
        .get_or_create(&crate::metrics::NodeLabels {
            node: name.to_owned(),
        })
        .set(f64::from(plan.applied.hundredths()) / 100.0);
    let problem = match &plan.decision {
        RatioDecision::Unknown(problem) => Some(problem.to_string()),
        RatioDecision::Disabled | RatioDecision::Ratio(_) => None,
    };
    ctx.metrics
        .cpu_normalization_undecided
        .get_or_create(&crate::metrics::NodeLabels {
            node: name.to_owned(),
        })
        .set(i64::from(problem.is_some()));
    {
        let mut problems = ctx
            .normalization_problems
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match &problem {
            Some(problem) if problems.get(name) != Some(problem) => {
                tracing::warn!(
                    node = name,
                    %problem,
                    kept = %plan.applied,
                    "CPU normalization is on but no ratio can be decided; the node keeps its current ratio"
                );
                problems.insert(name.to_owned(), problem.clone());
            }
            Some(_) => {}
            None => {
                problems.remove(name);
            }
        }
    }
    let Some(ratio) = plan.annotation_update() else {
        return Ok(None);
    };
    let written = ratio.to_string();
    let updates = BTreeMap::from([(names::ANNOTATION_CPU_NORMALIZATION_RATIO, written.clone())]);
    let body = node_owned::metadata_apply(node, &updates);
    let endpoint = (FIELD_MANAGER, Endpoint::Main);
    apply(ctx, api, endpoint, "nodes", &body, &node_owned::METADATA_OWNED).await?;
    let old = plan.current.map_or_else(|| "none".to_owned(), |r| r.to_string());
    let note = format!("cpu-normalization-ratio {old} -> {ratio}");
    if plan.current.unwrap_or(NormalizationRatio::ONE) == ratio {
        // Only the spelling of "no scaling" is new (every node gets 1.00 once): no Event.
        tracing::debug!(node = name, "{note}");
        return Ok(Some(written));
    }
    tracing::info!(node = name, "CPUNormalizationRatioUpdated: {note}");
    node_event(
        ctx,
        node,
        name,
        "CPUNormalizationRatioUpdated",
        note,
        "UpdateNodeMeta",
    )
    .await;
    Ok(Some(written))
}

/// One log line and one Node Event with the formula's terms.
async fn explain(
    ctx: &Context,
    node: &Node,
    name: &str,
    outcome: &BatchOutcome,
    status: &BatchStatus,
    reason: batch::UpdateReason,
) {
    let (event_reason, note) = match outcome {
        BatchOutcome::Disabled => (
            "BatchResourceRemoved",
            "colocation is disabled for this node".to_owned(),
        ),
        BatchOutcome::Degraded(why) => ("BatchResourceDegraded", format!("batch resources removed: {why}")),
        BatchOutcome::Allocatable { explain, .. } => {
            let third_party = match status.published {
                Some(p) if p.cpu != status.origin.cpu || p.memory != status.origin.memory => {
                    format!(
                        "; after third-party allocations: batch-cpu {}, batch-memory {}",
                        p.cpu, p.memory
                    )
                }
                _ => String::new(),
            };
            let normalized = if status.cpu_normalization.scales() {
                format!(
                    "; batch-cpu × cpu-normalization-ratio {} = {}",
                    status.cpu_normalization, status.origin.cpu
                )
            } else {
                String::new()
            };
            (
                "BatchResourceUpdated",
                format!("{explain}{normalized}{third_party}"),
            )
        }
    };
    tracing::info!(node = name, reason = ?reason, "{event_reason}: {note}");
    node_event(ctx, node, name, event_reason, note, "UpdateNodeStatus").await;
}
