//! The one way every binary turns argv and the environment into its flags: upstream's spellings
//! normalised ([`crate::normalise_args`]), old environment names applied
//! ([`crate::apply_env_fallbacks`]), the upstream flag table appended to `--help`, then clap, with
//! Go's rule that a flag given twice takes its last value.
//! What was ignored or read from an old name comes back as [`StartupNotes`], logged once logging
//! is up (the log format is itself a flag).

use std::ffi::OsString;

use crate::env_fallback::{EnvFallback, EnvFallbackUse, FallbackKind, apply_env_fallbacks};
use crate::upstream_flags::{IgnoredUse, UpstreamFlags, long_names, normalise_args, upstream_help};

/// One binary's compatibility tables.
#[derive(Clone, Copy, Debug)]
pub struct CliCompat {
    /// Upstream flags needing the normaliser.
    pub upstream: UpstreamFlags,
    /// Old environment variable names still read.
    pub env_fallbacks: &'static [EnvFallback],
}

/// What parsing accepted but the operator should hear about.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StartupNotes {
    /// Upstream flags given and ignored.
    pub ignored_flags: Vec<IgnoredUse>,
    /// Old environment names found set.
    pub env_fallbacks: Vec<EnvFallbackUse>,
}

impl StartupNotes {
    /// One log line per note: a warning for each ignored flag and deprecated name, info for an
    /// upstream environment name. Call once, after logging is initialised.
    pub fn log(&self) {
        for ignored in &self.ignored_flags {
            tracing::warn!(
                flag = %ignored.flag,
                "ignoring upstream flag {}: {}",
                ignored.flag,
                ignored.why
            );
        }
        for used in &self.env_fallbacks {
            let (old, new) = (used.old, used.new);
            match (used.kind, used.applied) {
                (FallbackKind::Deprecated, true) => tracing::warn!(
                    env = old,
                    replacement = new,
                    "environment variable {old} is deprecated and goes away in the next release; set {new} instead"
                ),
                (FallbackKind::Deprecated, false) => tracing::warn!(
                    env = old,
                    replacement = new,
                    "environment variable {old} is deprecated and ignored: {new} is set"
                ),
                (FallbackKind::Upstream, true) => tracing::info!(
                    env = old,
                    replacement = new,
                    "reading upstream's environment variable {old}; {new} is this binary's name for it"
                ),
                (FallbackKind::Upstream, false) => tracing::info!(
                    env = old,
                    replacement = new,
                    "upstream's environment variable {old} is ignored: {new} is set"
                ),
            }
        }
    }
}

/// Parses `args` (program name first) into `T` the way every binary does; `env` looks up
/// environment variables for the old names (the new names clap reads itself). Errors are clap's
/// (print them with `exit()`/`print()`), including `--help` and `--version`.
pub fn parse_cli<T, I, A>(
    args: I,
    compat: &CliCompat,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<(T, StartupNotes), clap::Error>
where
    T: clap::Parser,
    I: IntoIterator<Item = A>,
    A: Into<OsString>,
{
    let command = T::command();
    let normalised = normalise_args(
        args.into_iter().map(Into::into),
        &long_names(&command),
        &compat.upstream,
    );
    let (command, env_fallbacks) = apply_env_fallbacks(command, compat.env_fallbacks, env);
    // Go's flag package lets a later occurrence override an earlier one, and a chart's
    // `extraArgs` come after its own args: the last one wins here too.
    let mut command = command
        .args_override_self(true)
        .after_help(upstream_help(&compat.upstream));
    let mut matches = command.try_get_matches_from_mut(normalised.args)?;
    let parsed = T::from_arg_matches_mut(&mut matches).map_err(|error| error.format(&mut command))?;
    Ok((
        parsed,
        StartupNotes {
            ignored_flags: normalised.ignored,
            env_fallbacks,
        },
    ))
}

/// The process environment, for [`parse_cli`].
pub fn process_env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}
