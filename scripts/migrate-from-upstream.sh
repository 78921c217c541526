#!/usr/bin/env bash
# Replace an upstream Koordinator Helm release with koordinator-rs' chart, keeping every custom
# resource (NodeSLO, NodeMetric, ClusterColocationProfile, NodeResourceTopology), their CRDs, the
# namespace, the slo-controller-config ConfigMap and the koord-* PriorityClasses.
# docs/migration.md explains each step and how to do them by hand.
#
#   scripts/migrate-from-upstream.sh [OPTIONS] [-- HELM_INSTALL_ARGS...]
#
#   --release NAME             the upstream release (default: koordinator)
#   --release-namespace NS     the namespace Helm keeps that release in (default: default, since
#                              upstream's install command has no -n)
#   --namespace NS             where upstream installed its components (installation.namespace,
#                              default: koordinator-system); the new release goes there too
#   --new-release NAME         the new release's name (default: koordinator)
#   --chart PATH               koordinator-rs' chart (default: charts/koordinator of this checkout)
#   --backup-dir DIR           where the backup goes (default: ./koordinator-backup-<time>)
#   --dry-run                  back up and print the plan; change nothing
#   --yes                      do not ask for confirmation
#
# Everything after `--` goes to `helm install` (images, values). The slo-controller-config
# ConfigMap is kept as it is and not taken into the new release (`--set sloConfig.create=false`
# is passed first; pass `--set sloConfig.create=true` after `--` to have the chart own it).
# Needs helm 3.2+ and kubectl with cluster-admin rights; HELM and KUBECTL override the binaries.
# Exit status: 0 done, 1 a step failed (the backup and this output say where), 2 bad usage.
set -euo pipefail

HELM="${HELM:-helm}"
KUBECTL="${KUBECTL:-kubectl}"
release=koordinator
release_ns=default
namespace=koordinator-system
new_release=koordinator
chart="$(cd "$(dirname "$0")/.." && pwd)/charts/koordinator"
backup=""
dry_run=false
assume_yes=false
helm_args=()

say() { echo "migrate: $*" >&2; }
die() { echo "migrate: error: $*" >&2; exit 1; }
usage() { sed -n '2,25p' "$0" >&2; exit 2; }

while (($#)); do
    case "$1" in
        --release) release="${2:?}"; shift 2 ;;
        --release-namespace) release_ns="${2:?}"; shift 2 ;;
        --namespace) namespace="${2:?}"; shift 2 ;;
        --new-release) new_release="${2:?}"; shift 2 ;;
        --chart) chart="${2:?}"; shift 2 ;;
        --backup-dir) backup="${2:?}"; shift 2 ;;
        --dry-run) dry_run=true; shift ;;
        --yes) assume_yes=true; shift ;;
        --) shift; helm_args=("$@"); break ;;
        -h | --help) usage ;;
        *) echo "migrate: unknown option '$1'" >&2; usage ;;
    esac
done
[[ -n "$backup" ]] || backup="koordinator-backup-$(date +%Y%m%d-%H%M%S)"

# The custom resources that must survive, by the plural.group kubectl knows them as.
RESOURCES=(
    nodeslos.slo.koordinator.sh
    nodemetrics.slo.koordinator.sh
    clustercolocationprofiles.config.koordinator.sh
    noderesourcetopologies.topology.node.k8s.io
)

k() { "$KUBECTL" "$@"; }

# count RESOURCE: how many objects of a custom resource exist (0 when its CRD does not).
count() {
    k get crd "$1" >/dev/null 2>&1 || { echo 0; return; }
    k get "$1" --all-namespaces -o name | wc -l | tr -d ' '
}

# 1. Preconditions.
command -v "$HELM" >/dev/null || die "helm not found (set HELM)"
command -v "$KUBECTL" >/dev/null || die "kubectl not found (set KUBECTL)"
[[ -f "$chart/Chart.yaml" ]] || die "no chart at $chart (set --chart)"
"$HELM" status "$release" -n "$release_ns" >/dev/null 2>&1 ||
    die "no Helm release '$release' in namespace '$release_ns' (set --release / --release-namespace)"
