//! The scenario suite: Koordinator's user-visible behaviour, checked against the embedded
//! cluster with every component (default) or against a real cluster with the chart installed
//! (`KOORD_E2E_KUBECONFIG=<kubeconfig>`; run with `--test-threads=1`). Each scenario creates
//! its own uniquely named objects and removes them, also on failure; one whose precondition is
//! missing on the given cluster prints `skipped: <reason>` and passes. See `e2e/README.md`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

mod common;
#[path = "scenarios/env.rs"]
mod env;

#[path = "scenarios/colocation.rs"]
mod colocation;
#[path = "scenarios/control.rs"]
mod control;
#[path = "scenarios/dashboard.rs"]
mod dashboard;
#[path = "scenarios/eviction.rs"]
mod eviction;
#[path = "scenarios/faults.rs"]
mod faults;
#[path = "scenarios/footprint.rs"]
mod footprint;
#[path = "scenarios/migration.rs"]
mod migration;
#[path = "scenarios/normalization.rs"]
mod normalization;
#[path = "scenarios/runtime_hooks.rs"]
mod runtime_hooks;
#[path = "scenarios/scheduling.rs"]
mod scheduling;
