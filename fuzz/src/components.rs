//! The offline commands of the three components, which read exactly what their servers and
//! agents read: `koord-manager calc`, `koordlet plan` and the webhook's `mutate`/`validate`
//! plus its admission review endpoint.

use std::sync::Arc;

use koord_webhook::review::{Decider, Endpoint, answer};
use koord_webhook::view::StaticView;
use koordlet::plan::{PlanOptions, parse_input, plan as plan_writes};
use koordlet::system::{CgroupDriver, CgroupVersion};
use koordlet_core::FeatureGates;

use crate::{choose, text};

/// A fixed instant, so a finding replays identically.
fn now() -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_750_000_000).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// Input: the multi-document YAML `koord-manager calc` reads.
pub fn calc(data: &[u8]) {
    if let Ok(out) = koord_manager::calc::calc(&text(data), now()) {
        let _ = serde_json::to_string(&out);
    }
}

/// Input: the multi-document YAML `koordlet plan` reads, planned for all four
/// version/driver combinations.
pub fn plan(data: &[u8]) {
    let Ok(input) = parse_input(&text(data)) else {
        return;
    };
    for version in [CgroupVersion::V1, CgroupVersion::V2] {
        for driver in [CgroupDriver::Cgroupfs, CgroupDriver::Systemd] {
            let options = PlanOptions {
                version,
                driver,
                cgroups: None,
                gates: FeatureGates::default(),
                collect_interval_seconds: 1.0,
                system_files: None,
            };
            let _ = plan_writes(&input, &options);
        }
    }
}

/// Input: a selector byte, then either documents for offline `mutate`/`validate` or an
/// AdmissionReview body for one of the four endpoints.
pub fn webhook(data: &[u8]) {
    let (which, rest) = choose(data, 6);
    match which {
        0 => {
            let _ = koord_webhook::offline::run_mutate(&text(rest), Some(7), "default");
        }
        1 => {
            let _ = koord_webhook::offline::run_validate(
                &text(rest),
                "koordinator-system",
                "slo-controller-config",
            );
        }
        n => {
            let endpoint = Endpoint::ALL[usize::from(n - 2) % Endpoint::ALL.len()];
            let decider = Decider::new(Arc::new(StaticView::with_koordinator_priority_classes()));
            let mut dice = 0u32;
            let mut roll = || {
                dice = (dice + 37) % 100;
                dice
            };
            let reply = answer(endpoint, rest, &decider, &mut roll);
            let _ = serde_json::to_vec(&reply.review);
        }
    }
}