if "$HELM" status "$new_release" -n "$namespace" >/dev/null 2>&1 &&
    ! [[ "$new_release" == "$release" && "$namespace" == "$release_ns" ]]; then
    die "a release '$new_release' already exists in '$namespace'"
fi

# 2. Back up everything that must survive, and the release itself.
mkdir -p "$backup/objects"
backup="$(cd "$backup" && pwd)"
say "backing up to $backup"
"$HELM" get manifest "$release" -n "$release_ns" >"$backup/upstream-manifest.yaml"
"$HELM" get values "$release" -n "$release_ns" --all -o yaml >"$backup/upstream-values.yaml"
declare -A before
for r in "${RESOURCES[@]}"; do
    before[$r]="$(count "$r")"
    if [[ "${before[$r]}" != 0 ]]; then
        k get "$r" --all-namespaces -o yaml >"$backup/$r.yaml"
    fi
done
k get configmap slo-controller-config -n "$namespace" -o yaml >"$backup/slo-controller-config.yaml" 2>/dev/null ||
    say "note: no slo-controller-config ConfigMap in $namespace"

# 3. Sort the release's objects: kept as they are, adopted by the new release, or deleted.
# Helm writes one document per object, `---` between them; the object's kind and name are its
# top-level `kind:` and the `name:`/`namespace:` right under `metadata:`.
awk -v dir="$backup/objects" '
    function flush() {
        if (kind != "") {
            n++
            file = sprintf("%s/%03d.yaml", dir, n)
            printf "%s", doc > file
            close(file)
            print kind "\t" name "\t" (ns == "" ? "-" : ns) "\t" file
        }
        doc = ""; kind = ""; name = ""; ns = ""; inmeta = 0
    }
    /^---/ { flush(); next }
    {
        doc = doc $0 "\n"
        if ($0 ~ /^kind:/) { kind = $2 }
        if ($0 ~ /^metadata:/) { inmeta = 1; next }
        if ($0 ~ /^[^ #]/) { inmeta = 0 }
        if (inmeta && $0 ~ /^  name:/ && name == "") { name = $2; gsub(/"/, "", name) }
        if (inmeta && $0 ~ /^  namespace:/ && ns == "") { ns = $2; gsub(/"/, "", ns) }
    }
    END { flush() }
' "$backup/upstream-manifest.yaml" >"$backup/objects/index.tsv"

keep=() adopt=() delete=()
while IFS=$'\t' read -r kind name ns file; do
    case "$kind" in
        CustomResourceDefinition | Namespace) keep+=("$kind $name $ns") ;;
        PriorityClass) adopt+=("$kind $name $ns") ;;
        ConfigMap)
            if [[ "$name" == slo-controller-config ]]; then keep+=("$kind $name $ns"); else delete+=("$kind $name $ns $file"); fi
            ;;
        *) delete+=("$kind $name $ns $file") ;;
    esac
done <"$backup/objects/index.tsv"
# Webhook configurations first (nothing is admitted by a webhook whose server is gone), then
# the workloads, then the rest.
order() {
    local line
    for line in "${delete[@]}"; do
        case "${line%% *}" in
            MutatingWebhookConfiguration | ValidatingWebhookConfiguration) echo "0 $line" ;;
            Deployment | DaemonSet | StatefulSet) echo "1 $line" ;;
            *) echo "2 $line" ;;
        esac
    done | sort -s -k1,1n | cut -d' ' -f2-
}

say "plan for release '$release' (namespace '$release_ns'):"
say "  custom resources now: $(for r in "${RESOURCES[@]}"; do printf '%s=%s ' "${r%%.*}" "${before[$r]}"; done)"
# describe KIND NAME NS: "Kind name" or "Kind name (namespace ns)".
describe() { if [[ "$3" == - ]]; then echo "$1 $2"; else echo "$1 $2 (namespace $3)"; fi; }
for line in "${keep[@]}"; do read -r kind name ns <<<"$line"; say "  keep   $(describe "$kind" "$name" "$ns")"; done
for line in "${adopt[@]}"; do
    read -r kind name ns <<<"$line"
    say "  adopt  $(describe "$kind" "$name" "$ns") into release '$new_release'"
