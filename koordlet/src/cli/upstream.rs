//! Upstream koordlet's command line.
//!
//! Upstream's DaemonSet runs `-cgroup-root-dir=/host-cgroup/ -feature-gates=...
//! -runtime-hooks-host-endpoint=... --logtostderr=true --v=4`, and its `-addr` (default `:9316`)
//! serves metrics and health. Renamed flags with the same meaning are clap aliases in
//! [`super::AgentArgs`] (`--cgroup-root-dir`, `--proc-root-dir`, `--sys-root-dir`,
//! `--var-lib-kubelet-dir`, `--collect-res-used-interval`); `--feature-gates` and
//! `--cgroup-driver` are the same flags. This table rewrites what an alias cannot say and lists
//! what we accept and ignore.
//!
//! Checked for same name, other meaning: upstream's `--sys-fs-root-dir` is the parent of the
//! resctrl mount, not the mount, so it is rewritten to `--resctrl-root=DIR/resctrl` rather than
//! aliased; `--addr` is both of our listen addresses. The environment already had one prefix
//! (`KOORDLET_`), so there are no old names to keep.

use std::ffi::OsString;

use koord_runtime::{
    CliCompat, EnvFallback, FlagValue, IgnoredFlag, KLOG_IGNORED, StartupNotes, TranslatedFlag, UpstreamFlags,
};

use super::Args;

/// Upstream koordlet flags we accept and ignore (klog's too: [`KLOG_IGNORED`]).
pub const IGNORED: &[IgnoredFlag] = &[
    ignored("enable-pprof", FlagValue::Bool, "no pprof endpoint"),
    ignored("pprof-addr", FlagValue::Value, "no pprof endpoint"),
    ignored(
        "kube-api-qps",
        FlagValue::Value,
        "the client is not rate limited on our side",
    ),
    ignored(
        "kube-api-burst",
        FlagValue::Value,
        "the client is not rate limited on our side",
    ),
    ignored(
        "runtime-hooks-host-endpoint",
        FlagValue::Value,
        "runtime hooks run over NRI (--nri-socket), not through a proxy socket",
    ),
    ignored(
        "reconcile-interval-seconds",
        FlagValue::Value,
        "the QoS round (BE limits, CPU burst, resctrl, memory QoS) runs every --collect-interval",
    ),
    ignored(
        "cpu-suppress-interval-seconds",
        FlagValue::Value,
        "CPU suppress runs in its own fast loop, --suppress-interval (default 50ms)",
    ),
    ignored(
        "cpu-evict-interval-seconds",
        FlagValue::Value,
        "evictions are decided in the QoS round",
    ),
    ignored(
        "cpu-evict-cool-time-seconds",
        FlagValue::Value,
        "not configurable by flag",
    ),
    ignored(
        "memory-evict-interval-seconds",
        FlagValue::Value,
        "evictions are decided in the QoS round",
    ),
    ignored(
        "memory-evict-cool-time-seconds",
        FlagValue::Value,
        "not configurable by flag",
    ),
    ignored(
        "only-evict-by-api",
        FlagValue::Bool,
        "evictions always go through the Eviction API; --eviction-fallback says what follows a refusal",
    ),
    ignored(
        "kubelet-preferred-address-type",
        FlagValue::Value,
        "--kubelet-url gives the kubelet's address",
    ),
    ignored(
        "kubelet-insecure-tls",
        FlagValue::Bool,
        "use an http:// --kubelet-url for the read-only port",
    ),
    ignored(
        "kubelet-read-only-port",
        FlagValue::Value,
        "use an http:// --kubelet-url for the read-only port",
    ),
    ignored(
        "kubelet-sync-interval",
        FlagValue::Value,
        "pods are read every --collect-interval",
    ),
    ignored(
        "kubelet-sync-timeout",
        FlagValue::Value,
        "not configurable by flag",
    ),
    ignored(
        "var-run-root-dir",
        FlagValue::Value,
        "no container runtime socket is used",
    ),
    ignored(
        "run-root-dir",
        FlagValue::Value,
        "no container runtime socket is used",
    ),
    ignored(
        "containerd-endpoint",
        FlagValue::Value,
        "no container runtime socket is used",
    ),
    ignored(
        "docker-endpoint",
        FlagValue::Value,
        "no container runtime socket is used",
    ),
    ignored(
        "pouch-endpoint",
        FlagValue::Value,
        "no container runtime socket is used",
    ),
    ignored(
        "default-runtime-type",
        FlagValue::Value,
        "no container runtime socket is used",
    ),
];

