#!/usr/bin/env bash
# Boots a pure cgroup v2 Linux kernel in qemu and runs one host-built binary inside it.
#
# The host's cgroup controllers are all bound to v1, so koordlet's v2 code is exercised here on
# a real kernel: Debian's cloud kernel, booted with `cgroup_no_v1=all`, an initramfs holding a
# static busybox, the binary and the shared libraries `ldd` lists for it. `/init` mounts proc,
# sysfs and cgroup2 at /sys/fs/cgroup, enables `+cpu +cpuset +memory +io +pids` at the root,
# runs the command, and reports its output and exit code on the second serial port.
#
#   scripts/v2-vm.sh prepare                      # install qemu, fetch kernel + busybox (cached)
#   scripts/v2-vm.sh run BINARY [ARGS...]         # boot, run BINARY ARGS, print its output
#
# `run` prints the VM's cgroup2 mount line, the command's output, then `KOORD_VM_EXIT=<code>`,
# and exits with the command's exit code. Inside the VM the command sees
# `KOORD_CGROUP_V2_VM=1`, two CPUs and 1 GiB of memory; its working directory is /work.
#
# Environment: KOORD_VM_TIMEOUT (seconds, default 300) bounds the whole boot; KOORD_VM_ENV
# (space-separated NAME=VALUE words) is exported inside the VM; KOORD_VM_KEEP=1 keeps the work
# directory (initramfs, console log) and prints its path.
#
# Downloads go to ${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-rs/v2-vm/ (the kernel and busybox
# are extracted with `dpkg -x`; nothing is installed into the host's /boot). qemu itself comes
# from `apt-get install qemu-system-x86`. TCG is used unless KOORD_VM_ACCEL=kvm.
#
# Exit codes: the command's own; 77 when the VM cannot be started here (no qemu and no way to
# install it, no kernel package): the message is on stderr; 78 when the VM started but reported
# no exit code (timeout, kernel panic).
set -euo pipefail

KERNEL_PACKAGE="linux-image-cloud-amd64"
BUSYBOX_PACKAGE="busybox-static"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-rs/v2-vm"

unavailable() {
    echo "v2-vm: unavailable: $*" >&2
    exit 77
}

ensure_qemu() {
    command -v qemu-system-x86_64 >/dev/null && return 0
    command -v apt-get >/dev/null || unavailable "qemu-system-x86_64 not found and no apt-get"
    [ "$(id -u)" = 0 ] || unavailable "qemu-system-x86_64 not found and not root to install it"
    echo "v2-vm: installing qemu-system-x86" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends qemu-system-x86 \
        >"$cache/apt-install.log" 2>&1 ||
        unavailable "apt-get install qemu-system-x86 failed (see $cache/apt-install.log)"
    command -v qemu-system-x86_64 >/dev/null || unavailable "qemu-system-x86_64 missing after install"
}

