#!/usr/bin/env bash
# Runs the scenario suite on a kind cluster: creates it from kind-config.yaml, loads the locally
# built image archives (scripts/build-images.sh) with `kind load image-archive`, installs the
# chart with those images and runs `cargo test -p koord-e2e --test scenarios` against it.
# The cluster is deleted afterwards unless KEEP_CLUSTER=1. Prints `skipped: kind not found`
# and exits 0 where kind is not installed.
set -euo pipefail
cd "$(dirname "$0")/../.."

command -v kind >/dev/null || { echo "skipped: kind not found"; exit 0; }
command -v kubectl >/dev/null || { echo "error: kubectl not found" >&2; exit 1; }
name=koord-e2e
kubeconfig="$PWD/target/kind/kubeconfig"
mkdir -p target/kind
helm="${HELM:-}"
[[ -n "$helm" ]] || helm="$(scripts/install-helm.sh)"
tag="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
prefix=localhost/koordinator-rs

kind create cluster --name "$name" --config e2e/kind/kind-config.yaml --kubeconfig "$kubeconfig" --wait 5m
[[ "${KEEP_CLUSTER:-0}" == 1 ]] || trap 'kind delete cluster --name "$name" --kubeconfig "$kubeconfig"' EXIT

scripts/build-images.sh --out target/kind/images --repository "$prefix" --tag "$tag"
for image in koord-manager koord-webhook koordlet; do
    kind load image-archive "target/kind/images/$image.tar" --name "$name"
done

set_args=()
for c in manager webhook koordlet; do
    image=koord-$c
    [[ $c == koordlet ]] && image=koordlet
    set_args+=(--set "$c.image.repository=$prefix/$image" --set "$c.image.tag=$tag"
        --set "$c.image.pullPolicy=Never")
done
"$helm" --kubeconfig "$kubeconfig" upgrade --install koordinator charts/koordinator \
    -n koordinator-system --create-namespace "${set_args[@]}" --wait --timeout 5m
kubectl --kubeconfig "$kubeconfig" -n koordinator-system rollout status daemonset/koordlet --timeout=180s
kubectl --kubeconfig "$kubeconfig" -n koordinator-system get pods -o wide

KOORD_E2E_KUBECONFIG="$kubeconfig" cargo test --locked -p koord-e2e --test scenarios -- --test-threads=1
