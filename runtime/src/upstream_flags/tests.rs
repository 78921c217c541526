use super::*;

fn rewrite_addr(value: &str) -> Vec<String> {
    vec![
        format!("--metrics-addr={value}"),
        format!("--health-addr={value}"),
    ]
}

const TABLE: UpstreamFlags = UpstreamFlags {
    ignored: &[&[
        IgnoredFlag {
            name: "logtostderr",
            value: FlagValue::Bool,
            why: "stderr",
        },
        IgnoredFlag {
            name: "sync-period",
            value: FlagValue::Value,
            why: "resync",
        },
        IgnoredFlag {
            name: "colocation-profile-*",
            value: FlagValue::Value,
            why: "webhook",
        },
    ]],
    translated: &[TranslatedFlag {
        name: "addr",
        rewrite: rewrite_addr,
        becomes: "--metrics-addr and --health-addr",
    }],
};

fn known() -> BTreeSet<String> {
    [
        "metrics-addr",
        "health-addr",
        "cgroup-root",
        "cgroup-root-dir",
        "v",
        "file",
        "dry-run",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect()
}

fn normalise(args: &[&str]) -> Normalised {
    normalise_args(
        std::iter::once("bin")
            .chain(args.iter().copied())
            .map(OsString::from),
        &known(),
        &TABLE,
    )
}

fn args_of(n: &Normalised) -> Vec<&str> {
    n.args.iter().skip(1).map(|a| a.to_str().unwrap()).collect()
}

fn ignored_of(n: &Normalised) -> Vec<&str> {
    n.ignored.iter().map(|i| i.flag.as_str()).collect()
}

#[test]
fn rewrites_upstream_spellings_into_ours() {
    // (argv after the program name, argv clap sees, ignored flags reported)
    let cases: &[(&[&str], &[&str], &[&str])] = &[
        // single-dash long flags become double-dash, with or without `=`
        (
            &["-cgroup-root-dir=/host-cgroup/"],
            &["--cgroup-root-dir=/host-cgroup/"],
            &[],
        ),
        (&["-cgroup-root", "/x"], &["--cgroup-root", "/x"], &[]),
        // klog's -v is a long flag of ours
        (&["-v=4"], &["--v=4"], &[]),
        (&["-v", "4"], &["--v", "4"], &[]),
        (&["--v=4"], &["--v=4"], &[]),
        // double-dash and unknown flags pass through for clap to judge
        (&["--metrics-addr=:8080"], &["--metrics-addr=:8080"], &[]),
        (&["--no-such-flag=1"], &["--no-such-flag=1"], &[]),
        (&["-no-such-flag"], &["-no-such-flag"], &[]),
        // short flags and the stdin value stay as they are
        (&["plan", "-f", "-"], &["plan", "-f", "-"], &[]),
        (&["-V"], &["-V"], &[]),
        // ignored bool flags: alone or with a value, never eating the next word
        (&["--logtostderr"], &[], &["--logtostderr"]),
        (&["--logtostderr=true", "--v=4"], &["--v=4"], &["--logtostderr"]),
        (&["-logtostderr", "--dry-run"], &["--dry-run"], &["--logtostderr"]),
        // ignored value flags: `=value` or the next word
        (&["--sync-period=0"], &[], &["--sync-period"]),
        (
            &["--sync-period", "0", "--dry-run"],
            &["--dry-run"],
            &["--sync-period"],
        ),
        (
            &["--sync-period", "--dry-run"],
            &["--dry-run"],
            &["--sync-period"],
        ),
        // prefix patterns
        (
            &[
                "--colocation-profile-qps=10",
                "--colocation-profile-reconcile-by-default",
            ],
            &[],
            &[
                "--colocation-profile-qps",
                "--colocation-profile-reconcile-by-default",
            ],
        ),
        // reported once however often given
        (&["--logtostderr", "--logtostderr=false"], &[], &["--logtostderr"]),
        // translated flags, single or double dash, value inline or next
        (
            &["-addr=:9316"],
            &["--metrics-addr=:9316", "--health-addr=:9316"],
            &[],
        ),
        (&["--addr", ":1"], &["--metrics-addr=:1", "--health-addr=:1"], &[]),
        (&["--addr"], &["--addr"], &[]),
        // everything after `--` is left alone
        (
            &["--", "-logtostderr", "-v=4"],
            &["--", "-logtostderr", "-v=4"],
            &[],
        ),
    ];
    for (input, want_args, want_ignored) in cases {
        let got = normalise(input);
        assert_eq!(args_of(&got), *want_args, "args of {input:?}");
        assert_eq!(ignored_of(&got), *want_ignored, "ignored of {input:?}");
    }
}

#[test]
fn the_program_name_and_non_utf8_words_are_kept() {
    use std::os::unix::ffi::OsStringExt;
    let odd = OsString::from_vec(vec![b'-', 0xff]);
    let got = normalise_args([OsString::from("-prog"), odd.clone()], &known(), &TABLE);
    assert_eq!(got.args, vec![OsString::from("-prog"), odd]);
}

#[test]
fn ignored_uses_carry_the_reason() {
    let got = normalise(&["--sync-period=0"]);
    assert_eq!(
        got.ignored,
        vec![IgnoredUse {
            flag: "--sync-period".into(),
            why: "resync"
        }]
    );
}

#[test]
fn long_names_include_aliases_and_subcommands() {
    let command = clap::Command::new("bin")
        .arg(
            clap::Arg::new("root")
                .long("cgroup-root")
                .visible_alias("cgroup-root-dir"),
        )
        .subcommand(clap::Command::new("plan").arg(clap::Arg::new("file").short('f').long("file")));
    let names = long_names(&command);
    for name in ["cgroup-root", "cgroup-root-dir", "file"] {
        assert!(names.contains(name), "{name} in {names:?}");
    }
}

#[test]
fn help_names_every_translated_and_ignored_flag() {
    let help = upstream_help(&TABLE);
    for needle in [
        "--addr → --metrics-addr and --health-addr",
        "--logtostderr",
        "--sync-period",
        "--colocation-profile-*",
    ] {
        assert!(help.contains(needle), "{needle} in {help}");
    }
}