fetch_packages() {
    [ -s "$cache/vmlinuz" ] && [ -x "$cache/busybox" ] && return 0
    command -v apt-get >/dev/null || unavailable "no apt-get to download $KERNEL_PACKAGE"
    local dl
    dl="$(mktemp -d "$cache/download.XXXXXX")"
    # The meta package only depends on the versioned image package, which holds vmlinuz.
    local image
    image="$(apt-cache depends "$KERNEL_PACKAGE" 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }')"
    [ -n "$image" ] || { rm -rf "$dl"; unavailable "apt-cache knows no $KERNEL_PACKAGE"; }
    echo "v2-vm: downloading $image and $BUSYBOX_PACKAGE" >&2
    (cd "$dl" && apt-get download -q -o APT::Sandbox::User=root "$image" "$BUSYBOX_PACKAGE") \
        >"$cache/apt-download.log" 2>&1 ||
        { rm -rf "$dl"; unavailable "apt-get download failed (see $cache/apt-download.log)"; }
    mkdir -p "$dl/x"
    for deb in "$dl"/*.deb; do dpkg -x "$deb" "$dl/x"; done
    local vmlinuz
    vmlinuz="$(ls "$dl"/x/boot/vmlinuz-* | head -n1)"
    cp "$dl/x/bin/busybox" "$cache/busybox.tmp" && mv "$cache/busybox.tmp" "$cache/busybox"
    cp "$vmlinuz" "$cache/vmlinuz.tmp" && mv "$cache/vmlinuz.tmp" "$cache/vmlinuz"
    basename "$vmlinuz" | sed 's/^vmlinuz-//' >"$cache/kernel-release"
    rm -rf "$dl"
}

prepare() {
    mkdir -p "$cache"
    # Concurrent test binaries prepare the same cache: one at a time.
    exec 9>"$cache/.lock"
    flock 9
    ensure_qemu
    fetch_packages
    build_base_archive
    flock -u 9
}

# Copies BINARY and the libraries its dynamic loader needs into the root at their host paths.
copy_with_libs() {
    local root="$1" binary="$2"
    cp "$binary" "$root/work/"
    # A static binary or a script has no libraries: ldd fails, nothing to copy.
    local libs
    libs="$(ldd "$binary" 2>/dev/null | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }')" || true
    for lib in $libs; do
        if [ -e "$lib" ]; then cp -L --parents "$lib" "$root/"; fi
    done
}

# The part of the initramfs that never changes (busybox and its applet links), built once per
# cache: the kernel unpacks concatenated cpio archives in order.
build_base_archive() {
    [ -s "$cache/base.cpio" ] && [ "$cache/base.cpio" -nt "$cache/busybox" ] && return 0
    local base
    base="$(mktemp -d "$cache/base.XXXXXX")"
    mkdir -p "$base"/{bin,dev,proc,sys,tmp,run,work}
    cp "$cache/busybox" "$base/bin/busybox"
    for applet in $("$cache/busybox" --list); do
        [ -e "$base/bin/$applet" ] || ln -s busybox "$base/bin/$applet"
    done
    (cd "$base" && find . | "$cache/busybox" cpio -o -H newc 2>/dev/null) >"$cache/base.cpio.tmp"
    mv "$cache/base.cpio.tmp" "$cache/base.cpio"
    rm -rf "$base"
}

build_initramfs() {
    local work="$1" binary="$2"
    shift 2
    local root="$work/root"
    mkdir -p "$root/work"
    copy_with_libs "$root" "$binary"
    {
        printf 'cd /work\n'
        for word in ${KOORD_VM_ENV:-}; do printf 'export %q\n' "$word"; done
        printf 'exec ./%q' "$(basename "$binary")"
        for arg in "$@"; do printf ' %q' "$arg"; done
        printf '\n'
    } >"$root/work/cmd"
    cat >"$root/init" <<'EOF'
#!/bin/sh
export PATH=/bin HOME=/tmp KOORD_CGROUP_V2_VM=1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
echo "+cpu +cpuset +memory +io +pids" >/sys/fs/cgroup/cgroup.subtree_control
exec 3>/dev/ttyS1
echo "cgroup2 mount: $(grep cgroup2 /proc/mounts) (kernel $(uname -r))" >&3
sh /work/cmd >&3 2>&3 </dev/null
echo "KOORD_VM_EXIT=$?" >&3
sync
reboot -f
EOF
    chmod +x "$root/init"
    {
        cat "$cache/base.cpio"
        (cd "$root" && find . | "$cache/busybox" cpio -o -H newc 2>/dev/null)
    } >"$work/initramfs.cpio"
}

run() {
    [ $# -ge 1 ] || { echo "usage: $0 run BINARY [ARGS...]" >&2; exit 2; }
    local binary
    binary="$(realpath "$1")"
    shift
    [ -x "$binary" ] || { echo "v2-vm: $binary is not an executable" >&2; exit 2; }
    prepare
    # Global: the EXIT trap runs after this function returns.
    work="$(mktemp -d "${TMPDIR:-/tmp}/koord-v2-vm.XXXXXX")"
    if [ "${KOORD_VM_KEEP:-0}" = 1 ]; then
        echo "v2-vm: work directory $work" >&2
    else
        trap 'rm -rf "$work"' EXIT
    fi
    build_initramfs "$work" "$binary" "$@"
    # TCG by default: it needs nothing from the host, and KVM inside a VM (CI machines) often
    # fails in ways qemu cannot detect up front (a hung vCPU, a refused MSR).
    local accel="-accel ${KOORD_VM_ACCEL:-tcg}"
    : >"$work/out.log"
    local started=$SECONDS
    # --foreground keeps qemu in the caller's process group, so a caller killing the group
    # (a test runner's timeout) takes qemu down too.
    # shellcheck disable=SC2086
    # no_timer_check: under TCG on a busy host the kernel's IO-APIC timer check can fail and
    # panic the boot.
    timeout --foreground -k 5 "${KOORD_VM_TIMEOUT:-300}" qemu-system-x86_64 $accel \
        -m 1024 -smp 2 -no-reboot -display none -monitor none -nodefaults \
        -kernel "$cache/vmlinuz" -initrd "$work/initramfs.cpio" \
        -append "console=ttyS0 quiet loglevel=3 panic=-1 no_timer_check cgroup_no_v1=all rdinit=/init" \
        -serial "file:$work/console.log" -serial "file:$work/out.log" </dev/null ||
        echo "v2-vm: qemu exited with $?" >&2
    echo "v2-vm: VM ran $((SECONDS - started)) s ($accel)" >&2
    tr -d '\r' <"$work/out.log"
    local code
    code="$(tr -d '\r' <"$work/out.log" | sed -n 's/^KOORD_VM_EXIT=\([0-9]*\)$/\1/p' | tail -n1)"
    if [ -z "$code" ]; then
        echo "v2-vm: the VM reported no exit code; kernel console:" >&2
        tail -n 30 "$work/console.log" >&2 || true
        exit 78
    fi
    exit "$code"
}

case "${1:-}" in
    prepare) prepare; echo "$cache" ;;
    run) shift; run "$@" ;;
    *) echo "usage: $0 prepare | run BINARY [ARGS...]" >&2; exit 2 ;;
esac
