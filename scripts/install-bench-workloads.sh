#!/usr/bin/env bash
# Installs the third-party workloads of `koord-bench colocation` from Debian's packages:
# nginx (nginx-light), memcached, stress-ng, and the DejaVu font the benchmark's plot is drawn
# with (fonts-dejavu-core). Only the benchmark needs them; the test suite does not.
#
#   sudo scripts/install-bench-workloads.sh
#
# Idempotent: does nothing (and needs no network) when every program is already installed.
# Services are not started: the package scripts are told not to (policy-rc.d), and the benchmark
# runs its own nginx and memcached on loopback ports inside pod cgroups.
set -euo pipefail

need=()
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v memcached >/dev/null || need+=(memcached)
command -v stress-ng >/dev/null || need+=(stress-ng)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)

if [ ${#need[@]} -eq 0 ]; then
    echo "install-bench-workloads: nginx, memcached, stress-ng and fonts already installed" >&2
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-bench-workloads: need root to install ${need[*]}" >&2
    exit 1
fi
echo "install-bench-workloads: installing ${need[*]}" >&2
# No service starts during installation (invoke-rc.d asks policy-rc.d; 101 = action forbidden).
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    created_policy=1
fi
cleanup() { [ "$created_policy" -eq 1 ] && rm -f "$policy"; }
trap cleanup EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${need[@]}" >&2 || {
    apt-get update >&2
    apt-get install -y --no-install-recommends "${need[@]}" >&2
}
