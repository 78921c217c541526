#!/usr/bin/env bash
# A real single-node Kubernetes v1.20 cluster on this machine, built from Debian packages, to run
# koordinator-rs' chart and scenario suite against a real API server, kubelet and container runtime.
#
#   scripts/real-cluster.sh prepare   only fetch and build (cached) what the cluster runs
#   scripts/real-cluster.sh up        prepare, start the cluster, wait for the node
#   scripts/real-cluster.sh install   build + import our images, helm install charts/koordinator
#                                     (KOORD_IMAGE_PROFILE=dev: images of the debug binaries)
#   scripts/real-cluster.sh test      run the scenario suite against the cluster
#   scripts/real-cluster.sh down      stop everything, remove every mount, netns and cgroup
#   scripts/real-cluster.sh restart COMPONENT [DOWN_SECONDS]   stop etcd, kube-apiserver, kubelet
#                                     or containerd, keep it down DOWN_SECONDS, start it again
#   scripts/real-cluster.sh upstream-release  replace our release with an upstream-shaped one
#   scripts/real-cluster.sh take-over         scripts/migrate-from-upstream.sh on this cluster
#   scripts/real-cluster.sh migration-test    the migration scenario (uses the two above; run last)
#   scripts/real-cluster.sh kubectl ARGS...   kubectl against the cluster (inside its netns)
#   scripts/real-cluster.sh exec CMD ARGS...  any command inside the cluster's netns
#
# What runs: etcd 3.4 (bookworm etcd-server), kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet and kube-proxy v1.20.2 (built from bookworm's `kubernetes` source
# package), containerd 1.7 with NRI (trixie) and runc (bookworm) with the CNI bridge plugin.
# Binaries are cached under ${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-rs, keyed by the
# package versions (scripts/real-cluster/prepare.sh).
#
# Network: the whole cluster lives in ONE network namespace this script creates (`koord-rc`):
# every component is started with `nsenter --net`. Inside it, loopback
# carries etcd and the components' local ports, and a bridge `cni0` holds the node address
# 10.213.0.1/24; pods get veths on that bridge (CNI bridge + host-local, 10.213.0.0/24),
# Services are 10.213.1.0/24 and kube-proxy (iptables mode) implements them inside the netns.
# The netns has no link to the host or anything else, so nothing can leave the machine and
# no address outside loopback and this namespace is ever contacted. Clients (kubectl, helm,
# the scenario suite) run in the netns too: `real-cluster.sh kubectl ...` / `exec ...`.
# kube-apiserver runs with --enable-aggregator-routing so it calls the webhook at its endpoint.
#
# Mounts: the components also share one mount namespace of their own (see make_mountns), so
# the kubelet's and containerd's mounts never appear in the host's mount table; cgroups are the
# host's (cgroup v1, cgroupfs driver, the kubelet's tree at /kubepods).
#
# State: $KOORD_RC_RUN_DIR (default /run/koord-real-cluster) holds certificates, PIDs, etcd,
# containerd and kubelet data; logs go to target/real-cluster/logs (kept after `down`), the
# admin kubeconfig to target/real-cluster/kubeconfig. Every process is started in the cgroup
# pids:/koord-real-cluster, so `down` finds even processes the components spawned (containerd
# shims); the kubelet's /kubepods trees are removed by `down` only when this script's run
# directory says it started that kubelet. One cluster per machine; needs root and cgroup v1.
#
# Sharing the machine: the checkout that ran `up` owns the cluster ($CACHE/real-cluster.owner).
# `up` from another checkout waits while that cluster runs (KOORD_RC_WAIT_SECONDS, default 3600)
# instead of tearing it down; `down` from another checkout leaves it alone; `install` and `test`
# refuse it. A cluster whose processes are gone belongs to nobody.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-rs"
RUN="${KOORD_RC_RUN_DIR:-/run/koord-real-cluster}"
OUT="$REPO/target/real-cluster"
LOGS="$OUT/logs"
PKI="$RUN/pki"
NS=koord-rc
NETNS_PATH=/run/netns/$NS
MOUNTNS_PATH="$RUN/ns/mnt"
NODE_NAME=koord-node
NODE_IP=10.213.0.1
POD_CIDR=10.213.0.0/24
SERVICE_CIDR=10.213.1.0/24
API_SERVICE_IP=10.213.1.1
# koord-scheduler-extender's Service (the cluster has no DNS; see cmd_install)
EXTENDER_SERVICE_IP=10.213.1.200
TRACK_CG=/sys/fs/cgroup/pids/koord-real-cluster
IMAGE_PREFIX=localhost/koordinator-rs
PAUSE_IMAGE=$IMAGE_PREFIX/pause:3.4
RELEASE=koordinator
RELEASE_NS=koordinator-system