const fn ignored(name: &'static str, value: FlagValue, why: &'static str) -> IgnoredFlag {
    IgnoredFlag { name, value, why }
}

fn addr_to_both(value: &str) -> Vec<String> {
    vec![
        format!("--metrics-addr={value}"),
        format!("--health-addr={value}"),
    ]
}

fn sys_fs_to_resctrl(value: &str) -> Vec<String> {
    let parent = value.trim_end_matches('/');
    vec![format!("--resctrl-root={parent}/resctrl")]
}

/// Upstream flags rewritten into ours.
pub const TRANSLATED: &[TranslatedFlag] = &[
    TranslatedFlag {
        name: "addr",
        rewrite: addr_to_both,
        becomes: "--metrics-addr and --health-addr",
    },
    TranslatedFlag {
        name: "sys-fs-root-dir",
        rewrite: sys_fs_to_resctrl,
        becomes: "--resctrl-root=DIR/resctrl",
    },
];

/// No old names: the variables have always been `KOORDLET_*`.
pub const ENV_FALLBACKS: &[EnvFallback] = &[];

/// koordlet's compatibility tables.
pub const COMPAT: CliCompat = CliCompat {
    upstream: UpstreamFlags {
        ignored: &[IGNORED, KLOG_IGNORED],
        translated: TRANSLATED,
    },
    env_fallbacks: ENV_FALLBACKS,
};

