//! Upstream's command line and environment for the webhook, and our earlier environment names.
//!
//! Upstream serves its webhooks from koord-manager, so only a few of its flags concern us:
//! `--metrics-addr` and `--health-probe-addr` (clap aliases in [`super::ServerArgs`]), klog's
//! `--v`, and a small set accepted and ignored below. Upstream's webhook environment variables
//! (`WEBHOOK_PORT`, `WEBHOOK_HOST`, `WEBHOOK_CERT_DIR`, `SECRET_NAME`, `SERVICE_NAME`, `MUTATING_WEBHOOK_NAME`,
//! `VALIDATING_WEBHOOK_NAME`) stay readable for good; our own earlier unprefixed names are
//! deprecated.
//!
//! Same name, other meaning: our `--namespace` is the webhook's own namespace (Secret, Service;
//! `POD_NAMESPACE`), upstream koord-manager's `--namespace` scopes its cache. Upstream's chart does
//! not pass it; a manifest that does gets our meaning, documented in the README.

use std::ffi::OsString;

use koord_runtime::{
    CliCompat, EnvFallback, FallbackKind, FlagValue, IgnoredFlag, KLOG_IGNORED, StartupNotes, UpstreamFlags,
};

use super::Cli;

/// Upstream koord-manager flags the webhook accepts and ignores (klog's too: [`KLOG_IGNORED`]).
pub const IGNORED: &[IgnoredFlag] = &[
    ignored(
        "enable-leader-election",
        FlagValue::Bool,
        "every koord-webhook replica serves",
    ),
    ignored(
        "leader-election-namespace",
        FlagValue::Value,
        "every koord-webhook replica serves",
    ),
    ignored(
        "sync-period",
        FlagValue::Value,
        "the webhook keeps no resynced cache",
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
        "feature-gates",
        FlagValue::Value,
        "upstream's gates ColocationProfileSkipMutatingResources, DisableExtendedResourceSpec and \
         ColocationProfileSkipValidatingPriority are --skip-mutating-resources, \
         --disable-extended-resource-spec and --allow-priority-label-update; every webhook is on",
    ),
];

const fn ignored(name: &'static str, value: FlagValue, why: &'static str) -> IgnoredFlag {
    IgnoredFlag { name, value, why }
}

const fn fallback(
    old: &'static str,
    new: &'static str,
    arg: &'static str,
    kind: FallbackKind,
) -> EnvFallback {
    EnvFallback {
        old,
        new,
        arg,
        subcommand: None,
        kind,
    }
}

const fn upstream(old: &'static str, new: &'static str, arg: &'static str) -> EnvFallback {
    fallback(old, new, arg, FallbackKind::Upstream)
}

const fn deprecated(old: &'static str, new: &'static str, arg: &'static str) -> EnvFallback {
    fallback(old, new, arg, FallbackKind::Deprecated)
}

/// Upstream's names (kept) and our earlier unprefixed names (until the next release).
pub const ENV_FALLBACKS: &[EnvFallback] = &[
    upstream("WEBHOOK_PORT", "KOORD_WEBHOOK_PORT", "port"),
    upstream("WEBHOOK_HOST", "KOORD_WEBHOOK_HOST", "webhook_host"),
    upstream("SECRET_NAME", "KOORD_WEBHOOK_SECRET_NAME", "secret_name"),
    upstream("SERVICE_NAME", "KOORD_WEBHOOK_SERVICE_NAME", "service_name"),
    upstream(
        "MUTATING_WEBHOOK_NAME",
        "KOORD_WEBHOOK_MUTATING_WEBHOOK_NAME",
        "mutating_webhook_name",
    ),
    upstream(
        "VALIDATING_WEBHOOK_NAME",
        "KOORD_WEBHOOK_VALIDATING_WEBHOOK_NAME",
        "validating_webhook_name",
    ),
    deprecated(
        "WEBHOOK_BIND_ADDRESS",
        "KOORD_WEBHOOK_BIND_ADDRESS",
        "bind_address",
    ),
    deprecated("HEALTH_ADDR", "KOORD_WEBHOOK_HEALTH_ADDR", "health_addr"),
    deprecated("METRICS_ADDR", "KOORD_WEBHOOK_METRICS_ADDR", "metrics_addr"),
    deprecated("WEBHOOK_CERT_MODE", "KOORD_WEBHOOK_CERT_MODE", "cert_mode"),
    upstream("WEBHOOK_CERT_DIR", "KOORD_WEBHOOK_CERT_DIR", "cert_dir"),
    deprecated(
        "WEBHOOK_CERT_SYNC_INTERVAL",
        "KOORD_WEBHOOK_CERT_SYNC_INTERVAL",
        "cert_sync_interval",
    ),
    deprecated(
        "CONFIG_NAMESPACE",
        "KOORD_WEBHOOK_CONFIG_NAMESPACE",
        "config_namespace",
    ),
    EnvFallback {
        subcommand: Some("validate"),
        ..deprecated(
            "CONFIG_NAMESPACE",
            "KOORD_WEBHOOK_CONFIG_NAMESPACE",
            "config_namespace",
        )
    },
    deprecated(
        "SLO_CONFIG_NAME",
        "KOORD_WEBHOOK_SLO_CONFIG_NAME",
        "slo_config_name",
    ),
    EnvFallback {
        subcommand: Some("validate"),
        ..deprecated(
            "SLO_CONFIG_NAME",
            "KOORD_WEBHOOK_SLO_CONFIG_NAME",
            "slo_config_name",
        )
    },
    deprecated(
        "SKIP_MUTATING_RESOURCES",
        "KOORD_WEBHOOK_SKIP_MUTATING_RESOURCES",
        "skip_mutating_resources",
    ),
    deprecated(
        "DISABLE_EXTENDED_RESOURCE_SPEC",
        "KOORD_WEBHOOK_DISABLE_EXTENDED_RESOURCE_SPEC",
        "disable_extended_resource_spec",
    ),
    deprecated(
        "ALLOW_PRIORITY_LABEL_UPDATE",
        "KOORD_WEBHOOK_ALLOW_PRIORITY_LABEL_UPDATE",
        "allow_priority_label_update",
    ),
    deprecated("LOG_FORMAT", "KOORD_WEBHOOK_LOG_FORMAT", "log_format"),
    deprecated("WEBHOOK_KUBECONFIG", "KUBECONFIG", "kubeconfig"),
];

