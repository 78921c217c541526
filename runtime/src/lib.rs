//! # koord-runtime: what every koordinator-rs binary shares
//!
//! The manager, the webhook and koordlet each need the same operational surface: structured
//! logs (`--log-format text|json`), one plain-HTTP admin endpoint with `/healthz`, `/readyz`
//! and Prometheus `/metrics`, and a graceful stop on SIGTERM or Ctrl-C. It lives here once so
//! that the components, which never import each other, behave identically. So does the way each
//! writes what it owns: server-side apply under its own field manager ([`apply()`]), or a
//! read-modify-replace with optimistic concurrency for what it shares
//! ([`read_modify_replace`]). So do the pieces of their command lines: the kubeconfig loading,
//! the file-or-stdin input of offline commands and the Go-style durations every interval flag
//! takes, and the compatibility with upstream Koordinator's command lines and with our earlier
//! environment variable names.

mod admin;
mod apply;
mod cli;
mod duration;
mod env_fallback;
mod events;
mod flag_values;
mod input;
mod kubeconfig;
mod logging;
mod output;
mod process_metrics;
mod replace;
mod shutdown;
mod upstream_flags;
mod watch_log;

pub use admin::{
    AdminServer, Readiness, admin_router, serve_admin, serve_admin_pair, serve_admin_until_signal,
};
pub use apply::{Applied, ApplyConflict, Endpoint, apply, leftovers, removal_patch};
pub use cli::{CliCompat, StartupNotes, parse_cli, process_env};
pub use duration::{DurationError, parse_duration, parse_interval};
pub use env_fallback::{
    EnvFallback, EnvFallbackUse, FallbackKind, apply_env_fallbacks, missing_fallback_args,
};
pub use events::{CLUSTER_SCOPED_EVENT_NAMESPACE, EventPublisher};
pub use flag_values::{BoolError, ListenAddrError, parse_go_bool, parse_listen_addr};
pub use input::{ReadInputError, read_file_or_stdin};
pub use kubeconfig::{KubeconfigError, kube_client, kube_config};
pub use logging::{LogFormat, LoggingError, VERBOSITY_HELP, init_logging, verbosity_filter};
pub use output::print_stdout;
pub use process_metrics::{ProcessCollector, UnsuffixedCounter, register_standard_metrics};
pub use replace::{Edit, read_modify_replace};
pub use shutdown::shutdown_signal;
pub use upstream_flags::{
    FlagValue, IgnoredFlag, IgnoredUse, KLOG_IGNORED, Normalised, TranslatedFlag, UpstreamFlags, long_names,
    normalise_args, upstream_help,
};
pub use watch_log::{log_watch_errors, watch_error_status};
