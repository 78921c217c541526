//! # koord-runtime: what every koordinator-rs binary shares
//!
//! The manager, the webhook and koordlet each need the same operational surface: structured
//! logs (`--log-format text|json`), one plain-HTTP admin endpoint with `/healthz`, `/readyz`
//! and Prometheus `/metrics`, and a graceful stop on SIGTERM or Ctrl-C. It lives here once so
//! that the components, which never import each other, behave identically. So do the pieces of
//! their command lines: the kubeconfig loading, the file-or-stdin input of offline commands and
//! the Go-style durations every interval flag takes.

mod admin;
mod duration;
mod input;
mod kubeconfig;
mod logging;
mod output;
mod shutdown;

pub use admin::{
    AdminServer, Readiness, admin_router, serve_admin, serve_admin_pair, serve_admin_until_signal,
};
pub use duration::{DurationError, parse_duration, parse_interval};
pub use input::{ReadInputError, read_file_or_stdin};
pub use kubeconfig::{KubeconfigError, kube_client, kube_config};
pub use logging::{LogFormat, LoggingError, init_logging};
pub use output::print_stdout;
pub use shutdown::shutdown_signal;
