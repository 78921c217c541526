#!/usr/bin/env bash
# The chart's Grafana dashboard (charts/koordinator/dashboards/koordinator.json), rendered without
# Grafana: a recorded scrape is imported into a real Prometheus, and headless Chromium opens the
# previewer (charts/koordinator/dashboards/preview/), which runs every panel's PromQL over the
# recording's time range.
#
#   scripts/dashboard.sh render [--recording FILE] [--out PNG]   # screenshot to docs/dashboard.png
#   scripts/dashboard.sh check  [--recording FILE] [--out PNG] [--dashboard JSON]
#                                              # the same, screenshot in a temp dir; --dashboard
#                                              # previews another dashboard than the chart's
#   scripts/dashboard.sh record [--out FILE]   # a new recording from the real cluster this checkout
#                                              # runs (scripts/real-cluster.sh up + install)
#
# The recording (default charts/koordinator/dashboards/preview/recording.om.gz) is OpenMetrics
# text, gzipped or not: `name{labels} value timestamp` lines (timestamps in seconds), `# EOF` last.
# Comment lines (# TYPE/HELP/UNIT) are dropped before the import, so repeated ones do no harm.
#
# Prints one line per panel, `panel "<title>": <n> series`, and a total. Exits 1 when a panel
# (other than a row) got no series or an error, and 3 (after `skipped: <reason>` on stderr)
# when the tools (scripts/install-dashboard-tools.sh) are unavailable here.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
DASHBOARDS="$REPO/charts/koordinator/dashboards"
DASHBOARD="$DASHBOARDS/koordinator.json"
PREVIEW="$DASHBOARDS/preview"
DEFAULT_RECORDING="$PREVIEW/recording.om.gz"
DEFAULT_OUT="$REPO/docs/dashboard.png"
WIDTH=1600
# Must match preview/index.html and preview.js: top bar + variables bar above the grid, 38 px per
# gridPos height unit (Grafana's 30 px cell + 8 px margin), and a bottom margin.
HEADER_PX=85
UNIT_PX=38
FOOTER_PX=24
# Virtual time Chromium gives the page; it stands still while the page's queries are in flight.
VIRTUAL_TIME_MS=15000
CHROMIUM_TIMEOUT=120

log() { echo "dashboard: $*" >&2; }
die() {
    echo "dashboard: error: $*" >&2
    exit 1
}
skip() {
    echo "skipped: $*" >&2
    exit 3
}

usage() {
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

WORK=""
PROM_PID=""
cleanup() {
    if [[ -n "$PROM_PID" ]]; then
        kill "$PROM_PID" 2>/dev/null || true
        wait "$PROM_PID" 2>/dev/null || true
    fi
    if [[ -n "$WORK" ]]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

make_work_dir() {
    [[ -n "$WORK" ]] && return 0
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/koord-dashboard.XXXXXX")"
}

# Sets PROMETHEUS, PROMTOOL, CHROMIUM, UPLOT from scripts/install-dashboard-tools.sh.
locate_tools() {
    local out rc=0 key value
    out="$("$REPO/scripts/install-dashboard-tools.sh")" || rc=$?
    # The installer has already printed `skipped: <reason>`.
    [[ $rc -eq 3 ]] && exit 3
    [[ $rc -eq 0 ]] || skip "scripts/install-dashboard-tools.sh exited $rc"
    PROMETHEUS="" PROMTOOL="" CHROMIUM="" UPLOT=""
    while IFS='=' read -r key value; do
        case "$key" in
        PROMETHEUS) PROMETHEUS="$value" ;;
        PROMTOOL) PROMTOOL="$value" ;;
        CHROMIUM) CHROMIUM="$value" ;;
        UPLOT) UPLOT="$value" ;;
        esac
    done <<<"$out"
    [[ -x "$PROMETHEUS" && -x "$PROMTOOL" && -x "$CHROMIUM" && -f "$UPLOT/uPlot.iife.min.js" ]] ||
        skip "install-dashboard-tools.sh did not report every tool"
    command -v python3 >/dev/null || skip "python3 not found"
    command -v curl >/dev/null || skip "curl not found"
}

