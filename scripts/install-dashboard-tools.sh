#!/usr/bin/env bash
# Fetches what scripts/dashboard.sh needs to render the chart's Grafana dashboard without Grafana,
# and prints where each tool is, one `KEY=path` line each on stdout (progress goes to stderr):
#
#   PROMETHEUS=<cache>/dashboard/prometheus-<v>/usr/bin/prometheus
#   PROMTOOL=<cache>/dashboard/prometheus-<v>/usr/bin/promtool
#   CHROMIUM=/usr/bin/chromium
#   UPLOT=<cache>/dashboard/uplot-<v>         (uPlot.iife.min.js, uPlot.min.css)
#
# - Prometheus and promtool: Debian bookworm's `prometheus`, downloaded with `apt-get download`
#   through the private apt configuration of scripts/real-cluster/prepare.sh and unpacked with
#   `dpkg -x` into the cache; nothing is installed system-wide.
# - Chromium: Debian's `chromium`, installed system-wide with apt-get (it needs too many shared
#   libraries to unpack privately); left alone when `chromium` is already on PATH.
# - uPlot (MIT): `npm pack` of the pinned version into the cache. It is third-party code, so it
#   stays in the cache: the previewer loads it from there at render time.
#
# The cache is ${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-rs/dashboard. Idempotent: a second
# run only prints the paths. On any failure it prints `skipped: <reason>` on stderr and exits 3,
# which callers read as "tools unavailable here".
set -Eeuo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-rs"
DASH_CACHE="$CACHE/dashboard"

PROMETHEUS_VERSION="2.42.0+ds-5+deb12u1"
UPLOT_VERSION="1.6.32"

PROM_ROOT="$DASH_CACHE/prometheus-$PROMETHEUS_VERSION"
UPLOT_DIR="$DASH_CACHE/uplot-$UPLOT_VERSION"

step="setup"
log() { echo "install-dashboard-tools: $*" >&2; }
die() {
    trap - ERR
    echo "skipped: $*" >&2
    exit 3
}
# With errtrace, subshells run the trap too: they only pass their status up, and the script
# itself reports the failed step once.
on_error() {
    local rc=$?
    ((BASH_SUBSHELL == 0)) || exit "$rc"
    die "$step failed (command exited $rc)"
}
trap on_error ERR

# shellcheck source=real-cluster/prepare.sh
source "$REPO/scripts/real-cluster/prepare.sh"

prometheus_present() { [[ -x "$PROM_ROOT/usr/bin/prometheus" && -x "$PROM_ROOT/usr/bin/promtool" ]]; }

fetch_prometheus_locked() {
    prometheus_present && return 0
    step="private apt-get update"
    private_apt_update
    local dl="$DASH_CACHE/download"
    mkdir -p "$dl"
    rm -f "$dl"/prometheus_*.deb
    step="apt-get download prometheus=$PROMETHEUS_VERSION"
    log "$step"
    if ! (cd "$dl" && private_apt apt-get -qq download "prometheus=$PROMETHEUS_VERSION") >&2; then
        # The private lists may predate the pinned version: refresh them once and retry.
        log "download failed; refreshing the private apt lists"
        private_apt apt-get -qq update >&2
        (cd "$dl" && private_apt apt-get -qq download "prometheus=$PROMETHEUS_VERSION") >&2
    fi
    step="unpacking prometheus"
    rm -rf "$PROM_ROOT.tmp"
    dpkg -x "$dl"/prometheus_*.deb "$PROM_ROOT.tmp"
    rm -rf "$PROM_ROOT" && mv "$PROM_ROOT.tmp" "$PROM_ROOT"
    rm -f "$dl"/prometheus_*.deb
}

fetch_prometheus() {
    prometheus_present && return 0
    mkdir -p "$DASH_CACHE"
    with_cache_lock dashboard-prometheus fetch_prometheus_locked
    prometheus_present || die "prometheus missing under $PROM_ROOT after unpacking"
}

install_chromium() {
    command -v chromium >/dev/null && return 0
    step="apt-get install chromium"
    log "$step"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; then
        log "install failed; apt-get update and retry"
        apt-get -qq update >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
    fi
    command -v chromium >/dev/null || die "chromium not on PATH after apt-get install"
}

uplot_present() { [[ -f "$UPLOT_DIR/uPlot.iife.min.js" && -f "$UPLOT_DIR/uPlot.min.css" ]]; }

fetch_uplot_locked() {
    uplot_present && return 0
    step="npm pack uplot@$UPLOT_VERSION"
    command -v npm >/dev/null || die "npm not found (needed to fetch uPlot)"
    log "$step"
    local dl="$DASH_CACHE/download"
    mkdir -p "$dl"
    (cd "$dl" && npm pack --silent "uplot@$UPLOT_VERSION") >/dev/null
    step="extracting uPlot"
    rm -rf "$UPLOT_DIR.tmp" && mkdir -p "$UPLOT_DIR.tmp"
    tar -xzf "$dl/uplot-$UPLOT_VERSION.tgz" -C "$UPLOT_DIR.tmp" --strip-components=2 \
        package/dist/uPlot.iife.min.js package/dist/uPlot.min.css
    tar -xzf "$dl/uplot-$UPLOT_VERSION.tgz" -C "$UPLOT_DIR.tmp" --strip-components=1 package/LICENSE
    rm -rf "$UPLOT_DIR" && mv "$UPLOT_DIR.tmp" "$UPLOT_DIR"
    rm -f "$dl/uplot-$UPLOT_VERSION.tgz"
}

fetch_uplot() {
    uplot_present && return 0
    mkdir -p "$DASH_CACHE"
    with_cache_lock dashboard-uplot fetch_uplot_locked
}

fetch_prometheus
install_chromium
fetch_uplot

echo "PROMETHEUS=$PROM_ROOT/usr/bin/prometheus"
echo "PROMTOOL=$PROM_ROOT/usr/bin/promtool"
echo "CHROMIUM=$(command -v chromium)"
echo "UPLOT=$UPLOT_DIR"
