#!/usr/bin/env bash
# Build the koord-manager, koord-webhook, koord-scheduler-extender and koordlet container images (and optionally the pod
# sandbox "pause" image) as OCI image archives, without a registry, a base image or a container
# engine. Each image holds one release binary at the path the chart runs (`/koord-manager`,
# `/koord-webhook`, `/koordlet`), the shared libraries it links (from `ldd`), an /etc/passwd with
# the non-root user 65532, the host's CA bundle and a writable /tmp: the same layout as the
# repository's Dockerfile (distroless/cc).
#
# usage: scripts/build-images.sh [--out DIR] [--repository PREFIX] [--tag TAG]
#                                [--pause-src PATH/TO/pause.c] [--no-build] [--import]
#   --out DIR          where the archives go (default target/images)
#   --repository P     image name prefix (default localhost/koordinator-rs)
#   --tag TAG          image tag (default: the workspace version)
#   --pause-src FILE   also build P/pause:TAG from Kubernetes' build/pause/linux/pause.c
#   --profile P        cargo profile of the binaries: release (default) or dev (target/debug)
#   --no-build         use the existing binaries of that profile
#   --pause-only       build only the pause image (needs --pause-src)
#   --kube-scheduler F also build P/kube-scheduler:<its version> from a kube-scheduler binary
#                      (the real cluster's, built from source; at /usr/local/bin/kube-scheduler
#                      as in the upstream image, user 65532)
#   --e2e-busy         also build koord-e2e-busy:local, the scenario suite's workload image
#                      (scripts/images/busy.c: `/busy` sleeps, `/busy --cpu N` burns N CPUs)
#   --bench-workloads  also build koord-bench-nginx, koord-bench-memcached and
#                      koord-bench-stress-ng (:latest) from the host's Debian binaries
#                      (scripts/install-bench-workloads.sh), for `koord-bench colocation
#                      --kubeconfig`
#   --bench-workloads-only  only those three images
#   --import           `ctr -n k8s.io images import` every archive (CONTAINERD_ADDRESS or
#                      --address via CTR_ADDRESS selects the containerd socket)
# Prints one line per archive: `<image ref> <manifest digest> <archive>`.
set -euo pipefail
cd "$(dirname "$0")/.."
repo_root="$PWD"

out="target/images"
prefix="localhost/koordinator-rs"
tag=""
pause_src=""
build=1
import=0
pause_only=0
e2e_busy=0
bench_workloads=0
bench_only=0
kube_scheduler=""
profile=release
while [[ $# -gt 0 ]]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        --repository) prefix="$2"; shift 2 ;;
        --tag) tag="$2"; shift 2 ;;
        --pause-src) pause_src="$2"; shift 2 ;;
        --profile) profile="$2"; shift 2 ;;
        --no-build) build=0; shift ;;
        --pause-only) pause_only=1; build=0; shift ;;
        --e2e-busy) e2e_busy=1; shift ;;
        --bench-workloads) bench_workloads=1; shift ;;
        --bench-workloads-only) bench_workloads=1; bench_only=1; build=0; shift ;;
        --kube-scheduler) kube_scheduler="$2"; shift 2 ;;
        --import) import=1; shift ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
if [[ -z "$tag" ]]; then
    tag="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
    [[ -n "$tag" ]] || { echo "error: no workspace version in Cargo.toml" >&2; exit 1; }
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"

case "$profile" in
    release) bin_dir=target/release ;;
    dev) bin_dir=target/debug ;;
    *) echo "error: --profile must be release or dev, not '$profile'" >&2; exit 2 ;;
esac
if [[ $build == 1 ]]; then
    cargo build --profile "$profile" --locked -p koord-manager -p koord-webhook -p koord-scheduler-extender -p koordlet --bins
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# A root filesystem with `binary` at /<name>, its shared libraries at their host paths, and the
# users the chart runs as (root for koordlet, 65532 for manager and webhook).
make_rootfs() {
    local binary="$1" root="$2" name
    name="$(basename "$binary")"
    mkdir -p "$root/etc" "$root/tmp"
    chmod 1777 "$root/tmp"
    install -m 0755 "$binary" "$root/$name"
    # The release profile keeps line tables for backtraces; images ship without them.
    strip --strip-debug "$root/$name"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
    # A CA bundle as in distroless: kube-rs' TLS setup loads the system roots even where it
    # then skips verification (koordlet's kubelet client) and fails when there are none.
    if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
        mkdir -p "$root/etc/ssl/certs"
        cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
    fi
    # `ldd` lines: "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)" and the loader
    # "/lib64/ld-linux-x86-64.so.2 (0x...)". Copy the real files to the paths the binary asks for.
    local lib
    while read -r lib; do
        [[ -n "$lib" ]] || continue
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done < <(ldd "$binary" 2>/dev/null | awk '/=> \//{print $3} /^\t\//{print $1}')
}

