//! noderesource: `kubernetes.io/batch-cpu` / `batch-memory` in Node status.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use koord_api::{
    cpu_normalization::{NormalizationRatio, RatioDecision},
    names,
};
use kube::{
    Api, Resource,
    api::{Patch, PatchParams},
    runtime::{
        controller::Action,
        events::{Event, EventType},
    },
};
use serde_json::{Value, json};

use super::{Context, Error, name_of};
use crate::{
    batch::{self, Amounts, BatchOutcome, BatchStatus, UpdateDecision},
    desired,
    mid::MidOutcome,
    plan::{NodeBatchPlan, NormalizationPlan, plan_node_batch},
    snapshot,
};

/// Controller name, in metrics and logs.
pub const NAME: &str = "noderesource";

/// Field manager of the Node status patches.
const FIELD_MANAGER: &str = "koord-manager";

/// A pair of extended resources for a status merge patch: their values, or nulls to remove them.
fn resource_entries(amounts: Option<Amounts>, cpu: &str, memory: &str) -> serde_json::Map<String, Value> {
    let (cpu_value, memory_value) = match amounts {
        Some(a) => (json!(a.cpu.to_string()), json!(a.memory.to_string())),
        None => (Value::Null, Value::Null),
    };
    [(cpu.to_owned(), cpu_value), (memory.to_owned(), memory_value)]
        .into_iter()
        .collect()
}

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
    let plan = plan_node_batch(
        &state,
        &effective,
        &node,
        &pods,
        report.as_ref(),
        basic_info.as_deref(),
        now,
    )
    .map_err(field_error)?;
    let NodeBatchPlan::Decided {
        strategy,
        outcome,
        status,
        normalization,
        mid,
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
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let ratio_written = match &normalization {
        Some(plan) => write_normalization(ctx, &api, &params, &node, &name, plan).await?,
        None => false,
    };
    let batch_reason = match decision {
        UpdateDecision::Write(reason) => Some(reason),
        // batch-cpu follows the new ratio at once, whatever the diff threshold says.
        _ if ratio_written && status.published.is_some() && decision != UpdateDecision::Unchanged => {
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
        return Ok(Action::requeue(ctx.resync));
    }

    let mut entries = serde_json::Map::new();
    if batch_reason.is_some() {
        entries.extend(resource_entries(
            status.published,
            names::RESOURCE_BATCH_CPU,
            names::RESOURCE_BATCH_MEMORY,
        ));
    }
    if mid_reason.is_some() {
        entries.extend(resource_entries(
            mid.amounts(),
            names::RESOURCE_MID_CPU,
            names::RESOURCE_MID_MEMORY,
        ));
    }
    let entries = Value::Object(entries);
    let patch = json!({ "status": { "capacity": entries, "allocatable": entries } });
    api.patch_status(&name, &params, &Patch::Merge(patch)).await?;
    if let Some(reason) = batch_reason {
        let origin = json!({ "metadata": { "annotations": {
            names::ANNOTATION_ORIGIN_EXTENDED_ALLOCATABLE: status.origin_annotation() } } });
        api.patch(&name, &params, &Patch::Merge(origin)).await?;
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
    Ok(Action::requeue(ctx.resync))
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
/// per reason) why no ratio can be decided. Returns whether it wrote.
async fn write_normalization(
    ctx: &Context,
    api: &Api<Node>,
    params: &PatchParams,
    node: &Node,
    name: &str,
    plan: &NormalizationPlan,
) -> Result<bool, Error> {
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
        return Ok(false);
    };
    let patch = json!({ "metadata": { "annotations": {
        names::ANNOTATION_CPU_NORMALIZATION_RATIO: ratio.to_string() } } });
    api.patch(name, params, &Patch::Merge(patch)).await?;
    let old = plan.current.map_or_else(|| "none".to_owned(), |r| r.to_string());
    let note = format!("cpu-normalization-ratio {old} -> {ratio}");
    if plan.current.unwrap_or(NormalizationRatio::ONE) == ratio {
        // Only the spelling of "no scaling" is new (every node gets 1.00 once): no Event.
        tracing::debug!(node = name, "{note}");
        return Ok(true);
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
    Ok(true)
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
