#!/usr/bin/env bash
# Installs cargo-deny (from crates.io, cached in ${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-rs/tools)
# and checks the dependency graph against deny.toml: licenses, bans (duplicates as warnings)
# and sources. Advisories are not checked (deny.toml says why).
#
#   scripts/deny.sh            # exit 0 when the policy holds
#
# Exit code 3 with `skipped: <reason>` when cargo-deny cannot be installed.
set -euo pipefail

CARGO_DENY_VERSION="0.20.2"

repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-rs/tools"
bin="$cache/cargo/bin/cargo-deny"

if [[ ! -x "$bin" ]] || [[ "$("$bin" --version 2>/dev/null | awk '{print $2}')" != "$CARGO_DENY_VERSION" ]]; then
    echo "deny: cargo install cargo-deny $CARGO_DENY_VERSION (cached for later runs)" >&2
    if ! cargo install --locked --quiet --root "$cache/cargo" --version "$CARGO_DENY_VERSION" cargo-deny >&2; then
        echo "skipped: cargo-deny $CARGO_DENY_VERSION could not be installed from crates.io"
        exit 3
    fi
fi
cd "$repo"
"$bin" --version
# cargo-deny reads the metadata of every package in Cargo.lock, for every target and feature
# (windows-sys, the fuzz driver's afl), which a fresh machine's cargo has never downloaded:
# fetch them first, so the offline check finds them.
cargo fetch --locked --quiet
# --offline: the index is the one cargo already has for this Cargo.lock (no advisory fetch).
"$bin" --offline --locked check --hide-inclusion-graph licenses bans sources