log() { echo "real-cluster: $*" >&2; }
die() { echo "real-cluster: error: $*" >&2; exit 1; }

# shellcheck source=real-cluster/prepare.sh
source "$REPO/scripts/real-cluster/prepare.sh"
# shellcheck source=real-cluster/certs.sh
source "$REPO/scripts/real-cluster/certs.sh"
# shellcheck source=real-cluster/components.sh
source "$REPO/scripts/real-cluster/components.sh"
# shellcheck source=real-cluster/cleanup.sh
source "$REPO/scripts/real-cluster/cleanup.sh"

in_netns() { nsenter --net="$NETNS_PATH" "$@"; }
# in_netns_within N COMMAND...: in_netns, stopped (its whole process group) after N minutes with
# a clear error, so a hung scenario fails the run instead of holding it until CI's hard limit.
in_netns_within() {
    local minutes="$1" status=0
    shift
    timeout --kill-after=30s "${minutes}m" nsenter --net="$NETNS_PATH" "$@" || status=$?
    if ((status == 124 || status == 137)); then
        echo "error: still running after ${minutes} minutes, stopped: $*" >&2
    fi
    return "$status"
}
kctl() { in_netns "$K8S_BIN/kubectl" --kubeconfig "$OUT/kubeconfig" "$@"; }

# Why this machine cannot run the cluster, or nothing when it can.
unsupported_reason() {
    [[ $(id -u) == 0 ]] || { echo "not root"; return; }
    [[ -d /sys/fs/cgroup/cpu && -w /sys/fs/cgroup/cpu/cpu.shares ]] || { echo "no writable cgroup v1 cpu hierarchy"; return; }
    [[ -d /sys/fs/cgroup/pids && -w /sys/fs/cgroup/pids ]] || { echo "no writable cgroup v1 pids hierarchy"; return; }
    command -v nsenter >/dev/null && command -v ip >/dev/null || { echo "nsenter or ip missing"; return; }
    command -v apt-get >/dev/null || { echo "not a Debian system (apt-get missing)"; return; }
}

OWNER_FILE="$CACHE/real-cluster.owner"

# The checkout that owns the running cluster, or nothing when no cluster runs.
cluster_owner() {
    [[ -n "$(cgroup_pids "$TRACK_CG")" ]] || return 0
    cat "$OWNER_FILE" 2>/dev/null || echo "an unknown checkout"
}

# Wait until no other checkout runs a cluster, then record this one as the owner.
claim_cluster() {
    local limit="${KOORD_RC_WAIT_SECONDS:-3600}" start=$SECONDS owner
    mkdir -p "$CACHE"
    while true; do
        exec 9>"$CACHE/real-cluster.lock"
        flock 9
        owner="$(cluster_owner)"
        if [[ -z "$owner" || "$owner" == "$REPO" ]]; then
            echo "$REPO" >"$OWNER_FILE"
            exec 9>&-
            return 0
        fi
        exec 9>&-
        ((SECONDS - start < limit)) || die "the cluster of $owner still runs after ${limit}s; not touching it"
        log "the cluster of $owner runs; waiting for its 'down' ($((SECONDS - start)) s)"
        sleep 15
    done
}

# Die unless this checkout owns the running cluster.
require_own_cluster() {
    local owner
    owner="$(cluster_owner)"
    [[ -z "$owner" || "$owner" == "$REPO" ]] || die "the running cluster belongs to $owner"
    [[ -f "$OUT/kubeconfig" && -f "$RUN/owner" ]] || die "no cluster (run '$0 up' first)"
}

cmd_down() {
    local owner
    owner="$(cluster_owner)"
    if [[ -n "$owner" && "$owner" != "$REPO" ]]; then
        log "down: the running cluster belongs to $owner; left alone"
        return 0
    fi
    cleanup_all
    rm -f "$OWNER_FILE"
    log "down: nothing of the cluster is left"
}

# wait_until SECONDS WHAT CMD...: retry CMD every second.
wait_until() {
    local timeout="$1" what="$2" start=$SECONDS
    shift 2
    until "$@" >/dev/null 2>&1; do
        ((SECONDS - start < timeout)) || die "timed out after ${timeout}s waiting for $what (logs: $LOGS)"
        sleep 1
    done
}

