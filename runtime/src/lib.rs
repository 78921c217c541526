//! # koord-runtime: what every koordinator-rs binary shares
//!
//! The manager, the webhook and koordlet each need the same operational surface: structured
//! logs (`--log-format text|json`), one plain-HTTP admin endpoint with `/healthz`, `/readyz`
//! and Prometheus `/metrics`, and a graceful stop on SIGTERM or Ctrl-C. It lives here once so
//! that the components, which never import each other, behave identically.

mod admin;
mod logging;
mod shutdown;

pub use admin::{AdminServer, Readiness, admin_router, serve_admin};
pub use logging::{LogFormat, LoggingError, init_logging};
pub use shutdown::shutdown_signal;
