#!/usr/bin/env bash
# Installs cargo-afl (from crates.io) and builds its AFL++ into a cache directory; prints the
# directory holding `cargo-afl` on stdout.
#
#   scripts/install-fuzz.sh     # -> ${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-rs/tools/cargo/bin
#
# AFL++ is compiled by `cargo afl config --build` (needs make and a C compiler) into
# <cache>/tools/afl-data, which scripts/fuzz.sh passes as XDG_DATA_HOME. Idempotent: a cached
# install of the pinned version is reused. Exit code 1 (message on stderr) when it cannot install.
set -euo pipefail

CARGO_AFL_VERSION="0.18.2"   # must match the `afl` crate version in Cargo.toml

cache="${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-rs/tools"
bin="$cache/cargo/bin"
export XDG_DATA_HOME="$cache/afl-data"

installed_version() {
    [[ -x "$bin/cargo-afl" ]] && "$bin/cargo-afl" afl --version 2>/dev/null | awk '{print $2}'
}

if [[ "$(installed_version || true)" != "$CARGO_AFL_VERSION" ]]; then
    command -v cc >/dev/null || { echo "install-fuzz: no C compiler (cc) to build AFL++" >&2; exit 1; }
    echo "install-fuzz: cargo install cargo-afl $CARGO_AFL_VERSION" >&2
    cargo install --locked --quiet --root "$cache/cargo" --version "$CARGO_AFL_VERSION" cargo-afl >&2 || {
        echo "install-fuzz: cargo install cargo-afl failed" >&2
        exit 1
    }
fi
export PATH="$bin:$PATH"
# `cargo afl config --build` is a no-op message when AFL++ is already built for this rustc.
if ! ls "$XDG_DATA_HOME"/afl.rs/rustc-*/afl.rs-"$CARGO_AFL_VERSION"/afl/bin/afl-fuzz >/dev/null 2>&1; then
    echo "install-fuzz: building AFL++ (cargo afl config --build)" >&2
    cargo afl config --build >&2 || { echo "install-fuzz: building AFL++ failed" >&2; exit 1; }
fi
echo "$bin"