cmd_up() {
    local reason
    reason="$(unsupported_reason)"
    [[ -z "$reason" ]] || die "$reason"
    claim_cluster
    cleanup_all
    local start=$SECONDS
    prepare_all
    mkdir -p "$RUN/pids" "$LOGS" "$OUT"
    echo "$$" >"$RUN/owner"
    rm -f "$OUT/kubeconfig" "$LOGS"/*.log
    mkdir -p "$TRACK_CG"

    log "building the pause image"
    scripts/build-images.sh --pause-only --pause-src "$k8s_dir/src/build/pause/linux/pause.c" \
        --out "$OUT/images" --repository "$IMAGE_PREFIX" >/dev/null

    make_netns
    make_mountns
    make_pki
    cp "$PKI/admin.kubeconfig" "$OUT/kubeconfig"
    start_etcd
    wait_until 60 etcd in_netns curl -sf http://127.0.0.1:2379/health
    start_apiserver
    wait_until 120 kube-apiserver kctl get --raw /readyz
    start_controller_manager
    start_scheduler
    [[ -e /run/containerd ]] || touch "$RUN/created-run-containerd"
    start_containerd
    wait_until 60 containerd "$DEBS_ROOT/usr/bin/ctr" --address "$RUN/containerd/containerd.sock" version
    "$DEBS_ROOT/usr/bin/ctr" --address "$RUN/containerd/containerd.sock" -n k8s.io images import \
        "$OUT/images/pause.tar" >/dev/null
    start_kubelet
    start_kube_proxy
    wait_until 180 "node $NODE_NAME" kctl get node "$NODE_NAME"
    kctl wait --for=condition=Ready "node/$NODE_NAME" --timeout=180s >/dev/null ||
        die "node $NODE_NAME not Ready (logs: $LOGS)"
    # The default ServiceAccount must exist before anything creates pods.
    wait_until 60 "default ServiceAccount" kctl -n default get serviceaccount default
    log "cluster up in $((SECONDS - start)) s; kubeconfig: $OUT/kubeconfig (use: $0 kubectl get nodes)"
}

# image_tag: the tag our images are built with (the workspace version).
image_tag() { sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml; }

# chart_set_args: the `--set` arguments that point charts/koordinator at this cluster's images
# and set-up, one per line.
chart_set_args() {
    local tag c image
    tag="$(image_tag)"
    # koord-scheduler: the cluster's own kube-scheduler build, tagged with its version.
    printf '%s\n' --set "scheduler.image.repository=$IMAGE_PREFIX/kube-scheduler" \
        --set "scheduler.image.tag=$("$K8S_BIN/kube-scheduler" --version | awk '{print $2}')" \
        --set "scheduler.image.pullPolicy=Never" \
        --set "schedulerExtender.clusterIP=$EXTENDER_SERVICE_IP" \
        --set "koordlet.nri.socketDir=$RUN/nri" \
        --set "koordlet.featureGates.MemoryEvict=true"
    # (no cluster DNS here: the extender has a fixed Service IP the scheduler pods reach by
    # hostAliases; koordlet's runtime hooks: this cluster's containerd serves NRI in its run dir;
    # MemoryEvict for the opted-in eviction scenario: it acts only on labelled pods)
    for c in manager webhook koordlet schedulerExtender; do
        image=koord-$c
        [[ $c == koordlet ]] && image=koordlet
        [[ $c == schedulerExtender ]] && image=koord-scheduler-extender
        printf '%s\n' --set "$c.image.repository=$IMAGE_PREFIX/$image" --set "$c.image.tag=$tag" \
            --set "$c.image.pullPolicy=Never"
    done
}

cmd_install() {
    require_own_cluster
    local start=$SECONDS helm tag
    helm="$(helm_bin)"
    tag="$(image_tag)"
    log "building and importing the koord-manager, koord-webhook, koord-scheduler-extender, koordlet, kube-scheduler and koord-e2e-busy images"
    CTR="$DEBS_ROOT/usr/bin/ctr" CTR_ADDRESS="$RUN/containerd/containerd.sock" \
        scripts/build-images.sh --out "$OUT/images" --repository "$IMAGE_PREFIX" --tag "$tag" --import \
        --profile "${KOORD_IMAGE_PROFILE:-release}" --e2e-busy --kube-scheduler "$K8S_BIN/kube-scheduler"
    local set=()
    mapfile -t set < <(chart_set_args)
    local existed=false
    in_netns "$helm" --kubeconfig "$OUT/kubeconfig" status "$RELEASE" -n "$RELEASE_NS" >/dev/null 2>&1 &&
        existed=true
    log "helm install $RELEASE charts/koordinator -n $RELEASE_NS"
    in_netns "$helm" --kubeconfig "$OUT/kubeconfig" upgrade --install "$RELEASE" charts/koordinator \
        -n "$RELEASE_NS" --create-namespace "${set[@]}" --wait --timeout 5m ||
        { kctl -n "$RELEASE_NS" get pods -o wide >&2 || true; die "helm install failed"; }
    if $existed; then
        # Same tags, new images: pods only pick them up when restarted.
        log "release existed: restarting its workloads onto the rebuilt images"
        kctl -n "$RELEASE_NS" rollout restart deployment,daemonset >/dev/null
    fi
    wait_rollouts
    log "installed in $((SECONDS - start)) s"
}

wait_rollouts() {
    kctl -n "$RELEASE_NS" rollout status deployment/koord-manager --timeout=180s
    kctl -n "$RELEASE_NS" rollout status deployment/koord-webhook --timeout=180s
    kctl -n "$RELEASE_NS" rollout status daemonset/koordlet --timeout=180s
    kctl -n "$RELEASE_NS" rollout status deployment/koord-scheduler-extender --timeout=180s
    kctl -n "$RELEASE_NS" rollout status deployment/koord-scheduler --timeout=180s
    kctl -n "$RELEASE_NS" get pods -o wide
}

helm_bin() {
    [[ -n "${HELM:-}" ]] && { echo "$HELM"; return; }
    scripts/install-helm.sh || die "helm could not be installed"
}

# upstream-release: replace our release with one laid out as upstream Koordinator's chart lays
# out its own (e2e/fixtures/upstream-release: release `koordinator` in `default`, templated
# Namespace and CRDs without koordinator-rs' additions, upstream's command lines), running our
# images (imported by `install`). The migration scenario starts from here.
cmd_upstream_release() {
    require_own_cluster
    local helm chart="$OUT/upstream-release" f tag
    helm="$(helm_bin)"
    tag="$(image_tag)"
    if in_netns "$helm" --kubeconfig "$OUT/kubeconfig" status "$RELEASE" -n "$RELEASE_NS" >/dev/null 2>&1; then
        log "uninstalling $RELEASE from $RELEASE_NS"
        in_netns "$helm" --kubeconfig "$OUT/kubeconfig" uninstall "$RELEASE" -n "$RELEASE_NS" --wait --timeout 3m
    fi
    in_netns "$helm" --kubeconfig "$OUT/kubeconfig" uninstall "$RELEASE" -n default --wait --timeout 3m \
        >/dev/null 2>&1 || true
    log "deleting namespace $RELEASE_NS and the CRDs (and with them every custom resource)"
    kctl delete namespace "$RELEASE_NS" --ignore-not-found --wait=true --timeout=180s
    kctl delete -f charts/koordinator/crds/ --ignore-not-found --wait=true --timeout=120s
    rm -rf "$chart"
    cp -r e2e/fixtures/upstream-release "$chart"
    # Upstream's CRDs are templates of its chart (so uninstalling the release deletes them) and
    # lack koordinator-rs' additions: ours with cpuBurstStrategy.podStrategies cut out.
    for f in charts/koordinator/crds/*.yaml; do
        awk '
            skip && match($0, /^ */) && RLENGTH > indent { next }
            { skip = 0 }
            /^ *podStrategies:$/ { match($0, /^ */); indent = RLENGTH; skip = 1; next }
            { print }
        ' "$f" >"$chart/templates/crd-$(basename "$f")"
    done
    grep -q podStrategies "$chart"/templates/crd-*.yaml && die "podStrategies left in the upstream-shaped CRDs"
    log "helm install $RELEASE (upstream-shaped) -n default"
    in_netns "$helm" --kubeconfig "$OUT/kubeconfig" install "$RELEASE" "$chart" -n default \
        --set "manager.image=$IMAGE_PREFIX/koord-manager:$tag" --set "koordlet.image=$IMAGE_PREFIX/koordlet:$tag" \
        --wait --timeout 5m ||
        { kctl -n "$RELEASE_NS" get pods -o wide >&2 || true; die "upstream-shaped release failed to install"; }
    kctl -n "$RELEASE_NS" get pods -o wide
}

