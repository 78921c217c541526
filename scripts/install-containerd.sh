#!/usr/bin/env bash
# Fetches containerd 1.7 (trixie, with NRI) and runc into the cache, with the same pinned
# versions and private apt configuration as scripts/real-cluster.sh (scripts/real-cluster/prepare.sh),
# and prints the unpacked root on stdout (binaries under <root>/usr/bin, <root>/usr/sbin).
#
#   scripts/install-containerd.sh     # -> ~/.cache/koordinator-rs/debs/root-<versions>
#
# Idempotent: a second run only prints the path. Nothing is installed system-wide.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-rs"
log() { echo "install-containerd: $*" >&2; }
die() { echo "install-containerd: error: $*" >&2; exit 1; }
# shellcheck source=real-cluster/prepare.sh
source "$REPO/scripts/real-cluster/prepare.sh"

fetch_debs >&2 || die "could not fetch containerd and runc"
[[ -x "$DEBS_ROOT/usr/bin/containerd" ]] || die "containerd missing under $DEBS_ROOT"
echo "$DEBS_ROOT"
