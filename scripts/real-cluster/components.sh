# Sourced by scripts/real-cluster.sh: the network namespace and the cluster's processes.

# start NAME CMD...: CMD in the cluster netns and the tracking cgroup, logging to $LOGS/NAME.log.
start() {
    local name="$1"
    shift
    (
        echo "$BASHPID" >"$TRACK_CG/cgroup.procs"
        exec nsenter --net="$NETNS_PATH" --mount="$MOUNTNS_PATH" "$@"
    ) </dev/null >>"$LOGS/$name.log" 2>&1 &
    echo "$!" >"$RUN/pids/$name"
    log "started $name (pid $!, log $LOGS/$name.log)"
}

# A mount namespace of the cluster's own, so the host's mount table and propagation stay as
# they are: the kubelet's volume mounts, containerd's rootfs and netns mounts live only there,
# and its root is made rshared so hostPath mounts with HostToContainer propagation (koordlet's
# /sys/fs/cgroup) are accepted. It is kept alive by a bind mount at $MOUNTNS_PATH; `down`
# unmounts that after the last process in it is gone, which drops every mount inside.
make_mountns() {
    local dir
    dir="$(dirname "$MOUNTNS_PATH")"
    mkdir -p "$dir"
    # The namespace file must sit on a private mount or it would be copied into itself.
    mount --bind "$dir" "$dir"
    mount --make-private "$dir"
    touch "$MOUNTNS_PATH"
    unshare --mount="$MOUNTNS_PATH" --propagation private true
    nsenter --mount="$MOUNTNS_PATH" mount --make-rshared /
}

make_netns() {
    ip netns add "$NS"
    ip -n "$NS" link set lo up
    ip -n "$NS" link add cni0 type bridge
    ip -n "$NS" addr add "$NODE_IP/24" dev cni0
    ip -n "$NS" link set cni0 up
    # Locally generated Service traffic needs a route before kube-proxy's DNAT rewrites it.
    ip -n "$NS" route add "$SERVICE_CIDR" dev cni0
    in_netns sysctl -qw net.ipv4.ip_forward=1
}

start_etcd() {
    mkdir -p "$RUN/etcd"
    start etcd "$DEBS_ROOT/usr/bin/etcd" --name default --data-dir "$RUN/etcd" \
        --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
        --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
        --initial-cluster default=http://127.0.0.1:2380 --listen-metrics-urls=
}

start_apiserver() {
    start kube-apiserver "$K8S_BIN/kube-apiserver" \
        --etcd-servers=http://127.0.0.1:2379 \
        --bind-address="$NODE_IP" --advertise-address="$NODE_IP" --secure-port=6443 --insecure-port=0 \
        --service-cluster-ip-range="$SERVICE_CIDR" --service-node-port-range=30000-32767 \
        --client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" \
        --tls-private-key-file="$PKI/apiserver.key" \
        --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
        --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
        --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=InternalIP \
        --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --api-audiences=https://kubernetes.default.svc.cluster.local \
        --authorization-mode=Node,RBAC --allow-privileged=true \
        --enable-admission-plugins=NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook \
        --enable-aggregator-routing=true --profiling=false
}

start_controller_manager() {
    start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
        --kubeconfig="$PKI/controller-manager.kubeconfig" \
        --authentication-kubeconfig="$PKI/controller-manager.kubeconfig" \
        --authorization-kubeconfig="$PKI/controller-manager.kubeconfig" \
        --bind-address=127.0.0.1 --port=0 --leader-elect=false \
        --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
        --use-service-account-credentials=true --service-cluster-ip-range="$SERVICE_CIDR" \
        --cluster-name=koord-real-cluster --controllers='*,-nodeipam,-cloud-node-lifecycle'
}

start_scheduler() {
    start kube-scheduler "$K8S_BIN/kube-scheduler" \
        --kubeconfig="$PKI/scheduler.kubeconfig" \
        --authentication-kubeconfig="$PKI/scheduler.kubeconfig" \
        --authorization-kubeconfig="$PKI/scheduler.kubeconfig" \
        --bind-address=127.0.0.1 --port=0 --leader-elect=false
}

