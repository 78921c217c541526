//! Command-line flags; every flag can also be set by the environment variable named in `--help`
//! (`KOORD_WEBHOOK_*`; upstream's `WEBHOOK_PORT`, `SECRET_NAME`, `SERVICE_NAME`, ... keep
//! working, see [`upstream`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use koord_runtime::LogFormat;

pub mod upstream;
pub use upstream::parse;

/// koord-webhook: Koordinator admission webhook (profile mutation, batch resources, validation).
#[derive(Debug, Parser)]
#[command(name = "koord-webhook", version, about, long_about = None)]
pub struct Cli {
    /// Offline commands; without one, the admission server runs.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Server flags.
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Offline commands sharing the server's decision code.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Mutate a Pod as the server would and explain each profile's outcome (prints JSON).
    Mutate(MutateArgs),
    /// Validate ConfigMaps, profiles and pods as the server would (exit 0 valid, 1 violations, 2 unreadable).
    Validate(ValidateArgs),
}

/// `mutate` flags.
#[derive(Debug, Args)]
pub struct MutateArgs {
    /// Multi-document YAML: exactly one Pod, its ClusterColocationProfiles, optionally its Namespace and PriorityClasses ("-" = stdin).
    #[arg(short = 'f', long = "file")]
    pub file: String,
    /// Seed for the probability draw, for reproducible answers (default: random).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Namespace of the pod when it names none.
    #[arg(long, default_value = "default")]
    pub namespace: String,
}

/// `validate` flags.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Multi-document YAML of ConfigMaps, ClusterColocationProfiles, Pods (and Nodes for the overlap check) ("-" = stdin).
    #[arg(short = 'f', long = "file")]
    pub file: String,
    /// Namespace of the slo-controller-config.
    #[arg(
        long,
        env = "KOORD_WEBHOOK_CONFIG_NAMESPACE",
        default_value = "koordinator-system"
    )]
    pub config_namespace: String,
    /// Name of the slo-controller-config.
    #[arg(
        long,
        env = "KOORD_WEBHOOK_SLO_CONFIG_NAME",
        default_value = "slo-controller-config"
    )]
    pub slo_config_name: String,
    /// `text`: one line per violation. `json`: one array of
    /// `{document, kind, name, field, rule, message}` objects (`[]` when valid).
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: OutputFormat,
}

/// Output of `validate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// One line per violation: `document N (Kind name), field, rule`.
    Text,
    /// A JSON array of violation objects, for CI scripts.
    Json,
}

/// Where the serving certificate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CertMode {
    /// Self-signed CA + serving certificate kept in a Secret, caBundle injected (default).
    Secret,
    /// Externally managed files in --cert-dir (e.g. cert-manager), reloaded when they change.
    Dir,
}

