//! Environment variables: one prefix per binary, and the names earlier releases read.
//!
//! Each flag's environment variable carries its binary's prefix (`KOORD_MANAGER_`,
//! `KOORD_WEBHOOK_`, `KOORDLET_`, `KOORD_SCHEDULER_EXTENDER_`). `KUBECONFIG` and the names the
//! chart fills from the downward API (`NODE_NAME`, `POD_NAME`, `POD_NAMESPACE`) keep their
//! standard names. Earlier releases read other names; a table of [`EnvFallback`]s keeps them
//! working: an old name's value becomes the flag's default, so the command line and the new
//! name still win, and the caller warns at start naming both.

use std::ffi::OsString;

/// Why an old name is still read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FallbackKind {
    /// An earlier release of ours read it; it goes away in the next release. Warned.
    Deprecated,
    /// Upstream Koordinator's manifests set it; read for as long as upstream does. Logged at
    /// info, since a user switching from upstream did nothing wrong.
    Upstream,
}

/// An old environment variable name that still sets a flag.
#[derive(Clone, Copy, Debug)]
pub struct EnvFallback {
    /// The old name.
    pub old: &'static str,
    /// The flag's current environment variable (for the message).
    pub new: &'static str,
    /// The clap argument id (the field name in the derive struct).
    pub arg: &'static str,
    /// The subcommand whose argument it is; `None` for the top level.
    pub subcommand: Option<&'static str>,
    /// Deprecated, or upstream's name.
    pub kind: FallbackKind,
}

/// An old name found set in the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvFallbackUse {
    /// The old name.
    pub old: &'static str,
    /// The name to use instead.
    pub new: &'static str,
    /// Deprecated, or upstream's name.
    pub kind: FallbackKind,
    /// False when the new name is set too (and wins).
    pub applied: bool,
}

/// Makes each old name in `table` that `env` finds set the default of its argument in
/// `command`, and reports each such name once. `env` is the process environment in production
/// (`|name| std::env::var_os(name)`) and a map in tests. Entries naming an argument `command`
/// does not have are skipped; [`missing_fallback_args`] finds them in tests.
pub fn apply_env_fallbacks(
    mut command: clap::Command,
    table: &[EnvFallback],
    env: &dyn Fn(&str) -> Option<OsString>,
) -> (clap::Command, Vec<EnvFallbackUse>) {
    let mut uses: Vec<EnvFallbackUse> = Vec::new();
    for entry in table {
        let Some(value) = env(entry.old) else { continue };
        let applied = env(entry.new).is_none();
        if applied && has_arg(&command, entry) {
            let set_default = |arg: clap::Arg| arg.default_value(value.clone());
            command = match entry.subcommand {
                None => command.mut_arg(entry.arg, set_default),
                Some(sub) => command.mut_subcommand(sub, |sub| sub.mut_arg(entry.arg, set_default)),
            };
        }
        if !uses.iter().any(|used| used.old == entry.old) {
            uses.push(EnvFallbackUse {
                old: entry.old,
                new: entry.new,
                kind: entry.kind,
                applied,
            });
        }
    }
    (command, uses)
}

fn has_arg(command: &clap::Command, entry: &EnvFallback) -> bool {
    let scope = match entry.subcommand {
        None => Some(command),
        Some(sub) => command.find_subcommand(sub),
    };
    scope.is_some_and(|scope| scope.get_arguments().any(|arg| arg.get_id() == entry.arg))
}

