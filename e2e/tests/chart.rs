//! The Helm chart (`charts/koordinator`): helm lint and template for several value sets, the
//! rendered objects parse as their Kubernetes kinds, every container's args are accepted by the
//! component's own clap parser, the webhook wiring (configuration names, Service, paths, policies)
//! agrees with the webhook's flags and with the configurations the e2e runner registers, the
//! RBAC grants exactly the audited calls, and the rendered objects work in the embedded cluster:
//! koord-webhook started with the chart's args injects its CA into the chart's configurations and
//! mutates a pod created through the API; the calls koord-webhook and koord-manager really make
//! there are all allowed by the rendered roles. `values.schema.json` refuses wrong values; the
//! labels and selectors (`koord-app`, `selectorStyle`), PodDisruptionBudgets, anti-affinity and
//! the optional Prometheus objects select what they should; upstream Koordinator flags in
//! `extraArgs` start every component.
//!
//! Needs helm (`scripts/install-helm.sh`, or `$HELM`); without it every test prints
//! `skipped: helm not found` and passes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod chart_support;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use base64::Engine;
use clap::CommandFactory;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use koord_testcluster::{ClusterOptions, TestCluster};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use chart_support::{
    Access, NAMESPACE, Rendered, container, container_argv, container_env, named_port, render,
};

/// Value sets every structural test runs against (besides the defaults).
const VARIANTS: &[&[&str]] = &[
    &[],
    &["webhook.certs.mode=certManager"],
    &[
        "configNamespace=koord-config",
        "logFormat=text",
        "manager.leaderElection.enabled=false",
        "manager.controllers={nodeslo,nodemetric}",
        "koordlet.podsSource=apiserver",
        "koordlet.privileged=false",
        "koordlet.cgroupDriver=systemd",
        "koordlet.dryRun=true",
        "koordlet.featureGates.BECPUEvict=true",
        "koordlet.featureGates.BEMemoryEvict=true",
        "koordlet.featureGates.CPUBurst=false",
        "koordlet.kubeletUrl=https://$(HOST_IP):10250",
        "webhook.skipMutatingResources=true",
        "webhook.disableExtendedResourceSpec=true",
        "webhook.allowPriorityLabelUpdate=true",
        "webhook.excludedNamespaces={monitoring,istio-system}",
        "webhook.replicas=1",
        "webhook.configMapWebhook.enabled=false",
    ],
    &[
        "manager.enabled=false",
        "koordlet.enabled=false",
        "priorityClasses.create=false",
        "sloConfig.create=false",
    ],
];

/// The environment the chart tests parse with: none, so the chart's args alone decide (the
/// components read old environment names through this lookup).
fn no_env(_: &str) -> Option<std::ffi::OsString> {
    None
}

/// koord-manager's flags parsed as the binary parses them (upstream spellings normalised).
fn manager_cli<I: IntoIterator<Item = A>, A: Into<std::ffi::OsString>>(
    argv: I,
) -> Result<koord_manager::cli::Cli, clap::Error> {
    koord_manager::cli::parse(argv, &no_env).map(|(cli, _)| cli)
}

/// koord-webhook's flags parsed as the binary parses them.
fn webhook_cli<I: IntoIterator<Item = A>, A: Into<std::ffi::OsString>>(
    argv: I,
) -> Result<koord_webhook::cli::Cli, clap::Error> {
    koord_webhook::cli::parse(argv, &no_env).map(|(cli, _)| cli)
}

/// koordlet's flags parsed as the binary parses them.
fn koordlet_args<I: IntoIterator<Item = A>, A: Into<std::ffi::OsString>>(
    argv: I,
) -> Result<koordlet::cli::Args, clap::Error> {
    koordlet::cli::parse(argv, &no_env).map(|(args, _)| args)
}

/// koord-scheduler-extender's flags parsed as the binary parses them.
fn extender_cli<I: IntoIterator<Item = A>, A: Into<std::ffi::OsString>>(
    argv: I,
) -> Result<koord_scheduler_extender::cli::Cli, clap::Error> {
    koord_scheduler_extender::cli::parse(argv, &no_env).map(|(cli, _)| cli)
}

fn variant_name(set: &[&str]) -> String {
    if set.is_empty() {
        "defaults".into()
    } else {
        set.join(",")
    }
}

#[path = "chart_cases/availability.rs"]
mod availability;
#[path = "chart_cases/cluster.rs"]
mod cluster;
#[path = "chart_cases/labels.rs"]
mod labels;
#[path = "chart_cases/monitoring.rs"]
mod monitoring;
#[path = "chart_cases/rbac.rs"]
mod rbac;
#[path = "chart_cases/render.rs"]
mod render;
#[path = "chart_cases/scheduler.rs"]
mod scheduler;
#[path = "chart_cases/schema.rs"]
mod schema;
#[path = "chart_cases/upstream_args.rs"]
mod upstream_args;
#[path = "chart_cases/versions.rs"]
mod versions;
#[path = "chart_cases/wiring.rs"]
mod wiring;