/// Flags of the admission server.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// HTTPS port of the admission server.
    #[arg(long, env = "KOORD_WEBHOOK_PORT", default_value_t = 9876)]
    pub port: u16,
    /// Address the admission server binds.
    #[arg(long, env = "KOORD_WEBHOOK_BIND_ADDRESS", default_value = "0.0.0.0")]
    pub bind_address: std::net::IpAddr,
    /// Plain-HTTP address serving /healthz, /readyz and /metrics; `:PORT` is every interface.
    #[arg(
        long,
        visible_alias = "health-probe-addr",
        env = "KOORD_WEBHOOK_HEALTH_ADDR",
        default_value = "0.0.0.0:8000",
        value_parser = koord_runtime::parse_listen_addr
    )]
    pub health_addr: SocketAddr,
    /// Plain-HTTP address serving /metrics (and health); equal to --health-addr means one
    /// listener. `:PORT` is every interface.
    #[arg(long, env = "KOORD_WEBHOOK_METRICS_ADDR", default_value = "0.0.0.0:8080", value_parser = koord_runtime::parse_listen_addr)]
    pub metrics_addr: SocketAddr,
    /// Certificate mode.
    #[arg(long, env = "KOORD_WEBHOOK_CERT_MODE", value_enum, default_value_t = CertMode::Secret)]
    pub cert_mode: CertMode,
    /// Directory with tls.crt/tls.key (or cert.pem/key.pem) for --cert-mode dir.
    #[arg(
        long,
        env = "KOORD_WEBHOOK_CERT_DIR",
        default_value = "/tmp/koordinator-webhook-certs"
    )]
    pub cert_dir: PathBuf,
    /// How often the cert dir is checked for new files, or the Secret re-synced (Go duration:
    /// `60s`, `1m30s`, `2h`).
    #[arg(long, env = "KOORD_WEBHOOK_CERT_SYNC_INTERVAL", value_parser = koord_runtime::parse_interval, default_value = "60s")]
    pub cert_sync_interval: Duration,
    /// Secret holding the CA and serving certificate (--cert-mode secret).
    #[arg(
        long,
        env = "KOORD_WEBHOOK_SECRET_NAME",
        default_value = "koordinator-webhook-certs"
    )]
    pub secret_name: String,
    /// Namespace of the webhook (Secret, Service).
    #[arg(long, env = "POD_NAMESPACE", default_value = "koordinator-system")]
    pub namespace: String,
    /// Service in front of the webhook; its DNS names go into the serving certificate.
    #[arg(
        long,
        env = "KOORD_WEBHOOK_SERVICE_NAME",
        default_value = "koordinator-webhook-service"
    )]
    pub service_name: String,
    /// Extra host name (or IP) for the serving certificate, e.g. when API servers call a URL.
    #[arg(long, env = "KOORD_WEBHOOK_HOST")]
    pub webhook_host: Option<String>,
    /// MutatingWebhookConfiguration to inject the caBundle into ("" = none).
    #[arg(
        long,
        env = "KOORD_WEBHOOK_MUTATING_WEBHOOK_NAME",
        default_value = "koordinator-mutating-webhook-configuration"
    )]
    pub mutating_webhook_name: String,
    /// ValidatingWebhookConfiguration to inject the caBundle into ("" = none).
    #[arg(
        long,
        env = "KOORD_WEBHOOK_VALIDATING_WEBHOOK_NAME",
        default_value = "koordinator-validating-webhook-configuration"
    )]
    pub validating_webhook_name: String,
    /// Namespace of the slo-controller-config.
    #[arg(
        long,
        env = "KOORD_WEBHOOK_CONFIG_NAMESPACE",
        default_value = "koordinator-system"
    )]
    pub config_namespace: String,
    /// Name of the slo-controller-config.
    #[arg(
        long,
        env = "KOORD_WEBHOOK_SLO_CONFIG_NAME",
        default_value = "slo-controller-config"
    )]
    pub slo_config_name: String,
    /// Never rewrite cpu/memory into batch/mid resources (upstream gate ColocationProfileSkipMutatingResources).
    #[arg(long, env = "KOORD_WEBHOOK_SKIP_MUTATING_RESOURCES", num_args = 0..=1, default_value = "false", default_missing_value = "true", action = ArgAction::Set, value_parser = koord_runtime::parse_go_bool)]
    pub skip_mutating_resources: bool,
    /// Do not write the extended-resource-spec annotation (upstream gate DisableExtendedResourceSpec).
    #[arg(long, env = "KOORD_WEBHOOK_DISABLE_EXTENDED_RESOURCE_SPEC", num_args = 0..=1, default_value = "false", default_missing_value = "true", action = ArgAction::Set, value_parser = koord_runtime::parse_go_bool)]
    pub disable_extended_resource_spec: bool,
    /// Allow changing label koordinator.sh/priority on pod UPDATE (upstream gate ColocationProfileSkipValidatingPriority).
    #[arg(long, env = "KOORD_WEBHOOK_ALLOW_PRIORITY_LABEL_UPDATE", num_args = 0..=1, default_value = "false", default_missing_value = "true", action = ArgAction::Set, value_parser = koord_runtime::parse_go_bool)]
    pub allow_priority_label_update: bool,
    /// Namespaces whose pods are never mutated or validated, comma-separated, besides
    /// `kube-system` and the webhook's own namespace (`--namespace`), which are always excluded.
    /// Holds on every Kubernetes version, also before 1.21, where the webhook configurations'
    /// namespace-name selector matches nothing.
    #[arg(
        long,
        env = "KOORD_WEBHOOK_EXCLUDED_NAMESPACES",
        value_delimiter = ',',
        num_args = 0..
    )]
    pub excluded_namespaces: Vec<String>,
    /// Log format.
    #[arg(long, env = "KOORD_WEBHOOK_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// klog verbosity (`--v=4`); see `koord_runtime::verbosity_filter`.
    #[arg(long = "v", value_name = "N", help = koord_runtime::VERBOSITY_HELP)]
    pub verbosity: Option<u8>,
    /// kubeconfig file (default: $KUBECONFIG or ~/.kube/config, else the in-cluster service account).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

impl ServerArgs {
    /// Every namespace whose pods the pod endpoints leave alone: `kube-system`, the webhook's
    /// own namespace and `--excluded-namespaces`.
    pub fn excluded_namespaces(&self) -> crate::review::ExcludedNamespaces {
        crate::review::ExcludedNamespaces::new(
            ["kube-system", self.namespace.as_str()]
                .into_iter()
                .chain(self.excluded_namespaces.iter().map(|name| name.trim())),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excluded_namespaces_always_hold_kube_system_and_the_webhooks_own() {
        let cli = Cli::try_parse_from([
            "koord-webhook",
            "--namespace=koord",
            "--excluded-namespaces=a, b,,c",
        ])
        .unwrap();
        let excluded = cli.server.excluded_namespaces();
        assert_eq!(
            excluded.names().collect::<Vec<_>>(),
            ["a", "b", "c", "koord", "kube-system"]
        );
        let cli = Cli::try_parse_from(["koord-webhook"]).unwrap();
        assert_eq!(
            cli.server.excluded_namespaces().names().collect::<Vec<_>>(),
            ["koordinator-system", "kube-system"]
        );
    }

    fn sync_interval(flag: &str) -> Result<Duration, clap::Error> {
        Cli::try_parse_from(["koord-webhook", flag]).map(|cli| cli.server.cert_sync_interval)
    }

    #[test]
    fn cert_sync_interval_takes_go_durations() {
        assert_eq!(
            sync_interval("--cert-sync-interval=1m30s").unwrap(),
            Duration::from_secs(90)
        );
        assert_eq!(
            sync_interval("--cert-sync-interval=500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(
            sync_interval("--cert-sync-interval=60").unwrap(),
            Duration::from_secs(60)
        );
        let err = sync_interval("--cert-sync-interval=0s").unwrap_err().to_string();
        assert!(err.contains("an interval must be longer than zero"), "{err}");
        let err = sync_interval("--cert-sync-interval=5d").unwrap_err().to_string();
        assert!(err.contains("unknown unit \"d\""), "{err}");
    }
}
