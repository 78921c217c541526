# Sourced by scripts/real-cluster.sh: `down`, also run at the start of `up` to clear leftovers
# of a failed run. Idempotent. Only touches what this script made: the processes it started
# (by PID file and by membership of its tracking cgroup), pods' processes and cgroups under
# /kubepods when its run directory exists, mounts under the run directory, and its netns.

# PIDs in cgroup directory $1 and every cgroup below it.
cgroup_pids() {
    [[ -d "$1" ]] || return 0
    find "$1" -name cgroup.procs -exec cat {} + 2>/dev/null || true
}

# Every cgroup v1 hierarchy's kubepods tree (the kubelet creates one per mounted controller).
kubepods_dirs() {
    local d
    for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
        [[ -d "$d" ]] && echo "$d"
    done
    return 0
}

# By cgroup membership only: the PID files in $RUN/pids are a record for people, and a stale
# one could name a process that is not ours.
our_pids() {
    cgroup_pids "$TRACK_CG"
    if [[ -f "$RUN/owner" ]]; then
        local d
        while read -r d; do cgroup_pids "$d"; done < <(kubepods_dirs)
    fi
}

kill_ours() {
    local pids sig round
    for sig in TERM TERM TERM TERM TERM KILL KILL KILL; do
        pids="$(our_pids | sort -un | grep -v "^$$\$" || true)"
        [[ -z "$pids" ]] && return 0
        for round in $pids; do kill -s "$sig" "$round" 2>/dev/null || true; done
        sleep 2
    done
    pids="$(our_pids | sort -un | grep -v "^$$\$" || true)"
    [[ -z "$pids" ]] || die "processes survived SIGKILL: $pids"
}

unmount_run_dir() {
    [[ -d "$RUN" ]] || return 0
    local target round
    for round in 1 2 3; do
        # Deepest first; mountinfo's 5th field is the mount point (octal escapes for spaces).
        local targets
        targets="$(awk -v run="$RUN" '$5 == run || index($5, run "/") == 1 {print $5}' /proc/self/mountinfo | sort -r)"
        [[ -z "$targets" ]] && return 0
        for target in $targets; do
            umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null || true
        done
    done
    targets="$(awk -v run="$RUN" '$5 == run || index($5, run "/") == 1 {print $5}' /proc/self/mountinfo)"
    [[ -z "$targets" ]] || die "mounts left under $RUN: $targets"
}

# rmdir a cgroup tree bottom-up, retrying while the kernel finishes tearing tasks down.
remove_cgroup_tree() {
    local dir="$1" round
    for round in 1 2 3 4 5 6 7 8 9 10; do
        [[ -d "$dir" ]] || return 0
        find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null || true
        [[ -d "$dir" ]] || return 0
        sleep 1
    done
    die "cgroup $dir could not be removed"
}

# containerd 1.7 puts each shim's socket at /run/containerd/s/<sha256 of address/ns/id>, whatever
# its configured root; remove ours (a killed shim leaves its socket behind).
remove_shim_sockets() {
    local tasks="$RUN/containerd/state/io.containerd.runtime.v2.task" ns id hash
    for ns in "$tasks"/*; do
        [[ -d "$ns" ]] || continue
        for id in "$ns"/*; do
            [[ -d "$id" ]] || continue
            hash="$(printf '%s' "$RUN/containerd/containerd.sock/$(basename "$ns")/$(basename "$id")" | sha256sum | cut -d' ' -f1)"
            rm -f "/run/containerd/s/$hash"
        done
    done
    if [[ -f "$RUN/created-run-containerd" ]]; then
        rmdir /run/containerd/s /run/containerd 2>/dev/null || true
    fi
}

cleanup_all() {
    kill_ours
    remove_shim_sockets
    unmount_run_dir
    if ip netns list 2>/dev/null | grep -qw "^$NS"; then
        ip netns del "$NS"
    fi
    if [[ -f "$RUN/owner" ]]; then
        local d
        while read -r d; do remove_cgroup_tree "$d"; done < <(kubepods_dirs)
    elif [[ -n "$(kubepods_dirs)" ]]; then
        log "warning: /kubepods cgroups exist but were not made by this script; left alone"
    fi
    remove_cgroup_tree "$TRACK_CG"
    # Only after every mount under it is gone (checked above) can the run directory be deleted.
    rm -rf "$RUN"
}
