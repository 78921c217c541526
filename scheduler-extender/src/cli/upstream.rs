//! Upstream-style spellings and our earlier environment variable names.
//!
//! Upstream has no scheduler extender (koord-scheduler is a whole scheduler), so only the
//! conventions every upstream binary shares apply: one-dash long flags, `:PORT` addresses,
//! `--health-probe-addr`, klog's `--v` and its other flags (accepted and ignored). Before this
//! release the environment variables had no prefix; those names are read until the next one.

use std::ffi::OsString;

use koord_runtime::{CliCompat, EnvFallback, FallbackKind, KLOG_IGNORED, StartupNotes, UpstreamFlags};

use super::Cli;

const fn deprecated(old: &'static str, new: &'static str, arg: &'static str) -> EnvFallback {
    EnvFallback {
        old,
        new,
        arg,
        subcommand: None,
        kind: FallbackKind::Deprecated,
    }
}

/// The unprefixed names earlier releases read, until the next release.
pub const ENV_FALLBACKS: &[EnvFallback] = &[
    deprecated("EXTENDER_PORT", "KOORD_SCHEDULER_EXTENDER_PORT", "port"),
    deprecated(
        "EXTENDER_BIND_ADDRESS",
        "KOORD_SCHEDULER_EXTENDER_BIND_ADDRESS",
        "bind_address",
    ),
    deprecated(
        "EXTENDER_CERT_DIR",
        "KOORD_SCHEDULER_EXTENDER_CERT_DIR",
        "cert_dir",
    ),
    deprecated(
        "EXTENDER_CERT_SYNC_INTERVAL",
        "KOORD_SCHEDULER_EXTENDER_CERT_SYNC_INTERVAL",
        "cert_sync_interval",
    ),
    deprecated(
        "HEALTH_ADDR",
        "KOORD_SCHEDULER_EXTENDER_HEALTH_ADDR",
        "health_addr",
    ),
    deprecated(
        "METRICS_ADDR",
        "KOORD_SCHEDULER_EXTENDER_METRICS_ADDR",
        "metrics_addr",
    ),
    deprecated(
        "CONFIG_NAMESPACE",
        "KOORD_SCHEDULER_EXTENDER_CONFIG_NAMESPACE",
        "config_namespace",
    ),
    deprecated(
        "SLO_CONFIG_NAME",
        "KOORD_SCHEDULER_EXTENDER_SLO_CONFIG_NAME",
        "slo_config_name",
    ),
    deprecated(
        "CPU_USAGE_THRESHOLD_PERCENT",
        "KOORD_SCHEDULER_EXTENDER_CPU_USAGE_THRESHOLD_PERCENT",
        "cpu_usage_threshold_percent",
    ),
    deprecated(
        "MEMORY_USAGE_THRESHOLD_PERCENT",
        "KOORD_SCHEDULER_EXTENDER_MEMORY_USAGE_THRESHOLD_PERCENT",
        "memory_usage_threshold_percent",
    ),
    deprecated(
        "NODE_METRIC_EXPIRATION",
        "KOORD_SCHEDULER_EXTENDER_NODE_METRIC_EXPIRATION",
        "node_metric_expiration",
    ),
    deprecated("CPU_WEIGHT", "KOORD_SCHEDULER_EXTENDER_CPU_WEIGHT", "cpu_weight"),
    deprecated(
        "MEMORY_WEIGHT",
        "KOORD_SCHEDULER_EXTENDER_MEMORY_WEIGHT",
        "memory_weight",
    ),
    deprecated(
        "BATCH_HEADROOM_WEIGHT",
        "KOORD_SCHEDULER_EXTENDER_BATCH_HEADROOM_WEIGHT",
        "batch_headroom_weight",
    ),
    deprecated(
        "LOAD_WEIGHT",
        "KOORD_SCHEDULER_EXTENDER_LOAD_WEIGHT",
        "load_weight",
    ),
    deprecated(
        "CPU_ESTIMATE_PERCENT",
        "KOORD_SCHEDULER_EXTENDER_CPU_ESTIMATE_PERCENT",
        "cpu_estimate_percent",
    ),
    deprecated(
        "MEMORY_ESTIMATE_PERCENT",
        "KOORD_SCHEDULER_EXTENDER_MEMORY_ESTIMATE_PERCENT",
        "memory_estimate_percent",
    ),
    deprecated("LOG_FORMAT", "KOORD_SCHEDULER_EXTENDER_LOG_FORMAT", "log_format"),
];

