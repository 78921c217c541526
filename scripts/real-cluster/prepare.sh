# Sourced by scripts/real-cluster.sh: fetches and builds everything the cluster runs, into the
# cache directory, keyed by package version so a second run (or a fresh clone on the same
# machine) reuses it.
#
# - Kubernetes v1.20.2 from Debian bookworm's source package `kubernetes` (full tree with vendor/),
#   built offline with golang-1.19-go. Kubernetes' build keeps its Go build cache in
#   src/_output/local/go/cache, so a rebuild after a change to the target list is incremental.
# - etcd-server, runc and containernetworking-plugins from bookworm, containerd 1.7 (with NRI)
#   from trixie: downloaded with `apt-get download` through a private apt configuration (its own
#   sources list, lists and archive cache under the cache directory) and unpacked with `dpkg -x`.
#   Nothing is installed system-wide, and the host's apt sources and pins are left alone.
# - Host packages that are needed as tools are installed with apt-get: the Go toolchain and
#   build tools, and iptables/conntrack for kube-proxy.

K8S_PKG_VERSION="1.20.5+really1.20.2-1.1+deb12u1"
CONTAINERD_VERSION="1.7.24~ds1-6+deb13u1"
RUNC_VERSION="1.1.5+ds1-1+deb12u1"
CNI_VERSION="1.1.1+ds1-3+b5"
ETCD_VERSION="3.4.23-4+b4"
# Kubernetes 1.20 vendors github.com/modern-go/reflect2 v1.0.1, whose map iteration crashes
# programs built with Go >= 1.18 (kube-apiserver dies with "fatal error: fault" in
# mapiterinit when it encodes a CRD's OpenAPI schema). Debian's 1.0.2 (the upstream fix, API
# compatible) replaces it before the build.
REFLECT2_VERSION="1.0.2-2"
K8S_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
HOST_PACKAGES=(golang-1.19-go rsync jq dpkg-dev iptables conntrack openssl gcc libc6-dev python3 util-linux iproute2)

k8s_dir="$CACHE/kubernetes/$K8S_PKG_VERSION"
K8S_BIN="$k8s_dir/bin-reflect2-$REFLECT2_VERSION"
DEBS_ROOT="$CACHE/debs/root-$CONTAINERD_VERSION-$RUNC_VERSION-$CNI_VERSION-$ETCD_VERSION"
APT_DIR="$CACHE/apt"

# apt-get with its own sources (bookworm deb + deb-src, trixie deb) and state; the host's
# /etc/apt is read only for keys and the dpkg status.
private_apt() {
    "$@" -o Dir::Etc::SourceList="$APT_DIR/sources.list" -o Dir::Etc::SourceParts="$APT_DIR/none" \
        -o Dir::Etc::Preferences="$APT_DIR/preferences" -o Dir::Etc::PreferencesParts="$APT_DIR/none" \
        -o Dir::State::Lists="$APT_DIR/lists" -o Dir::Cache="$APT_DIR/cache" \
        -o APT::Sandbox::User=root
}

private_apt_update() {
    [[ -f "$APT_DIR/updated" ]] && return 0
    mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial" "$APT_DIR/none"
    local key=/usr/share/keyrings/debian-archive-keyring.gpg
    cat >"$APT_DIR/sources.list" <<EOF
deb [signed-by=$key] http://deb.debian.org/debian bookworm main
deb-src [signed-by=$key] http://deb.debian.org/debian bookworm main
deb [signed-by=$key] http://deb.debian.org/debian-security bookworm-security main
deb [signed-by=$key] http://deb.debian.org/debian trixie main
EOF
    : >"$APT_DIR/preferences"
    log "apt-get update (private apt configuration in $APT_DIR)"
    private_apt apt-get -qq update
    touch "$APT_DIR/updated"
}