/// The entries of `table` whose argument `command` does not have (a test asserts none).
pub fn missing_fallback_args(command: &clap::Command, table: &[EnvFallback]) -> Vec<String> {
    table
        .iter()
        .filter(|entry| !has_arg(command, entry))
        .map(|entry| format!("{} -> {:?}/{}", entry.old, entry.subcommand, entry.arg))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use clap::{Arg, Command};

    use super::*;

    const TABLE: &[EnvFallback] = &[
        EnvFallback {
            old: "HEALTH_ADDR",
            new: "KOORD_X_HEALTH_ADDR",
            arg: "health_addr",
            subcommand: None,
            kind: FallbackKind::Deprecated,
        },
        EnvFallback {
            old: "CONFIG_NAMESPACE",
            new: "KOORD_X_CONFIG_NAMESPACE",
            arg: "config_namespace",
            subcommand: None,
            kind: FallbackKind::Deprecated,
        },
        EnvFallback {
            old: "CONFIG_NAMESPACE",
            new: "KOORD_X_CONFIG_NAMESPACE",
            arg: "config_namespace",
            subcommand: Some("validate"),
            kind: FallbackKind::Deprecated,
        },
        EnvFallback {
            old: "WEBHOOK_PORT",
            new: "KOORD_X_PORT",
            arg: "port",
            subcommand: None,
            kind: FallbackKind::Upstream,
        },
    ];

    fn command() -> Command {
        let ns = || {
            Arg::new("config_namespace")
                .long("config-namespace")
                .default_value("koordinator-system")
        };
        Command::new("x")
            .arg(
                Arg::new("health_addr")
                    .long("health-addr")
                    .default_value("0.0.0.0:8000"),
            )
            .arg(ns())
            .arg(Arg::new("port").long("port").default_value("9876"))
            .subcommand(Command::new("validate").arg(ns()))
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + use<> {
        let map: BTreeMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn parse(pairs: &[(&str, &str)], argv: &[&str]) -> (clap::ArgMatches, Vec<EnvFallbackUse>) {
        let (command, uses) = apply_env_fallbacks(command(), TABLE, &env_of(pairs));
        let matches = command
            .try_get_matches_from(std::iter::once("x").chain(argv.iter().copied()))
            .unwrap();
        (matches, uses)
    }

    fn value(matches: &clap::ArgMatches, id: &str) -> String {
        matches.get_one::<String>(id).unwrap().clone()
    }

    #[test]
    fn an_old_name_sets_the_flag_and_is_reported_once() {
        let (matches, uses) = parse(&[("HEALTH_ADDR", ":1"), ("CONFIG_NAMESPACE", "kube-system")], &[]);
        assert_eq!(value(&matches, "health_addr"), ":1");
        assert_eq!(value(&matches, "config_namespace"), "kube-system");
        assert_eq!(
            uses,
            vec![
                EnvFallbackUse {
                    old: "HEALTH_ADDR",
                    new: "KOORD_X_HEALTH_ADDR",
                    kind: FallbackKind::Deprecated,
                    applied: true
                },
                EnvFallbackUse {
                    old: "CONFIG_NAMESPACE",
                    new: "KOORD_X_CONFIG_NAMESPACE",
                    kind: FallbackKind::Deprecated,
                    applied: true
                },
            ]
        );
    }

    #[test]
    fn subcommand_arguments_take_the_old_name_too() {
        let (matches, _) = parse(&[("CONFIG_NAMESPACE", "kube-system")], &["validate"]);
        let (_, validate) = matches.subcommand().unwrap();
        assert_eq!(value(validate, "config_namespace"), "kube-system");
    }

    #[test]
    fn the_command_line_and_the_new_name_win() {
        let (matches, _) = parse(&[("HEALTH_ADDR", ":1")], &["--health-addr=:2"]);
        assert_eq!(value(&matches, "health_addr"), ":2");
        let (matches, uses) = parse(&[("HEALTH_ADDR", ":1"), ("KOORD_X_HEALTH_ADDR", ":3")], &[]);
        assert_eq!(
            value(&matches, "health_addr"),
            "0.0.0.0:8000",
            "the default: clap reads the new name itself"
        );
        assert!(!uses[0].applied);
    }

    #[test]
    fn unset_names_change_nothing() {
        let (matches, uses) = parse(&[("UNRELATED", "1")], &[]);
        assert!(uses.is_empty());
        assert_eq!(value(&matches, "port"), "9876");
    }

    #[test]
    fn entries_for_missing_arguments_are_skipped_and_found() {
        let table = [EnvFallback {
            arg: "nope",
            ..TABLE[0]
        }];
        let (applied, uses) = apply_env_fallbacks(command(), &table, &env_of(&[("HEALTH_ADDR", ":1")]));
        assert_eq!(uses.len(), 1);
        applied.try_get_matches_from(["x"]).unwrap();
        assert_eq!(missing_fallback_args(&command(), &table).len(), 1);
        assert!(missing_fallback_args(&command(), TABLE).is_empty());
    }
}