/// koord-scheduler-extender's compatibility tables.
pub const COMPAT: CliCompat = CliCompat {
    upstream: UpstreamFlags {
        ignored: &[KLOG_IGNORED],
        translated: &[],
    },
    env_fallbacks: ENV_FALLBACKS,
};

/// Parses the extender's command line (program name first) as the binary does; `env` looks up
/// the old environment names ([`koord_runtime::process_env`] in the binary).
pub fn parse<I, A>(
    args: I,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<(Cli, StartupNotes), clap::Error>
where
    I: IntoIterator<Item = A>,
    A: Into<OsString>,
{
    koord_runtime::parse_cli(args, &COMPAT, env)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use clap::CommandFactory;

    use super::*;

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    #[test]
    fn upstream_conventions_parse() {
        let (cli, notes) = parse(
            [
                "koord-scheduler-extender",
                "-metrics-addr=:8080",
                "--health-probe-addr=:8000",
                "--logtostderr=true",
                "-v=5",
                "-port=9443",
            ],
            &no_env,
        )
        .unwrap();
        assert_eq!(cli.metrics_addr.to_string(), "0.0.0.0:8080");
        assert_eq!(cli.health_addr.to_string(), "0.0.0.0:8000");
        assert_eq!(cli.verbosity, Some(5));
        assert_eq!(cli.port, 9443);
        assert_eq!(notes.ignored_flags.len(), 1);
        assert_eq!(notes.ignored_flags[0].flag, "--logtostderr");
    }

    #[test]
    fn unknown_flags_are_still_errors() {
        for argv in [
            ["koord-scheduler-extender", "--no-such-flag"],
            ["koord-scheduler-extender", "--sync-period=0"],
        ] {
            let error = parse(argv, &no_env).unwrap_err();
            assert_eq!(error.kind(), clap::error::ErrorKind::UnknownArgument, "{argv:?}");
        }
    }

    #[test]
    fn old_environment_names_still_work() {
        let env: BTreeMap<&str, &str> = [
            ("EXTENDER_PORT", "10443"),
            ("LOAD_WEIGHT", "3"),
            ("METRICS_ADDR", ":9090"),
        ]
        .into_iter()
        .collect();
        let lookup = |name: &str| env.get(name).map(OsString::from);
        let (cli, notes) = parse(["koord-scheduler-extender"], &lookup).unwrap();
        assert_eq!(cli.port, 10443);
        assert_eq!(cli.load_weight, 3);
        assert_eq!(cli.metrics_addr.to_string(), "0.0.0.0:9090");
        assert_eq!(notes.env_fallbacks.len(), 3);
        let (cli, _) = parse(["koord-scheduler-extender", "--port=1"], &lookup).unwrap();
        assert_eq!(cli.port, 1, "the command line wins");
    }

    #[test]
    fn every_env_name_has_the_prefix_and_every_fallback_its_flag() {
        let command = Cli::command();
        assert_eq!(
            koord_runtime::missing_fallback_args(&command, ENV_FALLBACKS),
            Vec::<String>::new()
        );
        for arg in command.get_arguments() {
            let Some(env) = arg.get_env().and_then(|e| e.to_str()) else {
                continue;
            };
            assert!(
                env.starts_with("KOORD_SCHEDULER_EXTENDER_") || env == "KUBECONFIG",
                "{env}"
            );
        }
        for entry in ENV_FALLBACKS {
            let arg = command.get_arguments().find(|a| a.get_id() == entry.arg).unwrap();
            assert_eq!(
                arg.get_env().and_then(|e| e.to_str()),
                Some(entry.new),
                "{}",
                entry.old
            );
        }
    }
}