archives=()
components=(koord-manager koord-webhook koord-scheduler-extender koordlet)
[[ $pause_only == 1 || $bench_only == 1 ]] && components=()
[[ $pause_only == 1 && -z "$pause_src" ]] && { echo "error: --pause-only needs --pause-src" >&2; exit 2; }
for name in "${components[@]}"; do
    binary="$bin_dir/$name"
    [[ -x "$binary" ]] || { echo "error: $binary not built (drop --no-build)" >&2; exit 1; }
    user=65532
    [[ $name == koordlet ]] && user=0
    make_rootfs "$binary" "$work/$name"
    python3 scripts/oci-archive.py "$work/$name" "$prefix/$name:$tag" "$out/$name.tar" \
        --entrypoint "/$name" --user "$user"
    archives+=("$out/$name.tar")
done

if [[ -n "$pause_src" ]]; then
    [[ -f "$pause_src" ]] || { echo "error: $pause_src not found" >&2; exit 1; }
    mkdir -p "$work/pause"
    # As Kubernetes' build/pause/Makefile does it: a static binary, nothing else in the image.
    gcc -Os -Wall -Werror -static -DVERSION=v3.4-koordinator-rs -o "$work/pause/pause" "$pause_src"
    strip "$work/pause/pause"
    python3 scripts/oci-archive.py "$work/pause" "$prefix/pause:3.4" "$out/pause.tar" \
        --entrypoint /pause --user 65535
    archives+=("$out/pause.tar")
fi

if [[ -n "$kube_scheduler" ]]; then
    [[ -x "$kube_scheduler" ]] || { echo "error: $kube_scheduler is not an executable" >&2; exit 1; }
    # "Kubernetes v1.20.2" -> v1.20.2: the tag the chart derives from the cluster's version.
    ks_version="$("$kube_scheduler" --version | awk '{print $2}')"
    [[ "$ks_version" == v* ]] || { echo "error: cannot read the version of $kube_scheduler" >&2; exit 1; }
    mkdir -p "$work/kube-scheduler/usr/local/bin" "$work/kube-scheduler/etc" "$work/kube-scheduler/tmp"
    chmod 1777 "$work/kube-scheduler/tmp"
    install -m 0755 "$kube_scheduler" "$work/kube-scheduler/usr/local/bin/kube-scheduler"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
        >"$work/kube-scheduler/etc/passwd"
    # A dynamically linked build also gets its libraries.
    while read -r lib; do
        [[ -n "$lib" ]] || continue
        mkdir -p "$work/kube-scheduler$(dirname "$lib")"
        cp -L "$lib" "$work/kube-scheduler$lib"
    done < <(ldd "$kube_scheduler" 2>/dev/null | awk '/=> \//{print $3} /^\t\//{print $1}')
    python3 scripts/oci-archive.py "$work/kube-scheduler" "$prefix/kube-scheduler:$ks_version" \
        "$out/kube-scheduler.tar" --entrypoint /usr/local/bin/kube-scheduler --user 65532
    archives+=("$out/kube-scheduler.tar")
fi

if [[ $e2e_busy == 1 ]]; then
    mkdir -p "$work/busy"
    gcc -Os -Wall -Werror -static -o "$work/busy/busy" scripts/images/busy.c
    strip "$work/busy/busy"
    # The name the scenario suite uses by default (KOORD_E2E_IMAGE), as containerd stores it.
    python3 scripts/oci-archive.py "$work/busy" "docker.io/library/koord-e2e-busy:local" \
        "$out/koord-e2e-busy.tar" --entrypoint /busy --user 65532
    archives+=("$out/koord-e2e-busy.tar")
fi

if [[ $bench_workloads == 1 ]]; then
    # One program each, at its Debian path with the shared libraries it links; nginx's workers
    # switch to `nobody`, memcached runs with `-u root`.
    for program in /usr/sbin/nginx /usr/bin/memcached /usr/bin/stress-ng; do
        name="$(basename "$program")"
        [[ -x "$program" ]] || { echo "error: $program missing (scripts/install-bench-workloads.sh)" >&2; exit 1; }
        root="$work/bench-$name"
        mkdir -p "$root/etc" "$root/tmp" "$root$(dirname "$program")"
        chmod 1777 "$root/tmp"
        install -m 0755 "$program" "$root$program"
        printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$root/etc/passwd"
        printf 'root:x:0:\nnogroup:x:65534:\nnobody:x:65534:\n' >"$root/etc/group"
        while read -r lib; do
            [[ -n "$lib" ]] || continue
            mkdir -p "$root$(dirname "$lib")"
            cp -L "$lib" "$root$lib"
        done < <(ldd "$program" 2>/dev/null | awk '/=> \//{print $3} /^\t\//{print $1}')
        python3 scripts/oci-archive.py "$root" "docker.io/library/koord-bench-$name:latest" \
            "$out/koord-bench-$name.tar" --entrypoint "$program" --user 0
        archives+=("$out/koord-bench-$name.tar")
    done
fi

if [[ $import == 1 ]]; then
    ctr_args=(-n k8s.io)
    [[ -n "${CTR_ADDRESS:-}" ]] && ctr_args+=(--address "$CTR_ADDRESS")
    for archive in "${archives[@]}"; do
        "${CTR:-ctr}" "${ctr_args[@]}" images import "$archive" >/dev/null
    done
fi
cd "$repo_root"