done
while read -r kind name ns _; do
    [[ -n "$kind" ]] && say "  delete $(describe "$kind" "$name" "$ns")"
done < <(order)
say "  then: Helm forgets '$release'; koordinator-rs' CRDs are applied over the kept ones;"
say "        helm install $new_release $chart -n $namespace --set sloConfig.create=false ${helm_args[*]}"
if $dry_run; then
    say "dry run: nothing changed (backup in $backup)"
    exit 0
fi
if ! $assume_yes; then
    read -r -p "migrate: go ahead? [y/N] " answer
    [[ "$answer" == [yY]* ]] || { say "stopped; nothing changed"; exit 1; }
fi

# 4. Helm forgets the release: its records go, every object stays where it is.
say "removing the Helm records of '$release' (no object is deleted by this)"
k delete secret,configmap -n "$release_ns" -l "owner=helm,name=$release" --ignore-not-found >/dev/null

# 5. Kept objects no longer belong to any release; adopted ones belong to the new one.
for line in "${keep[@]}"; do
    read -r kind name ns <<<"$line"
    scope=(); [[ "$ns" != - ]] && scope=(-n "$ns")
    k annotate "${scope[@]}" "$kind" "$name" meta.helm.sh/release-name- meta.helm.sh/release-namespace- \
        helm.sh/resource-policy- >/dev/null || say "warning: could not remove the Helm annotations of $kind $name"
    k label "${scope[@]}" "$kind" "$name" app.kubernetes.io/managed-by- >/dev/null ||
        say "warning: could not remove the managed-by label of $kind $name"
done
for line in "${adopt[@]}"; do
    read -r kind name ns <<<"$line"
    scope=(); [[ "$ns" != - ]] && scope=(-n "$ns")
    k annotate --overwrite "${scope[@]}" "$kind" "$name" \
        "meta.helm.sh/release-name=$new_release" "meta.helm.sh/release-namespace=$namespace" >/dev/null
    k label --overwrite "${scope[@]}" "$kind" "$name" app.kubernetes.io/managed-by=Helm >/dev/null
done

# 6. Delete the old components (webhooks first).
failed=0
while read -r kind name ns file; do
    [[ -n "$kind" ]] || continue
    if out="$(k delete -n "$([[ "$ns" != - ]] && echo "$ns" || echo "$release_ns")" -f "$file" \
        --ignore-not-found --wait=true 2>&1)"; then
        say "deleted $kind $name"
    elif [[ "$out" == *"no matches for kind"* ]]; then
        say "skipped $kind $name: the cluster does not serve its kind (so it does not exist)"
    else
        say "could not delete $kind $name: $out"
        failed=1
    fi
done < <(order)
((failed == 0)) || die "some old objects could not be deleted (above); the backup is in $backup"

# 7. koordinator-rs' CRDs over the kept ones (new fields such as cpuBurstStrategy.podStrategies);
# every stored object stays.
say "applying $chart/crds"
k apply --server-side --force-conflicts --field-manager=koordinator-migration -f "$chart/crds/" >/dev/null
for f in "$chart"/crds/*.yaml; do
    k wait --for condition=established --timeout=60s -f "$f" >/dev/null
done

# 8. The new release.
say "helm install $new_release $chart -n $namespace"
"$HELM" install "$new_release" "$chart" -n "$namespace" --set sloConfig.create=false \
    "${helm_args[@]}" --wait --timeout 5m ||
    die "helm install failed; the custom resources are untouched (backup in $backup)"

# 9. Nothing lost.
lost=0
for r in "${RESOURCES[@]}"; do
    now="$(count "$r")" was="${before[$r]}"
    say "  ${r%%.*}: $was before, $now now"
    ((now >= was)) || lost=1
done
((lost == 0)) || die "fewer custom resources than before; restore them from $backup"
say "done: release '$new_release' in '$namespace' runs koordinator-rs; backup in $backup"
