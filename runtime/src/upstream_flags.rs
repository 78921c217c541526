//! Upstream Koordinator's command lines, made readable by our parsers.
//!
//! Upstream's binaries parse flags with Go's `flag` package (or pflag over it): a long flag may
//! have one dash (`-addr=:9316`), a bool flag may stand alone (`--enable-leader-election`), and
//! every binary also takes klog's flags (`--v=4`, `--logtostderr=true`). A user switching from
//! upstream keeps those manifests, so every binary runs [`normalise_args`] on its argv before clap
//! sees it. What clap can express itself stays in clap: renamed flags are `visible_alias`es, a
//! bare bool flag is `num_args(0..=1)` with `default_missing_value("true")`, a `:PORT` address is
//! [`crate::parse_listen_addr`]. The normaliser does only the rest:
//!
//! - a single-dash long flag this binary knows becomes double-dash (`-addr` → `--addr`);
//!   one-letter flags too when they are long names (`-v=4` → `--v=4`);
//! - an upstream flag we do not implement is removed, with its value, and reported, so the
//!   caller can warn once at start (never fatal);
//! - an upstream flag whose meaning spreads over several of ours, or whose value means something
//!   else, is rewritten by its own function (koordlet's `--addr` sets both our listen addresses).
//!
//! Anything else passes through untouched, so a truly unknown flag is still clap's error.

use std::collections::BTreeSet;
use std::ffi::OsString;

/// Whether an ignored upstream flag is a Go bool flag (never takes the next word as its value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagValue {
    /// `--name`, `--name=true`, `--name=false`; the next word is never its value.
    Bool,
    /// `--name=value` or `--name value`.
    Value,
}

/// An upstream flag this binary accepts and ignores, with the reason given in the warning.
#[derive(Clone, Copy, Debug)]
pub struct IgnoredFlag {
    /// The name without dashes. A trailing `*` matches every flag with that prefix
    /// (`colocation-profile-*`); such flags take a value only as `--name=value` or when the
    /// next word does not start with `-`.
    pub name: &'static str,
    /// How the flag takes its value.
    pub value: FlagValue,
    /// Why it is ignored, or what to use instead; ends the warning line.
    pub why: &'static str,
}

/// An upstream flag rewritten into ours because a clap alias cannot say it.
#[derive(Clone, Copy, Debug)]
pub struct TranslatedFlag {
    /// The upstream name without dashes; it always takes a value.
    pub name: &'static str,
    /// Our arguments for the upstream value (`:9316` → `["--metrics-addr=:9316", ...]`).
    pub rewrite: fn(&str) -> Vec<String>,
    /// What it becomes, for `--help`.
    pub becomes: &'static str,
}

/// One binary's table of upstream flags that need the normaliser.
#[derive(Clone, Copy, Debug)]
pub struct UpstreamFlags {
    /// Accepted, ignored and warned about: several tables, typically the binary's own and
    /// [`KLOG_IGNORED`].
    pub ignored: &'static [&'static [IgnoredFlag]],
    /// Rewritten into our flags.
    pub translated: &'static [TranslatedFlag],
}

/// klog's flags, which every upstream binary takes. `--v` is not here: every binary of ours
/// implements it (see [`crate::verbosity_filter`]).
pub const KLOG_IGNORED: &[IgnoredFlag] = &[
    klog("logtostderr", FlagValue::Bool),
    klog("alsologtostderr", FlagValue::Bool),
    klog("add_dir_header", FlagValue::Bool),
    klog("skip_headers", FlagValue::Bool),
    klog("skip_log_headers", FlagValue::Bool),
    klog("one_output", FlagValue::Bool),
    klog("log_dir", FlagValue::Value),
    klog("log_file", FlagValue::Value),
    klog("log_file_max_size", FlagValue::Value),
    klog("log_backtrace_at", FlagValue::Value),
    klog("stderrthreshold", FlagValue::Value),
    IgnoredFlag {
        name: "vmodule",
        value: FlagValue::Value,
        why: "per-module levels are RUST_LOG directives, e.g. RUST_LOG=info,koordlet::evictor=debug",
    },
];

const fn klog(name: &'static str, value: FlagValue) -> IgnoredFlag {
    IgnoredFlag {
        name,
        value,
        why: "logs always go to stderr; --log-format picks text or json",
    }
}

/// An upstream flag found on the command line and dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IgnoredUse {
    /// The flag as written, without its value (`--logtostderr`).
    pub flag: String,
    /// The table's reason.
    pub why: &'static str,
}

/// The argv clap should parse, and what was dropped on the way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Normalised {
    /// Program name first, as given.
    pub args: Vec<OsString>,
    /// Ignored upstream flags, in order, each once.
    pub ignored: Vec<IgnoredUse>,
}

