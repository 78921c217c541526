//! Upstream koord-manager's command line and our earlier environment variable names.
//!
//! Upstream's chart runs `--enable-leader-election --metrics-addr=:8080 --health-probe-addr=:8000
//! --logtostderr=true --leader-election-namespace=koordinator-system --v=4 --feature-gates=...
//! --sync-period=0 --config-namespace=koordinator-system`. The renamed flags are clap aliases in
//! [`super::RunArgs`]; this table lists what we accept and ignore.
//!
//! Checked for same name, other meaning: `--metrics-addr`, `--config-namespace`,
//! `--slo-config-name` mean what upstream means. `--controllers` takes our three names only;
//! upstream's `*`, `-name` and its other controllers (colocationprofile, quotaprofile) are an
//! error, not silently misread.

use std::ffi::OsString;

use koord_runtime::{
    CliCompat, EnvFallback, FallbackKind, FlagValue, IgnoredFlag, KLOG_IGNORED, StartupNotes, UpstreamFlags,
};

use super::Cli;

/// Upstream koord-manager flags we accept and ignore (klog's too: [`KLOG_IGNORED`]).
pub const IGNORED: &[IgnoredFlag] = &[
    ignored(
        "sync-period",
        FlagValue::Value,
        "the controllers re-check nodes every --resync-seconds",
    ),
    ignored("enable-pprof", FlagValue::Bool, "no pprof endpoint"),
    ignored("pprof-addr", FlagValue::Value, "no pprof endpoint"),
    ignored(
        "rest-config-qps",
        FlagValue::Value,
        "the client is not rate limited on our side",
    ),
    ignored(
        "rest-config-burst",
        FlagValue::Value,
        "the client is not rate limited on our side",
    ),
    ignored(
        "leader-elect-resource-lock",
        FlagValue::Value,
        "the leader lock is always a Lease",
    ),
    ignored(
        "namespace",
        FlagValue::Value,
        "the controllers watch every namespace",
    ),
    ignored(
        "feature-gates",
        FlagValue::Value,
        "upstream's manager gates switch webhooks, which koord-webhook's flags control",
    ),
    ignored(
        "noderesource-plugins",
        FlagValue::Value,
        "batch resources have no plugins",
    ),
    ignored(
        "node-strategy-name-need-check",
        FlagValue::Bool,
        "ConfigMap validation is koord-webhook's",
    ),
    ignored(
        "colocation-profile-*",
        FlagValue::Value,
        "ClusterColocationProfiles are applied by koord-webhook at pod admission",
    ),
];

const fn ignored(name: &'static str, value: FlagValue, why: &'static str) -> IgnoredFlag {
    IgnoredFlag { name, value, why }
}

const fn deprecated(old: &'static str, new: &'static str, arg: &'static str) -> EnvFallback {
    EnvFallback {
        old,
        new,
        arg,
        subcommand: None,
        kind: FallbackKind::Deprecated,
    }
}

/// The `KOORD_*` names earlier releases read, until the next release.
pub const ENV_FALLBACKS: &[EnvFallback] = &[
    deprecated(
        "KOORD_CONFIG_NAMESPACE",
        "KOORD_MANAGER_CONFIG_NAMESPACE",
        "config_namespace",
    ),
    deprecated(
        "KOORD_SLO_CONFIG_NAME",
        "KOORD_MANAGER_SLO_CONFIG_NAME",
        "slo_config_name",
    ),
    deprecated("KOORD_CONTROLLERS", "KOORD_MANAGER_CONTROLLERS", "controllers"),
    deprecated("KOORD_LEADER_ELECT", "KOORD_MANAGER_LEADER_ELECT", "leader_elect"),
    deprecated(
        "KOORD_LEASE_DURATION_SECONDS",
        "KOORD_MANAGER_LEASE_DURATION_SECONDS",
        "lease_duration",
    ),
    deprecated("KOORD_METRICS_ADDR", "KOORD_MANAGER_METRICS_ADDR", "metrics_addr"),
    deprecated("KOORD_HEALTH_ADDR", "KOORD_MANAGER_HEALTH_ADDR", "health_addr"),
    deprecated("KOORD_LOG_FORMAT", "KOORD_MANAGER_LOG_FORMAT", "log_format"),
    deprecated("KOORD_RESYNC_SECONDS", "KOORD_MANAGER_RESYNC_SECONDS", "resync"),
];

/// koord-manager's compatibility tables.
pub const COMPAT: CliCompat = CliCompat {
    upstream: UpstreamFlags {
        ignored: &[IGNORED, KLOG_IGNORED],
        translated: &[],
    },
    env_fallbacks: ENV_FALLBACKS,
};

