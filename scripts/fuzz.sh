#!/usr/bin/env bash
# Coverage-guided fuzzing of every input koordinator-rs parses, with AFL++ through cargo-afl
# (installed by scripts/install-fuzz.sh). Targets: fuzz/src/lib.rs; seeds: fuzz/corpus/<target>.
#
#   scripts/fuzz.sh list                      # target names
#   scripts/fuzz.sh build                     # instrumented release build of the driver
#   scripts/fuzz.sh run <target|all> <secs>   # fuzz each target <secs> seconds (long runs)
#   scripts/fuzz.sh execs <target|all> <n>    # fuzz each target until it has run <n> inputs
#   (<target> may be a comma-separated list: `execs plan,calc 1000000`; two such runs with
#   disjoint lists use two cores)
#   scripts/fuzz.sh ci                        # every target KOORD_FUZZ_CI_SECONDS (default 12) s
#
# Output per target goes to target/fuzz/out/<target> (resumed by the next run); each run prints
# one summary line per target (execs, execs/s, corpus, edges, crashes, hangs). Crashing and
# hanging inputs are copied to target/fuzz/findings/<target>/ and the script exits 1: replay one
# with `target/fuzz/build/release/koord-fuzz <target> < input`, fix it, add a regression test in
# the crate it belongs to and commit the input as fuzz/corpus/<target>/finding-<name>.
#
# Limits per input: 2 s (hang), 1 GiB address space (allocation over that aborts = a crash).
# The instrumented build lives in <cache>/fuzz-target so CI runs reuse it.
# Exit code 3 with `skipped: <reason>` when the fuzzer cannot be installed.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-rs"
export CARGO_TARGET_DIR="${KOORD_FUZZ_TARGET_DIR:-$cache/fuzz-target}"
out_root="$repo/target/fuzz"
driver="$CARGO_TARGET_DIR/release/koord-fuzz"
TARGETS=(config calc plan webhook cgroup_files resctrl quantity selector apiserver cgroup_names)

install() {
    local bin
    if ! bin="$("$repo/scripts/install-fuzz.sh")"; then
        echo "skipped: cargo-afl/AFL++ could not be installed (see messages above)"
        exit 3
    fi
    export PATH="$bin:$PATH"
    export XDG_DATA_HOME="$cache/tools/afl-data"
}

build() {
    local start=$SECONDS
    cargo afl build --release --locked -p koord-fuzz --features afl --bin koord-fuzz
    echo "fuzz build: $((SECONDS - start)) s"
}

stat_of() { sed -n "s/^$2 *: *//p" "$1/default/fuzzer_stats" 2>/dev/null | head -n1; }

# fuzz_one <target> <-V seconds | -E execs>
fuzz_one() {
    local target=$1 out="$out_root/out/$1"
    shift
    mkdir -p "$out"
    local start=$SECONDS
    AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_AUTORESUME=1 AFL_NO_AFFINITY=1 \
        AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_FAST_CAL=1 AFL_QUIET=1 \
        cargo afl fuzz "$@" -t 2000 -m 1024 -i "fuzz/corpus/$target" -o "$out" \
        -- "$driver" "$target" >"$out/afl.log" 2>&1 || {
        echo "$target: afl-fuzz failed; last lines of $out/afl.log:"
        tail -n 20 "$out/afl.log"
        return 1
    }
    local crashes hangs
    crashes=$(stat_of "$out" saved_crashes)
    hangs=$(stat_of "$out" saved_hangs)
    printf '%-13s seconds=%s execs=%s execs/s=%s corpus=%s edges=%s coverage=%s crashes=%s hangs=%s\n' "$target" \
        "$((SECONDS - start))" "$(stat_of "$out" execs_done)" "$(stat_of "$out" execs_per_sec)" "$(stat_of "$out" corpus_count)" \
        "$(stat_of "$out" edges_found)" "$(stat_of "$out" bitmap_cvg)" "$crashes" "$hangs"
    if [[ "${crashes:-0}" != 0 || "${hangs:-0}" != 0 ]]; then
        mkdir -p "$out_root/findings/$target"
        cp "$out"/default/crashes/id* "$out"/default/hangs/id* "$out_root/findings/$target/" 2>/dev/null || true
        echo "$target: findings copied to $out_root/findings/$target"
        return 1
    fi
}

# run <target[,target...]|all> <afl-fuzz stop option: -V seconds | -E execs>
run() {
    local which=$1 failed=0 start=$SECONDS
    shift
    local list=("${TARGETS[@]}")
    [[ $which == all ]] || IFS=, read -ra list <<<"$which"
    for t in "${list[@]}"; do
        fuzz_one "$t" "$@" || failed=1
    done
    echo "fuzzing: $((SECONDS - start)) s"
    return $failed
}

case "${1:-}" in
    list) printf '%s\n' "${TARGETS[@]}" ;;
    build) install; build ;;
    run)
        [[ $# == 3 ]] || { echo "usage: $0 run <target|all> <seconds>" >&2; exit 2; }
        install; build; run "$2" -V "$3" ;;
    execs)
        [[ $# == 3 ]] || { echo "usage: $0 execs <target|all> <executions>" >&2; exit 2; }
        install; build; run "$2" -E "$3" ;;
    ci) install; build; run all -V "${KOORD_FUZZ_CI_SECONDS:-12}" ;;
    *) sed -n '2,20p' "$0" >&2; exit 2 ;;
esac