install_host_packages() {
    local missing=() p
    for p in "${HOST_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    log "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# with_cache_lock NAME FUNCTION: run FUNCTION holding $CACHE/NAME.lock, so two checkouts filling
# the shared cache for the first time at once (CI and a developer) take turns instead of
# downloading into and unpacking over the same directories.
with_cache_lock() {
    mkdir -p "$CACHE"
    local fd
    exec {fd}>"$CACHE/$1.lock"
    flock "$fd"
    "$2"
    exec {fd}>&-
}

debs_present() { [[ -x "$DEBS_ROOT/usr/bin/containerd" && -x "$DEBS_ROOT/usr/bin/etcd" ]]; }

# containerd, runc, CNI plugins and etcd unpacked under $DEBS_ROOT.
fetch_debs() {
    debs_present && return 0
    with_cache_lock debs fetch_debs_locked
}

fetch_debs_locked() {
    debs_present && return 0
    private_apt_update
    local dl="$CACHE/debs/download"
    mkdir -p "$dl"
    log "apt-get download containerd $CONTAINERD_VERSION, runc, containernetworking-plugins, etcd-server"
    (cd "$dl" && private_apt apt-get -qq download "containerd=$CONTAINERD_VERSION" "runc=$RUNC_VERSION" \
        "containernetworking-plugins=$CNI_VERSION" "etcd-server=$ETCD_VERSION")
    rm -rf "$DEBS_ROOT.tmp"
    local deb
    for deb in "$dl"/containerd_*.deb "$dl"/runc_*.deb "$dl"/containernetworking-plugins_*.deb "$dl"/etcd-server_*.deb; do
        dpkg -x "$deb" "$DEBS_ROOT.tmp"
    done
    rm -rf "$DEBS_ROOT" && mv "$DEBS_ROOT.tmp" "$DEBS_ROOT"
}

k8s_binaries_present() {
    local b
    for b in "${K8S_BINARIES[@]}"; do [[ -x "$K8S_BIN/$b" ]] || return 1; done
}

# The Kubernetes binaries, built from the Debian source package the way debian/rules does it.
build_kubernetes() {
    k8s_binaries_present && return 0
    with_cache_lock kubernetes build_kubernetes_locked
}

build_kubernetes_locked() {
    k8s_binaries_present && return 0
    local src="$k8s_dir/src"
    if [[ ! -f "$src/.koord-extracted" ]]; then
        private_apt_update
        log "apt-get source kubernetes=$K8S_PKG_VERSION"
        rm -rf "$src" && mkdir -p "$k8s_dir/dl"
        (cd "$k8s_dir/dl" && private_apt apt-get -qq source --download-only "kubernetes=$K8S_PKG_VERSION")
        dpkg-source -x "$k8s_dir/dl/kubernetes_${K8S_PKG_VERSION}.dsc" "$src" >/dev/null
        touch "$src/.koord-extracted"
    fi
    if [[ ! -f "$src/.koord-reflect2-$REFLECT2_VERSION" ]]; then
        private_apt_update
        log "replacing the vendored reflect2 with Debian's golang-github-modern-go-reflect2-dev $REFLECT2_VERSION"
        (cd "$k8s_dir/dl" && private_apt apt-get -qq download "golang-github-modern-go-reflect2-dev=$REFLECT2_VERSION")
        rm -rf "$k8s_dir/reflect2"
        dpkg -x "$k8s_dir"/dl/golang-github-modern-go-reflect2-dev_*.deb "$k8s_dir/reflect2"
        rsync -a --delete --exclude '*_test.go' --exclude test \
            "$k8s_dir/reflect2/usr/share/gocode/src/github.com/modern-go/reflect2/" \
            "$src/vendor/github.com/modern-go/reflect2/"
        touch "$src/.koord-reflect2-$REFLECT2_VERSION"
    fi
    mkdir -p "$src/.go/src/k8s.io"
    ln -sfn ../../.. "$src/.go/src/k8s.io/kubernetes"
    log "building Kubernetes ${K8S_BINARIES[*]} (log: $k8s_dir/build.log)"
    local start=$SECONDS targets=() b
    for b in "${K8S_BINARIES[@]}"; do targets+=("cmd/$b"); done
    if ! (cd "$src" &&
        GOPATH="$src/.go" PATH="/usr/lib/go-1.19/bin:$PATH" CGO_ENABLED=0 \
        HOME="$CACHE/go-home" \
        make WHAT="${targets[*]}") >"$k8s_dir/build.log" 2>&1; then
        tail -30 "$k8s_dir/build.log" >&2
        die "Kubernetes build failed (log: $k8s_dir/build.log)"
    fi
    mkdir -p "$K8S_BIN.tmp"
    for b in "${K8S_BINARIES[@]}"; do cp "$src/_output/local/go/bin/$b" "$K8S_BIN.tmp/$b"; done
    rm -rf "$K8S_BIN" && mv "$K8S_BIN.tmp" "$K8S_BIN"
    log "Kubernetes built in $((SECONDS - start)) s"
}

prepare_all() {
    install_host_packages
    fetch_debs
    build_kubernetes
}