/// Parses koordlet's command line (program name first) as the binary does; `env` looks up old
/// environment names ([`koord_runtime::process_env`] in the binary).
pub fn parse<I, A>(
    args: I,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<(Args, StartupNotes), clap::Error>
where
    I: IntoIterator<Item = A>,
    A: Into<OsString>,
{
    koord_runtime::parse_cli(args, &COMPAT, env)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::CommandFactory;

    use super::*;

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    #[test]
    fn upstream_daemonset_args_parse_into_our_settings() {
        let (args, notes) = parse(
            [
                "koordlet",
                "-addr=:9316",
                "-cgroup-root-dir=/host-cgroup/",
                "-feature-gates=BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true,Accelerators=true",
                "-runtime-hooks-host-endpoint=/var/run/koordlet/koordlet.sock",
                "--logtostderr=true",
                "--v=4",
                "--proc-root-dir=/proc/",
                "--sys-root-dir=/host-sys/",
                "--sys-fs-root-dir=/host-sys-fs/",
                "--var-lib-kubelet-dir=/var/lib/kubelet/",
                "--reconcile-interval-seconds=1",
                "--collect-res-used-interval=2s",
                "--cgroup-driver=systemd",
                "--kubelet-preferred-address-type=InternalIP",
            ],
            &no_env,
        )
        .unwrap();
        assert!(args.command.is_none());
        let agent = args.agent;
        assert_eq!(agent.metrics_addr.to_string(), "0.0.0.0:9316");
        assert_eq!(agent.health_addr.to_string(), "0.0.0.0:9316");
        assert_eq!(agent.cgroup_root, Path::new("/host-cgroup/"));
        assert_eq!(agent.proc_root, Path::new("/proc/"));
        assert_eq!(agent.sys_root, Path::new("/host-sys/"));
        assert_eq!(agent.resctrl_root, Path::new("/host-sys-fs/resctrl"));
        assert_eq!(agent.kubelet_root_dir, Path::new("/var/lib/kubelet/"));
        assert_eq!(agent.collect_interval, std::time::Duration::from_secs(2));
        assert_eq!(agent.cgroup_driver, super::super::DriverArg::Systemd);
        assert_eq!(agent.verbosity, Some(4));
        assert!(agent.feature_gates.contains("BEMemoryEvict=true"));
        let ignored: Vec<&str> = notes.ignored_flags.iter().map(|i| i.flag.as_str()).collect();
        assert_eq!(
            ignored,
            [
                "--runtime-hooks-host-endpoint",
                "--logtostderr",
                "--reconcile-interval-seconds",
                "--kubelet-preferred-address-type"
            ]
        );
    }

    #[test]
    fn bool_flags_take_go_forms() {
        let cases: &[(&[&str], bool, bool)] = &[
            (&[], false, true),
            (&["--dry-run"], true, true),
            (
                &["-dry-run=false", "--enable-nri-runtime-hook=false"],
                false,
                false,
            ),
            (&["--dry-run", "--enable-nri-runtime-hook"], true, true),
            (&["--dry-run=1", "--enable-nri-runtime-hook", "f"], true, false),
        ];
        for (flags, dry_run, nri) in cases {
            let argv = std::iter::once("koordlet").chain(flags.iter().copied());
            let (args, _) = parse(argv, &no_env).unwrap();
            assert_eq!(
                (args.agent.dry_run, args.agent.enable_nri_runtime_hook),
                (*dry_run, *nri),
                "{flags:?}"
            );
        }
    }

    #[test]
    fn prediction_flags_take_upstream_names_and_defaults() {
        use std::time::Duration;
        let (args, _) = parse(["koordlet"], &no_env).unwrap();
        let a = args.agent;
        assert_eq!(a.prediction_cold_start_duration, Duration::from_secs(24 * 3600));
        assert_eq!(a.prediction_safety_margin_percent, 10);
        assert_eq!(
            a.prediction_cpu_histogram_decay_halflife,
            Duration::from_secs(12 * 3600)
        );
        assert_eq!(
            a.prediction_memory_histogram_decay_halflife,
            Duration::from_secs(24 * 3600)
        );
        assert_eq!(a.prediction_training_interval, Duration::from_secs(60));
        assert_eq!(a.prediction_model_expiration_duration, Duration::from_secs(1800));
        assert_eq!(
            a.prediction_checkpoint_filepath,
            Path::new("/prediction-checkpoints")
        );
        assert_eq!(a.prediction_model_checkpoint_interval, Duration::from_secs(600));
        let (args, _) = parse(
            [
                "koordlet",
                "-prediction-cold-start-duration=0s",
                "--prediction-safety-margin-percent=25",
                "--prediction-cpu-histogram-decay-halflife=1h",
                "--prediction-memory-histogram-decay-halflife",
                "2h30m",
                "--prediction-training-interval=1s",
                "--prediction-model-expiration-duration=5m",
                "--prediction-checkpoint-filepath=/var/lib/koordlet/prediction",
                "--prediction-model-checkpoint-interval=30s",
            ],
            &no_env,
        )
        .unwrap();
        let a = args.agent;
        assert_eq!(a.prediction_cold_start_duration, Duration::ZERO);
        assert_eq!(a.prediction_safety_margin_percent, 25);
        assert_eq!(
            a.prediction_cpu_histogram_decay_halflife,
            Duration::from_secs(3600)
        );
        assert_eq!(
            a.prediction_memory_histogram_decay_halflife,
            Duration::from_secs(9000)
        );
        assert_eq!(a.prediction_training_interval, Duration::from_secs(1));
        assert_eq!(a.prediction_model_expiration_duration, Duration::from_secs(300));
        assert_eq!(
            a.prediction_checkpoint_filepath,
            Path::new("/var/lib/koordlet/prediction")
        );
        assert_eq!(a.prediction_model_checkpoint_interval, Duration::from_secs(30));
        for bad in [
            "--prediction-cpu-histogram-decay-halflife=0s",
            "--prediction-training-interval=10ms",
            "--prediction-safety-margin-percent=-1",
            "--prediction-cold-start-duration=soon",
        ] {
            assert!(parse(["koordlet", bad], &no_env).is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_flags_are_still_errors() {
        for argv in [
            ["koordlet", "--no-such-flag"],
            ["koordlet", "-cgroup-root-directory=/x"],
        ] {
            let error = parse(argv, &no_env).unwrap_err();
            assert_eq!(error.kind(), clap::error::ErrorKind::UnknownArgument, "{argv:?}");
        }
    }

    #[test]
    fn plan_keeps_its_short_flags() {
        let (args, _) = parse(["koordlet", "plan", "-f", "-", "-cgroup-version=v2"], &no_env).unwrap();
        let Some(super::super::Command::Plan(plan)) = args.command else {
            panic!("plan")
        };
        assert_eq!(plan.file, "-");
        assert_eq!(plan.cgroup_version, super::super::VersionArg::V2);
    }

    #[test]
    fn every_env_name_has_the_prefix() {
        for arg in Args::command().get_arguments() {
            let Some(env) = arg.get_env().and_then(|e| e.to_str()) else {
                continue;
            };
            assert!(
                env.starts_with("KOORDLET_") || ["KUBECONFIG", "NODE_NAME"].contains(&env),
                "{env}"
            );
        }
    }

    #[test]
    fn help_documents_aliases_and_ignored_flags() {
        let help = parse(["koordlet", "--help"], &no_env).unwrap_err().to_string();
        for needle in [
            "--cgroup-root-dir",
            "--collect-res-used-interval",
            "--addr → --metrics-addr and --health-addr",
            "--sys-fs-root-dir",
            "--runtime-hooks-host-endpoint",
            "--v <N>",
        ] {
            assert!(help.contains(needle), "{needle} in:\n{help}");
        }
    }
}