# import_recording FILE: the samples into a TSDB under $WORK/tsdb; sets REC_START, REC_END (Unix
# seconds) and SCRAPE (the scrape interval seen in the `up` series, default 5s).
import_recording() {
    local rec="$1" range
    [[ -f "$rec" ]] || die "recording $rec not found"
    log "importing $rec"
    gzip -dcf "$rec" | awk '$0 !~ /^#/ && NF' >"$WORK/recording.om" ||
        die "could not read $rec"
    [[ -s "$WORK/recording.om" ]] || die "recording $rec holds no samples"
    range="$(awk '
        { t = $NF + 0; if (n++ == 0 || t < min) min = t; if (t > max) max = t }
        /^up[{ ]/ { key = $0; sub(/}.*/, "", key); ups[key]++; if (!(key in first)) first[key] = t; last[key] = t }
        END {
            scrape = 5
            for (k in ups) if (ups[k] > 1) { scrape = (last[k] - first[k]) / (ups[k] - 1); break }
            scrape = int(scrape + 0.5); if (scrape < 1) scrape = 1
            printf "%.3f %.3f %d\n", min, max, scrape
        }' "$WORK/recording.om")"
    read -r REC_START REC_END SCRAPE <<<"$range"
    echo "# EOF" >>"$WORK/recording.om"
    if ! "$PROMTOOL" tsdb create-blocks-from openmetrics "$WORK/recording.om" "$WORK/tsdb" \
        >"$WORK/promtool.log" 2>&1; then
        tail -20 "$WORK/promtool.log" >&2
        die "promtool could not import $rec"
    fi
    rm -f "$WORK/recording.om"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Prometheus over $WORK/tsdb on a free loopback port, serving the previewer under /user/; sets
# PROM_URL.
start_prometheus() {
    local site="$WORK/site" attempt port i
    mkdir -p "$site"
    cp "$PREVIEW/index.html" "$PREVIEW/preview.js" "$UPLOT/uPlot.iife.min.js" \
        "$UPLOT/uPlot.min.css" "$site/"
    cp "$DASHBOARD" "$site/koordinator.json"
    printf 'global:\n  scrape_interval: %ss\nscrape_configs: []\n' "$SCRAPE" >"$WORK/prometheus.yml"
    for attempt in 1 2 3; do
        port="$(free_port)"
        "$PROMETHEUS" --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
            --storage.tsdb.retention.time=100y --web.listen-address="127.0.0.1:$port" \
            --web.user-assets="$site" --log.level=warn >"$WORK/prometheus.log" 2>&1 &
        PROM_PID=$!
        PROM_URL="http://127.0.0.1:$port"
        for ((i = 0; i < 300; i++)); do
            curl -sf -o /dev/null "$PROM_URL/-/ready" && return 0
            kill -0 "$PROM_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill "$PROM_PID" 2>/dev/null || true
        wait "$PROM_PID" 2>/dev/null || true
        PROM_PID=""
        log "prometheus did not become ready on port $port (attempt $attempt)"
    done
    tail -20 "$WORK/prometheus.log" >&2
    die "prometheus did not start"
}

page_height() {
    python3 - "$DASHBOARD" "$HEADER_PX" "$UNIT_PX" "$FOOTER_PX" <<'EOF'
import json, sys
panels = json.load(open(sys.argv[1])).get("panels", [])
bottom = max((p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels), default=0)
print(int(sys.argv[2]) + bottom * int(sys.argv[3]) + int(sys.argv[4]))
EOF
}

chromium_run() {
    local height="$1" url="$2"
    shift 2
    timeout "$CHROMIUM_TIMEOUT" "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --disable-quic --no-first-run --disable-background-networking --disable-component-update \
        --disable-sync --user-data-dir="$WORK/chromium" --force-device-scale-factor=1 \
        --window-size="$WIDTH,$height" --virtual-time-budget="$VIRTUAL_TIME_MS" "$@" "$url"
}

# report DOM_FILE: the per-panel lines and the total; fails when a panel has no data.
report() {
    python3 - "$1" <<'EOF'
import html, json, re, sys
dom = open(sys.argv[1], encoding="utf-8", errors="replace").read()
if not re.search(r'<body[^>]*data-done="1"', dom):
    sys.exit("dashboard: error: the page did not finish (no body[data-done]); queries hung or the page failed")
m = re.search(r'<pre id="summary"[^>]*>(.*?)</pre>', dom, re.S)
if not m:
    sys.exit("dashboard: error: no summary in the page")
summary = json.loads(html.unescape(m.group(1)))
if summary.get("error"):
    sys.exit("dashboard: error: the page failed: " + summary["error"])
bad, total, panels = [], 0, 0
for p in summary["panels"]:
    if p["type"] == "row":
        continue
    panels += 1
    n = p.get("series", 0)
    total += n
    line = 'panel "%s": %d series' % (p["title"], n)
    if p.get("error"):
        line += " (error: %s)" % p["error"]
    print(line)
    if n == 0 or p.get("error"):
        bad.append(p["title"])
print("total: %d panels, %d with data, %d series (step %ss, $__rate_interval %s)"
      % (panels, panels - len(bad), total, summary.get("step"), summary.get("rate_interval")))
if bad:
    print("panels without data or with a query error: " + ", ".join('"%s"' % t for t in bad), file=sys.stderr)
    sys.exit(1)
EOF
}

# render_dashboard MODE ARGS...: MODE render writes the screenshot to --out (default
# docs/dashboard.png), MODE check to the temp dir unless --out is given.
render_dashboard() {
    local mode="$1" recording="$DEFAULT_RECORDING" out="" height url rc=0
    shift
    while [[ $# -gt 0 ]]; do
        case "$1" in
        --recording) recording="${2:?--recording needs a file}"; shift 2 ;;
        --out) out="${2:?--out needs a file}"; shift 2 ;;
        --dashboard)
            [[ "$mode" == check ]] || usage
            DASHBOARD="${2:?--dashboard needs a file}"
            shift 2
            ;;
        *) usage ;;
        esac
    done
    [[ -r "$DASHBOARD" ]] || die "cannot read the dashboard $DASHBOARD"
    [[ "$mode" == render && -z "$out" ]] && out="$DEFAULT_OUT"
    locate_tools
    make_work_dir
    import_recording "$recording"
    start_prometheus
    height="$(page_height)"
    url="$PROM_URL/user/?start=$REC_START&end=$REC_END&scrape=${SCRAPE}s"
    log "rendering $url (${WIDTH}x$height)"
    chromium_run "$height" "$url" --dump-dom >"$WORK/dom.html" 2>"$WORK/chromium.log" || {
        tail -20 "$WORK/chromium.log" >&2
        die "chromium --dump-dom failed"
    }
    chromium_run "$height" "$url" --screenshot="$WORK/dashboard.png" >>"$WORK/chromium.log" 2>&1 || true
    [[ -s "$WORK/dashboard.png" ]] || {
        tail -20 "$WORK/chromium.log" >&2
        die "chromium --screenshot wrote nothing"
    }
    report "$WORK/dom.html" || rc=$?
    if [[ -n "$out" && ( $rc -eq 0 || "$mode" == check ) ]]; then
        mkdir -p "$(dirname "$out")"
        cp "$WORK/dashboard.png" "$out"
        log "screenshot: $out"
    elif [[ -n "$out" ]]; then
        log "not writing $out: a panel got no data"
    fi
    return "$rc"
}

