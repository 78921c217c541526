//! Structured logging through `tracing`, human-readable or JSON.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// How log lines are written to stderr.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per event, for log pipelines.
    Json,
}

/// Logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// `RUST_LOG` (or the given default) is not a valid filter.
    #[error("invalid log filter {filter:?}: {source}")]
    Filter {
        /// The filter text that failed to parse.
        filter: String,
        /// Why it failed.
        source: tracing_subscriber::filter::ParseError,
    },
    /// A global subscriber was already installed (logging initialised twice).
    #[error("logging is already initialised: {0}")]
    AlreadyInitialised(String),
}

/// klog's `--v=N` (upstream's charts pass `--v=4`) as our default log filter. klog's levels:
/// 0-2 operational, 3 extended, 4 debug, 5+ trace. Ours: 0-3 (and no `--v`) `info`; 4 `debug`
/// and 5 or more `trace` for our own crates (targets starting with `koord`: koord_manager,
/// koordlet, ...), dependencies staying at `info`. `RUST_LOG`, when set, wins over `--v`.
///
/// Below 4, kube-client's own line for each failed request (target
/// `kube_client::client::builder`, at ERROR with no word of what the request was for) is left
/// out: every such failure reaches
/// the component that made the request, which logs it once with its context and what happens
/// next (retry, keep the last state). During an API-server outage that halves the lines, and
/// log alerts on ERROR do not fire for failures the component retries.
pub fn verbosity_filter(verbosity: Option<u8>) -> &'static str {
    match verbosity.unwrap_or(0) {
        0..=3 => "info,kube_client::client::builder=off",
        4 => "info,koord=debug",
        _ => "info,koord=trace",
    }
}

/// `--help` text of every binary's `--v` flag.
pub const VERBOSITY_HELP: &str = "Log level in upstream's klog numbers: 0-3 info, 4 debug, 5+ trace (our crates; \
                                  dependencies stay at info; from 4 kube-client's own line per \
                                  failed request too). RUST_LOG, when set, wins";

/// Installs the global subscriber. The filter comes from `RUST_LOG`, else `default_filter`
/// (e.g. `"info"`), so operators can raise verbosity per module without a rebuild.
pub fn init_logging(format: LogFormat, default_filter: &str) -> Result<(), LoggingError> {
    let filter_text = std::env::var("RUST_LOG").unwrap_or_else(|_| default_filter.to_owned());
    let filter = EnvFilter::try_new(&filter_text).map_err(|source| LoggingError::Filter {
        filter: filter_text.clone(),
        source,
    })?;
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Text => registry
            .with(fmt::layer().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    result.map_err(|e| LoggingError::AlreadyInitialised(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn klog_levels_map_onto_filters() {
        let cases: &[(Option<u8>, &str)] = &[
            (None, "info,kube_client::client::builder=off"),
            (Some(0), "info,kube_client::client::builder=off"),
            (Some(2), "info,kube_client::client::builder=off"),
            (Some(3), "info,kube_client::client::builder=off"),
            (Some(4), "info,koord=debug"),
            (Some(5), "info,koord=trace"),
            (Some(10), "info,koord=trace"),
        ];
        for (verbosity, want) in cases {
            assert_eq!(verbosity_filter(*verbosity), *want, "{verbosity:?}");
            assert!(EnvFilter::try_new(want).is_ok(), "{want} parses");
        }
    }

    /// Lines written through the default filter of `verbosity`.
    fn logged(verbosity: Option<u8>, emit: impl FnOnce()) -> String {
        let buffer = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::registry()
            .with(EnvFilter::try_new(verbosity_filter(verbosity)).unwrap())
            .with(
                fmt::layer()
                    .with_ansi(false)
                    .with_writer(move || Sink(writer.clone())),
            );
        tracing::subscriber::with_default(subscriber, emit);
        let bytes = buffer.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn kube_clients_own_request_failures_show_from_v4_only() {
        let emit = || {
            tracing::error!(target: "kube_client::client::builder", "failed with error connection refused");
            tracing::warn!(target: "koord_manager::run", "node watch failed; retrying");
            tracing::info!(target: "kube_runtime::controller", "controller started");
        };
        let default = logged(None, emit);
        assert!(!default.contains("connection refused"), "{default}");
        assert!(default.contains("node watch failed"), "{default}");
        assert!(default.contains("controller started"), "{default}");
        let debug = logged(Some(4), emit);
        assert!(debug.contains("connection refused"), "{debug}");
        assert!(debug.contains("node watch failed"), "{debug}");
    }
}