# CAP_SYS_RESOURCE (bit 24) in our effective capabilities.
has_cap_sys_resource() {
    local eff
    eff="$(awk '/^CapEff:/ {print $2}' /proc/self/status)"
    (((16#$eff >> 24) & 1))
}

start_containerd() {
    local c="$RUN/containerd" restrict_oom=false
    has_cap_sys_resource || restrict_oom=true
    mkdir -p "$c" "$RUN/cni/net.d" "$RUN/nri/plugins" "$RUN/nri/conf.d"
    cat >"$RUN/cni/net.d/10-koord-rc.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "koord-rc",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$RUN/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "rangeStart": "10.213.0.10", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
    cat >"$c/config.toml" <<EOF
version = 2
root = "$c/root"
state = "$c/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = "$c/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$c/opt"
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "$RUN/nri/nri.sock"
  plugin_path = "$RUN/nri/plugins"
  plugin_config_path = "$RUN/nri/conf.d"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  netns_mounts_under_state_dir = true
  # Without CAP_SYS_RESOURCE (as in a container) runc cannot lower oom_score_adj below ours
  # (sandboxes ask for -998); clamp it instead of failing every sandbox.
  restrict_oom_score_adj = $restrict_oom
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$DEBS_ROOT/usr/sbin/runc"
        Root = "$RUN/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$DEBS_ROOT/usr/lib/cni"
    conf_dir = "$RUN/cni/net.d"
EOF
    # The shim is looked up in PATH.
    start containerd env PATH="$DEBS_ROOT/usr/bin:$DEBS_ROOT/usr/sbin:$PATH" \
        "$DEBS_ROOT/usr/bin/containerd" --config "$c/config.toml"
}

start_kubelet() {
    local k="$RUN/kubelet"
    mkdir -p "$k/root"
    cat >"$k/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
tlsCertFile: "$PKI/kubelet-serving.crt"
tlsPrivateKeyFile: "$PKI/kubelet-serving.key"
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: /
failSwapOn: false
clusterDomain: cluster.local
resolvConf: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"}
EOF
    start kubelet "$K8S_BIN/kubelet" --config="$k/config.yaml" \
        --kubeconfig="$PKI/kubelet.kubeconfig" --root-dir="$k/root" --cert-dir="$k/pki" \
        --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" \
        --container-runtime=remote --container-runtime-endpoint="unix://$RUN/containerd/containerd.sock" \
        --pod-infra-container-image="$PAUSE_IMAGE" --v=1
}

start_kube_proxy() {
    start kube-proxy "$K8S_BIN/kube-proxy" --kubeconfig="$PKI/kube-proxy.kubeconfig" \
        --hostname-override="$NODE_NAME" --proxy-mode=iptables --cluster-cidr="$POD_CIDR" \
        --bind-address="$NODE_IP" --healthz-bind-address=127.0.0.1:10256 \
        --metrics-bind-address=127.0.0.1:10249 --conntrack-max-per-core=0 \
        --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0
}

# Checks that hold on any cluster with the chart installed, through the real API server.
smoke_checks() {
    log "checking the node, the chart's pods and the objects the manager writes"
    kctl wait --for=condition=Ready "node/$NODE_NAME" --timeout=60s >/dev/null
    # Every workload rolled out: right after an upgrade the old ReplicaSet's pods are still
    # terminating, which waiting on every pod of the namespace would wait on (and fail).
    wait_rollouts >/dev/null || die "koordinator workloads not rolled out"
    wait_until 120 "NodeSLO $NODE_NAME" kctl get nodeslo "$NODE_NAME"
    local owner
    owner="$(kctl get nodeslo "$NODE_NAME" -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}')"
    [[ "$owner" == "Node/$NODE_NAME" ]] || die "NodeSLO $NODE_NAME is owned by '$owner', not Node/$NODE_NAME"
    wait_until 180 "NodeMetric $NODE_NAME status" \
        bash -c "[[ -n \"\$(nsenter --net=$NETNS_PATH $K8S_BIN/kubectl --kubeconfig $OUT/kubeconfig get nodemetric $NODE_NAME -o jsonpath='{.status.updateTime}')\" ]]"
    wait_until 180 "kubernetes.io/batch-cpu on node $NODE_NAME" \
        bash -c "[[ -n \"\$(nsenter --net=$NETNS_PATH $K8S_BIN/kubectl --kubeconfig $OUT/kubeconfig get node $NODE_NAME -o jsonpath='{.status.allocatable.kubernetes\\.io/batch-cpu}')\" ]]"
    # A broken slo-controller-config key is refused by koord-webhook through the API server.
    local out
    if out="$(kctl -n "$RELEASE_NS" patch configmap slo-controller-config --dry-run=server --type merge \
        -p '{"data":{"colocation-config":"{\"enable\": \"notabool\"}"}}' 2>&1)"; then
        die "a broken colocation-config was accepted: $out"
    fi
    [[ "$out" == *'denied the request: colocation-config: enable: invalid type'* ]] ||
        die "unexpected answer to a broken colocation-config: $out"
    log "smoke checks passed"
}