# take-over: scripts/migrate-from-upstream.sh on this cluster, with the image settings of
# `install`; the backup goes to target/real-cluster/migration-backup.
cmd_take_over() {
    require_own_cluster
    local helm set=()
    helm="$(helm_bin)"
    mapfile -t set < <(chart_set_args)
    rm -rf "$OUT/migration-backup"
    in_netns env HELM="$helm" KUBECTL="$K8S_BIN/kubectl" KUBECONFIG="$OUT/kubeconfig" \
        scripts/migrate-from-upstream.sh --yes --backup-dir "$OUT/migration-backup" -- "${set[@]}"
    wait_rollouts
}

# migration-test: the migration scenario (e2e/tests/scenarios/migration.rs), which calls
# upstream-release and take-over itself. It replaces the installed release: run it last.
cmd_migration_test() {
    require_own_cluster
    local start=$SECONDS
    cargo test --locked -p koord-e2e --test scenarios --no-run
    in_netns_within "${KOORD_MIGRATION_TEST_MINUTES:-15}" env KOORD_E2E_KUBECONFIG="$OUT/kubeconfig" PATH="$K8S_BIN:$PATH" \
        KOORD_E2E_MIGRATION="$REPO/scripts/real-cluster.sh" \
        cargo test --offline --locked -p koord-e2e --test scenarios -- --test-threads=1 --nocapture migration
    log "migration test done in $((SECONDS - start)) s"
}