/// koord-webhook's compatibility tables.
pub const COMPAT: CliCompat = CliCompat {
    upstream: UpstreamFlags {
        ignored: &[IGNORED, KLOG_IGNORED],
        translated: &[],
    },
    env_fallbacks: ENV_FALLBACKS,
};

/// Parses the webhook's command line (program name first) as the binary does; `env` looks up
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

    use super::super::Command;
    use super::*;

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    #[test]
    fn upstream_style_args_parse_into_our_settings() {
        let (cli, notes) = parse(
            [
                "koord-webhook",
                "--metrics-addr=:8080",
                "--health-probe-addr=:8000",
                "--logtostderr=true",
                "--v=4",
                "--enable-leader-election",
                "-skip-mutating-resources",
                "--disable-extended-resource-spec=false",
                "--feature-gates=PodMutatingWebhook=true",
            ],
            &no_env,
        )
        .unwrap();
        let server = cli.server;
        assert_eq!(server.metrics_addr.to_string(), "0.0.0.0:8080");
        assert_eq!(server.health_addr.to_string(), "0.0.0.0:8000");
        assert_eq!(server.verbosity, Some(4));
        assert!(server.skip_mutating_resources);
        assert!(!server.disable_extended_resource_spec);
        let ignored: Vec<&str> = notes.ignored_flags.iter().map(|i| i.flag.as_str()).collect();
        assert_eq!(
            ignored,
            ["--logtostderr", "--enable-leader-election", "--feature-gates"]
        );
    }

    #[test]
    fn unknown_flags_are_still_errors() {
        for args in [
            ["koord-webhook", "--no-such-flag"],
            ["koord-webhook", "-metrics-address=:1"],
        ] {
            let error = parse(args, &no_env).unwrap_err();
            assert_eq!(error.kind(), clap::error::ErrorKind::UnknownArgument, "{args:?}");
        }
    }

    #[test]
    fn upstream_and_old_environment_names_still_work() {
        let env: BTreeMap<&str, &str> = [
            ("WEBHOOK_PORT", "9443"),
            ("SECRET_NAME", "certs"),
            ("HEALTH_ADDR", ":9000"),
            ("SKIP_MUTATING_RESOURCES", "true"),
            ("WEBHOOK_KUBECONFIG", "/etc/kubeconfig"),
            ("CONFIG_NAMESPACE", "kube-system"),
        ]
        .into_iter()
        .collect();
        let lookup = |name: &str| env.get(name).map(OsString::from);
        let (cli, notes) = parse(["koord-webhook"], &lookup).unwrap();
        let server = cli.server;
        assert_eq!(server.port, 9443);
        assert_eq!(server.secret_name, "certs");
        assert_eq!(server.health_addr.to_string(), "0.0.0.0:9000");
        assert!(server.skip_mutating_resources);
        assert_eq!(
            server.kubeconfig.as_deref(),
            Some(std::path::Path::new("/etc/kubeconfig"))
        );
        assert_eq!(server.config_namespace, "kube-system");
        let kinds: Vec<(&str, FallbackKind)> = notes.env_fallbacks.iter().map(|u| (u.old, u.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("WEBHOOK_PORT", FallbackKind::Upstream),
                ("SECRET_NAME", FallbackKind::Upstream),
                ("HEALTH_ADDR", FallbackKind::Deprecated),
                ("CONFIG_NAMESPACE", FallbackKind::Deprecated),
                ("SKIP_MUTATING_RESOURCES", FallbackKind::Deprecated),
                ("WEBHOOK_KUBECONFIG", FallbackKind::Deprecated),
            ]
        );
        let (cli, _) = parse(["koord-webhook", "validate", "-f", "-"], &lookup).unwrap();
        let Some(Command::Validate(validate)) = cli.command else {
            panic!("validate")
        };
        assert_eq!(validate.config_namespace, "kube-system");
    }

    #[test]
    fn every_env_name_has_the_prefix_and_every_fallback_its_flag() {
        let command = Cli::command();
        assert_eq!(
            koord_runtime::missing_fallback_args(&command, ENV_FALLBACKS),
            Vec::<String>::new()
        );
        let scopes = std::iter::once(&command).chain(command.get_subcommands());
        for arg in scopes.flat_map(|c| c.get_arguments()) {
            let Some(env) = arg.get_env().and_then(|e| e.to_str()) else {
                continue;
            };
            assert!(
                env.starts_with("KOORD_WEBHOOK_") || ["KUBECONFIG", "POD_NAMESPACE"].contains(&env),
                "{env}"
            );
        }
    }

    #[test]
    fn help_documents_aliases_and_ignored_flags() {
        let help = parse(["koord-webhook", "--help"], &no_env)
            .unwrap_err()
            .to_string();
        for needle in [
            "--health-probe-addr",
            "--v <N>",
            "--logtostderr",
            "--enable-leader-election",
        ] {
            assert!(help.contains(needle), "{needle} in:\n{help}");
        }
    }
}