/// Rewrites upstream's spellings in `args` (program name first) into ours. `known_longs` are
/// this binary's long flag names and aliases (see [`long_names`]); a single-dash word becomes a
/// double-dash one only when it names one of them, an ignored or a translated flag, so short
/// flags (`-f`) and values (`-`) are left alone. Pure; the caller warns about
/// [`Normalised::ignored`].
pub fn normalise_args<I>(args: I, known_longs: &BTreeSet<String>, upstream: &UpstreamFlags) -> Normalised
where
    I: IntoIterator<Item = OsString>,
{
    let mut words = args.into_iter();
    let mut out = Normalised::default();
    out.args.extend(words.next());
    let mut words = words.peekable();
    while let Some(word) = words.next() {
        let Some(text) = word.to_str() else {
            out.args.push(word);
            continue;
        };
        if text == "--" {
            out.args.push(word);
            out.args.extend(words);
            break;
        }
        let Some((name, inline_value)) = split_flag(text) else {
            out.args.push(word);
            continue;
        };
        let single_dash = !text.starts_with("--");
        if let Some(ignored) = find_ignored(upstream, name) {
            let takes_next = inline_value.is_none()
                && ignored.value == FlagValue::Value
                && words
                    .peek()
                    .and_then(|next| next.to_str())
                    .is_some_and(|next| !next.starts_with('-') || next == "-");
            if takes_next {
                words.next();
            }
            let flag = format!("--{name}");
            if !out.ignored.iter().any(|seen| seen.flag == flag) {
                out.ignored.push(IgnoredUse {
                    flag,
                    why: ignored.why,
                });
            }
            continue;
        }
        if let Some(translated) = upstream.translated.iter().find(|t| t.name == name) {
            let value = match inline_value {
                Some(value) => Some(value.to_owned()),
                None => words
                    .next_if(|next| next.to_str().is_some())
                    .and_then(|next| next.into_string().ok()),
            };
            match value {
                Some(value) => out
                    .args
                    .extend((translated.rewrite)(&value).into_iter().map(OsString::from)),
                // No value: leave `--name` for clap to report as it would any missing value.
                None => out.args.push(OsString::from(format!("--{name}"))),
            }
            continue;
        }
        if single_dash && known_longs.contains(name) {
            out.args.push(OsString::from(format!("-{text}")));
        } else {
            out.args.push(word);
        }
    }
    out
}

/// `--name=value` / `-name` → (`name`, value). None for non-flags (`-`, `value`, `--`).
fn split_flag(text: &str) -> Option<(&str, Option<&str>)> {
    let body = text.strip_prefix("--").or_else(|| text.strip_prefix('-'))?;
    if body.is_empty() || body.starts_with('-') {
        return None;
    }
    Some(match body.split_once('=') {
        Some((name, value)) => (name, Some(value)),
        None => (body, None),
    })
}

fn find_ignored<'a>(upstream: &'a UpstreamFlags, name: &str) -> Option<&'a IgnoredFlag> {
    upstream
        .ignored
        .iter()
        .flat_map(|table| table.iter())
        .find(|flag| match flag.name.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => flag.name == name,
        })
}

/// Every long flag name and alias of `command` and its subcommands, for [`normalise_args`].
pub fn long_names(command: &clap::Command) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    collect_long_names(command, &mut names);
    names
}

fn collect_long_names(command: &clap::Command, names: &mut BTreeSet<String>) {
    for arg in command.get_arguments() {
        names.extend(arg.get_long().map(str::to_owned));
        if let Some(aliases) = arg.get_all_aliases() {
            names.extend(aliases.into_iter().map(str::to_owned));
        }
    }
    for sub in command.get_subcommands() {
        collect_long_names(sub, names);
    }
}

/// The `--help` section listing what the normaliser does for this binary.
pub fn upstream_help(upstream: &UpstreamFlags) -> String {
    let mut help = String::from(
        "Upstream Koordinator flags: one dash works as two (-addr=:9316), a bool flag may stand \
         alone, an address may be :PORT (all interfaces), --v=N sets the log level.",
    );
    if !upstream.translated.is_empty() {
        help.push_str("\nRewritten:");
        for flag in upstream.translated {
            help.push_str(&format!("\n  --{} → {}", flag.name, flag.becomes));
        }
    }
    if !upstream.ignored.is_empty() {
        help.push_str("\nAccepted and ignored (warned at start):\n  ");
        let names: Vec<String> = upstream
            .ignored
            .iter()
            .flat_map(|table| table.iter())
            .map(|flag| format!("--{}", flag.name))
            .collect();
        help.push_str(&names.join(", "));
    }
    help
}

#[cfg(test)]
mod tests;