node_ready() {
    [[ "$(kctl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" == True ]]
}

# restart COMPONENT [DOWN_SECONDS]: stop one of the cluster's processes (SIGTERM), leave it down
# for DOWN_SECONDS (default 0), start it again and wait until it serves: what an upgrade, a crash
# or an outage does while pods run. containerd's shims keep the containers; the kubelet keeps
# its pods; the other components (and koordlet) reconnect by themselves.
cmd_restart() {
    require_own_cluster
    local component="${1:-}" down="${2:-0}" pid start=$SECONDS
    case "$component" in
        etcd | kube-apiserver | kubelet | containerd) ;;
        *) die "restart: one of etcd, kube-apiserver, kubelet, containerd (got '$component')" ;;
    esac
    [[ "$down" =~ ^[0-9]+$ ]] || die "restart: DOWN_SECONDS must be a whole number (got '$down')"
    pid="$(cat "$RUN/pids/$component" 2>/dev/null || true)"
    if [[ -n "$pid" ]] && grep -qx "$pid" <(cgroup_pids "$TRACK_CG"); then
        # SIGTERM, and SIGKILL after 20 s: kube-apiserver drains its watches for a minute.
        kill -TERM "$pid"
        local waited=0
        while kill -0 "$pid" 2>/dev/null && ((waited < 20)); do
            sleep 1
            waited=$((waited + 1))
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait_until 30 "$component (pid $pid) to exit" bash -c "! kill -0 $pid"
    else
        log "restart: $component was not running; starting it"
        pid=none
    fi
    sleep "$down"
    case "$component" in
        etcd)
            start_etcd
            wait_until 60 etcd in_netns curl -sf http://127.0.0.1:2379/health
            ;;
        kube-apiserver)
            start_apiserver
            wait_until 120 kube-apiserver kctl get --raw /readyz
            ;;
        kubelet)
            start_kubelet
            wait_until 120 "node $NODE_NAME Ready" node_ready
            ;;
        containerd)
            start_containerd
            wait_until 60 containerd "$DEBS_ROOT/usr/bin/ctr" --address "$RUN/containerd/containerd.sock" version
            ;;
    esac
    log "$component restarted in $((SECONDS - start)) s (down ${down} s; was pid $pid, now $(cat "$RUN/pids/$component"))"
}

cmd_test() {
    require_own_cluster
    local start=$SECONDS
    smoke_checks
    if [[ -f e2e/tests/scenarios.rs ]]; then
        # Compile outside the netns (the registry may be needed), run inside it, offline.
        cargo test --locked -p koord-e2e --test scenarios --no-run
        in_netns_within "${KOORD_REAL_CLUSTER_TEST_MINUTES:-30}" env KOORD_E2E_KUBECONFIG="$OUT/kubeconfig" PATH="$K8S_BIN:$PATH" \
            KOORD_E2E_RESTART="$REPO/scripts/real-cluster.sh restart" \
            cargo test --offline --locked -p koord-e2e --test scenarios -- --test-threads=1 --nocapture
    else
        log "e2e/tests/scenarios.rs not present; ran the kubectl checks only"
    fi
    log "tests done in $((SECONDS - start)) s"
}

case "${1:-}" in
    prepare) prepare_all ;;
    up) cmd_up ;;
    install) cmd_install ;;
    test) cmd_test ;;
    down) cmd_down ;;
    restart) shift; cmd_restart "$@" ;;
    upstream-release) cmd_upstream_release ;;
    take-over) cmd_take_over ;;
    migration-test) cmd_migration_test ;;
    kubectl) shift; kctl "$@" ;;
    exec) shift; in_netns env KUBECONFIG="$OUT/kubeconfig" PATH="$K8S_BIN:$PATH" "$@" ;;
    unsupported-reason) unsupported_reason ;;
    *) sed -n '2,17p' "$0" >&2; exit 2 ;;
esac
