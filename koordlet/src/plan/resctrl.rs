//! `koordlet plan --resctrl-root DIR`: the resctrl strategy on a (fake) resctrl tree.
//!
//! The tree alone says nothing about the CPU vendor, so the bandwidth unit is inferred from
//! the root group's `MB` values (above 100 means AMD's 1/8 GB/s).

use std::path::Path;

use koord_api::NodeSLOSpec;
use koordlet_core::features::FeatureGates;
use koordlet_core::resctrl::CpuVendor;
use koordlet_core::strategies::resctrl;
use serde_json::{Value, json};

use super::PrintedWrite;
use crate::states::PodMeta;
use crate::system::resctrl::ResctrlFs;

fn skipped(reason: impl std::fmt::Display) -> (Value, Vec<PrintedWrite>) {
    (json!({ "skipped": reason.to_string() }), Vec::new())
}

/// `strategies.resctrl` and the schemata writes, each showing the group's current line.
pub fn plan(
    slo: Option<&NodeSLOSpec>,
    pods: &[PodMeta],
    gates: &FeatureGates,
    root: Option<&Path>,
) -> (Value, Vec<PrintedWrite>) {
    if !gates.enabled("RdtResctrl") {
        return skipped("feature gate RdtResctrl is off");
    }
    let Some(root) = root else {
        return skipped("no resctrl tree (--resctrl-root not given)");
    };
    let Some(slo) = slo else {
        return skipped("no NodeSLO");
    };
    let fs = ResctrlFs::new(root);
    let facts = match fs.read_facts(CpuVendor::Unknown) {
        Ok(f) => f,
        Err(e) => return skipped(format!("resctrl tree: {e}")),
    };
    let plan = resctrl::decide(slo, &facts, pods);
    let writes = plan
        .writes
        .iter()
        .map(|w| PrintedWrite {
            cgroup: w.target(),
            file: "schemata".into(),
            value: w.line.to_string(),
            strategy: w.strategy.into(),
            current: fs
                .group_schemata(w.group)
                .ok()
                .and_then(|s| s.line(&w.line.resource).map(ToString::to_string)),
        })
        .collect();
    (serde_json::to_value(&plan).unwrap_or(Value::Null), writes)
}