/// Parses the manager's command line (program name first) as the binary does; `env` looks up
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
    use std::net::SocketAddr;

    use clap::CommandFactory;

    use super::*;

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    fn flags(notes: &StartupNotes) -> Vec<&str> {
        notes.ignored_flags.iter().map(|i| i.flag.as_str()).collect()
    }

    #[test]
    fn upstream_chart_args_parse_into_our_settings() {
        let argv = [
            "koord-manager",
            "--enable-leader-election",
            "--metrics-addr=:8080",
            "--health-probe-addr=:8000",
            "--logtostderr=true",
            "--leader-election-namespace=koordinator-system",
            "--v=4",
            "--feature-gates=PodMutatingWebhook=true,ConfigMapValidatingWebhook=false",
            "--sync-period=0",
            "--config-namespace=koordinator-system",
        ];
        let (cli, notes) = parse(argv, &no_env).unwrap();
        let run = cli.run;
        assert!(run.leader_elect);
        assert_eq!(run.metrics_addr, "0.0.0.0:8080".parse::<SocketAddr>().unwrap());
        assert_eq!(run.health_addr, "0.0.0.0:8000".parse::<SocketAddr>().unwrap());
        assert_eq!(
            run.leader_election_namespace.as_deref(),
            Some("koordinator-system")
        );
        assert_eq!(run.config_namespace, "koordinator-system");
        assert_eq!(run.verbosity, Some(4));
        assert_eq!(
            flags(&notes),
            ["--logtostderr", "--feature-gates", "--sync-period"]
        );
    }

    #[test]
    fn go_spellings_of_bools_and_single_dash_flags() {
        let cases: &[(&[&str], bool)] = &[
            (&["-enable-leader-election=false"], false),
            (&["--enable-leader-election", "--v=2"], true),
            (&["--leader-elect", "false"], false),
            (&["--leader-elect=0"], false),
            (&[], true),
        ];
        for (args, want) in cases {
            let argv = std::iter::once("koord-manager").chain(args.iter().copied());
            let (cli, _) = parse(argv, &no_env).unwrap();
            assert_eq!(cli.run.leader_elect, *want, "{args:?}");
        }
        let (cli, notes) = parse(
            [
                "koord-manager",
                "-metrics-addr=:9",
                "-v",
                "5",
                "-pprof-addr",
                ":8090",
                "-enable-pprof",
            ],
            &no_env,
        )
        .unwrap();
        assert_eq!(cli.run.metrics_addr.port(), 9);
        assert_eq!(cli.run.verbosity, Some(5));
        assert_eq!(flags(&notes), ["--pprof-addr", "--enable-pprof"]);
        // As in Go, a flag given twice (chart args, then extraArgs) takes its last value.
        let (cli, _) = parse(
            [
                "koord-manager",
                "--leader-elect=true",
                "--enable-leader-election=false",
                "--v=2",
                "-v=3",
            ],
            &no_env,
        )
        .unwrap();
        assert!(!cli.run.leader_elect);
        assert_eq!(cli.run.verbosity, Some(3));
    }

    #[test]
    fn unknown_flags_and_upstream_controller_syntax_are_still_errors() {
        for args in [
            ["koord-manager", "--no-such-flag"],
            ["koord-manager", "-no-such-flag=1"],
            ["koord-manager", "--controllers=*"],
            ["koord-manager", "--controllers=nodeslo,-nodemetric"],
        ] {
            let error = parse(args, &no_env).unwrap_err();
            assert!(
                matches!(
                    error.kind(),
                    clap::error::ErrorKind::UnknownArgument | clap::error::ErrorKind::InvalidValue
                ),
                "{args:?}: {error}"
            );
        }
    }

    #[test]
    fn old_environment_names_still_work_and_are_reported() {
        let env: BTreeMap<&str, &str> = [
            ("KOORD_CONFIG_NAMESPACE", "kube-system"),
            ("KOORD_LEADER_ELECT", "false"),
            ("KOORD_CONTROLLERS", "nodeslo,nodemetric"),
            ("KOORD_RESYNC_SECONDS", "2m"),
        ]
        .into_iter()
        .collect();
        let lookup = |name: &str| env.get(name).map(OsString::from);
        let (cli, notes) = parse(["koord-manager"], &lookup).unwrap();
        assert_eq!(cli.run.config_namespace, "kube-system");
        assert!(!cli.run.leader_elect);
        assert_eq!(cli.run.controllers.len(), 2);
        assert_eq!(cli.run.resync, std::time::Duration::from_secs(120));
        let old: Vec<&str> = notes.env_fallbacks.iter().map(|u| u.old).collect();
        assert_eq!(
            old,
            [
                "KOORD_CONFIG_NAMESPACE",
                "KOORD_CONTROLLERS",
                "KOORD_LEADER_ELECT",
                "KOORD_RESYNC_SECONDS"
            ]
        );
        // The command line still wins over an old name.
        let (cli, _) = parse(["koord-manager", "--config-namespace=ns"], &lookup).unwrap();
        assert_eq!(cli.run.config_namespace, "ns");
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
                env.starts_with("KOORD_MANAGER_") || ["KUBECONFIG", "POD_NAME"].contains(&env),
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

    #[test]
    fn help_documents_aliases_and_ignored_flags() {
        let error = parse(["koord-manager", "--help"], &no_env).unwrap_err();
        let help = error.to_string();
        for needle in [
            "--enable-leader-election",
            "--health-probe-addr",
            "--v <N>",
            "--logtostderr",
            "--sync-period",
            "--rest-config-qps",
        ] {
            assert!(help.contains(needle), "{needle} in:\n{help}");
        }
    }
}
