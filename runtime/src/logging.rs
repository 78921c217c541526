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
pub fn verbosity_filter(verbosity: Option<u8>) -> &'static str {
    match verbosity.unwrap_or(0) {
        0..=3 => "info",
        4 => "info,koord=debug",
        _ => "info,koord=trace",
    }
}

/// `--help` text of every binary's `--v` flag.
pub const VERBOSITY_HELP: &str = "Log level in upstream's klog numbers: 0-3 info, 4 debug, 5+ trace (our crates; \
                                  dependencies stay at info). RUST_LOG, when set, wins";

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
            (None, "info"),
            (Some(0), "info"),
            (Some(2), "info"),
            (Some(3), "info"),
            (Some(4), "info,koord=debug"),
            (Some(5), "info,koord=trace"),
            (Some(10), "info,koord=trace"),
        ];
        for (verbosity, want) in cases {
            assert_eq!(verbosity_filter(*verbosity), *want, "{verbosity:?}");
            assert!(EnvFilter::try_new(want).is_ok(), "{want} parses");
        }
    }
}
