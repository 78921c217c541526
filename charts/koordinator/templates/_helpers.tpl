{{/*
Shared helpers. Object names are fixed (upstream's), see values.yaml.
*/}}

{{/* The namespace of the slo-controller-config ConfigMap and of the manager's Lease. */}}
{{- define "koordinator.configNamespace" -}}
{{- default .Release.Namespace .Values.configNamespace -}}
{{- end -}}

{{/* Chart label value. */}}
{{- define "koordinator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object; call with (dict "ctx" $ "component" "manager"). */}}
{{- define "koordinator.labels" -}}
helm.sh/chart: {{ include "koordinator.chart" .ctx }}
app.kubernetes.io/name: koordinator
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: koordinator
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- with include "koordinator.koordApp" .component }}
koord-app: {{ . }}
{{- end }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Upstream Koordinator's `koord-app` label of a component's workload and pods (`kubectl -l
koord-app=koordlet`, ServiceMonitors and dashboards written for upstream select by it). Empty for
objects that are not a component's.
*/}}
{{- define "koordinator.koordApp" -}}
{{- if eq . "manager" -}}
koord-manager
{{- else if eq . "koordlet" -}}
koordlet
{{- else if eq . "webhook" -}}
koord-webhook
{{- else if eq . "scheduler" -}}
koord-scheduler
{{- else if eq . "scheduler-extender" -}}
koord-scheduler-extender
{{- end -}}
{{- end -}}

{{/*
Selector labels of a component's pods. Selectors of Deployments and DaemonSets cannot change
after creation, so `selectorStyle` is chosen once per release: `chart` (app.kubernetes.io/*) or
`upstream` (upstream's `koord-app` only, to take over an upstream release in place). Call with
(dict "ctx" $ "component" "manager").
*/}}
{{- define "koordinator.selectorLabels" -}}
{{- if eq .ctx.Values.selectorStyle "upstream" -}}
koord-app: {{ include "koordinator.koordApp" .component }}
{{- else -}}
app.kubernetes.io/name: koordinator
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}
{{- end -}}

{{/* Labels of a component's pod template: both label sets, whatever the selector style. */}}
{{- define "koordinator.podLabels" -}}
app.kubernetes.io/name: koordinator
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
koord-app: {{ include "koordinator.koordApp" .component }}
{{- end -}}

{{/* metadata.annotations from commonAnnotations, when any. */}}
{{- define "koordinator.annotations" -}}
{{- with .Values.commonAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end -}}

{{/*
PodDisruptionBudget API: policy/v1 where served (1.21+), policy/v1beta1 before (removed in 1.25).
`helm install` sees the served resources; `helm template` lists no resources unless given
`--api-versions`, so its `--kube-version` decides there.
*/}}
{{- define "koordinator.pdbApiVersion" -}}
{{- if or (.Capabilities.APIVersions.Has "policy/v1/PodDisruptionBudget") (semverCompare ">=1.21.0-0" .Capabilities.KubeVersion.Version) -}}
policy/v1
{{- else -}}
policy/v1beta1
{{- end -}}
{{- end -}}

{{/*
Non-empty when the API server labels every namespace with kubernetes.io/metadata.name (1.21+),
which the webhook configurations' namespace selectors match on.
*/}}
{{- define "koordinator.namespaceNameLabel" -}}
{{- if semverCompare ">=1.21.0-0" .Capabilities.KubeVersion.Version -}}
true
{{- end -}}
{{- end -}}

{{/* image reference; call with (dict "ctx" $ "image" .Values.manager.image). */}}
{{- define "koordinator.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* The koordlet feature gates flag value from the map, sorted by name. */}}
{{- define "koordinator.featureGates" -}}
{{- $gates := list -}}
{{- range $name, $on := .Values.koordlet.featureGates -}}
{{- $gates = append $gates (printf "%s=%t" $name (eq (toString $on) "true")) -}}
{{- end -}}
{{- join "," $gates -}}
{{- end -}}

{{/* Fails rendering on values the components would reject at start. */}}
{{- define "koordinator.validate" -}}
{{- if not (has .Values.selectorStyle (list "chart" "upstream")) -}}
{{- fail (printf "selectorStyle must be chart or upstream, not %q" .Values.selectorStyle) -}}
{{- end -}}
{{- if not (has .Values.logFormat (list "text" "json")) -}}
{{- fail (printf "logFormat must be text or json, not %q" .Values.logFormat) -}}
{{- end -}}
{{- if not (has .Values.webhook.certs.mode (list "secret" "certManager")) -}}
{{- fail (printf "webhook.certs.mode must be secret or certManager, not %q" .Values.webhook.certs.mode) -}}
{{- end -}}
{{- if not (has .Values.koordlet.cgroupDriver (list "auto" "cgroupfs" "systemd")) -}}
{{- fail (printf "koordlet.cgroupDriver must be auto, cgroupfs or systemd, not %q" .Values.koordlet.cgroupDriver) -}}
{{- end -}}
{{- if not (has .Values.koordlet.podsSource (list "kubelet" "apiserver")) -}}
{{- fail (printf "koordlet.podsSource must be kubelet or apiserver, not %q" .Values.koordlet.podsSource) -}}
{{- end -}}
{{- range list .Values.webhook.podWebhooks .Values.webhook.configMapWebhook .Values.webhook.profileWebhook -}}
{{- if not (has .failurePolicy (list "Ignore" "Fail")) -}}
{{- fail (printf "webhook failurePolicy must be Ignore or Fail, not %q" .failurePolicy) -}}
{{- end -}}
{{- if or (lt (int .timeoutSeconds) 1) (gt (int .timeoutSeconds) 30) -}}
{{- fail (printf "webhook timeoutSeconds must be 1-30, not %v" .timeoutSeconds) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Namespaces whose pods the pod webhooks never see. */}}
{{- define "koordinator.excludedNamespaces" -}}
{{- $names := list "kube-system" .Release.Namespace -}}
{{- range .Values.webhook.excludedNamespaces -}}
{{- $names = append $names . -}}
{{- end -}}
{{- toJson ($names | uniq) -}}
{{- end -}}

{{/*
apiVersion of the KubeSchedulerConfiguration for the cluster (or `scheduler.kubeVersion`):
v1beta1 up to 1.22, v1beta3 for 1.23-1.24, v1 from 1.25.
*/}}
{{- define "koordinator.schedulerConfigApiVersion" -}}
{{- $version := default .Capabilities.KubeVersion.Version .Values.scheduler.kubeVersion -}}
{{- if semverCompare ">=1.25.0-0" $version -}}
kubescheduler.config.k8s.io/v1
{{- else if semverCompare ">=1.23.0-0" $version -}}
kubescheduler.config.k8s.io/v1beta3
{{- else -}}
kubescheduler.config.k8s.io/v1beta1
{{- end -}}
{{- end -}}

{{/* The kube-scheduler image: the configured tag, else the cluster's version without build metadata. */}}
{{- define "koordinator.schedulerImage" -}}
{{- $tag := .Values.scheduler.image.tag -}}
{{- if not $tag -}}
{{- $tag = regexReplaceAll "[+].*$" (default .Capabilities.KubeVersion.Version .Values.scheduler.kubeVersion) "" -}}
{{- if not (hasPrefix "v" $tag) -}}{{- $tag = printf "v%s" $tag -}}{{- end -}}
{{- end -}}
{{- printf "%s:%s" .Values.scheduler.image.repository $tag -}}
{{- end -}}