# record_story [--out FILE]: the scenario `dashboard::record_dashboard_story` against the real
# cluster this checkout runs (scripts/real-cluster.sh up + install), compressed into FILE.
record_story() {
    local out="$DEFAULT_RECORDING"
    while [[ $# -gt 0 ]]; do
        case "$1" in
        --out) out="${2:?--out needs a file}"; shift 2 ;;
        *) usage ;;
        esac
    done
    [[ -f "$REPO/target/real-cluster/kubeconfig" ]] ||
        die "no real cluster from this checkout: run scripts/real-cluster.sh up and install first"
    make_work_dir
    (cd "$REPO" && cargo test --locked -p koord-e2e --test scenarios --no-run)
    "$REPO/scripts/real-cluster.sh" exec env KOORD_E2E_KUBECONFIG="$REPO/target/real-cluster/kubeconfig" \
        KOORD_DASHBOARD_RECORDING="$WORK/recording.om" \
        cargo test --manifest-path "$REPO/Cargo.toml" --offline --locked -p koord-e2e --test scenarios -- \
        --ignored --nocapture --exact dashboard::record_dashboard_story
    [[ -s "$WORK/recording.om" ]] || die "the story wrote no recording"
    gzip -9n <"$WORK/recording.om" >"$out"
    log "recording: $out ($(stat -c %s "$out") bytes)"
}

case "${1:-}" in
record)
    shift
    record_story "$@"
    ;;
render | check)
    cmd="$1"
    shift
    render_dashboard "$cmd" "$@"
    ;;
*) usage ;;
esac
