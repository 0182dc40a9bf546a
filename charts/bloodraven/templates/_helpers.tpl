{{/* Cluster-scoped names: the release, and its namespace when they differ. */}}
{{- define "bloodraven.clusterName" -}}
{{- if eq .Release.Name .Release.Namespace -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Release.Namespace | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "bloodraven.labels" -}}
app.kubernetes.io/part-of: bloodraven
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "bloodraven.operatorSelector" -}}
app.kubernetes.io/name: bloodraven-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "bloodraven.webhookSelector" -}}
app.kubernetes.io/name: bloodraven-webhook
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "bloodraven.image" -}}
{{- $tag := .image.tag | default .root.Chart.AppVersion -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}

{{/* The deploy API's certificate Secret, when escrowTLS is on. */}}
{{- define "bloodraven.deployTLSSecret" -}}
{{- .Values.auxiliary.escrowTLS.secretName | default "bloodraven-deploy-tls" -}}
{{- end -}}

{{/* Whether the chart issues the deploy API's certificate itself. */}}
{{- define "bloodraven.issuesDeployTLS" -}}
{{- if and .Values.auxiliary.escrowTLS.enabled (not .Values.auxiliary.escrowTLS.secretName) }}true{{ end -}}
{{- end -}}

{{/* Checks of combinations the schema cannot express; fail at template time. */}}
{{- define "bloodraven.validate" -}}
{{- if and .Values.auxiliary.deployAPI.enabled (not .Values.auxiliary.escrowTLS.enabled) -}}
{{- fail "auxiliary.deployAPI.enabled needs auxiliary.escrowTLS.enabled (with auxiliary.escrowTLS.secretName, or empty for a certificate the chart issues): the deploy API is served only on the TLS listener :8443, never without TLS" -}}
{{- end -}}
{{- $le := .Values.operator.leaderElection -}}
{{- if not (and (lt (int $le.retryPeriodSeconds) (int $le.renewDeadlineSeconds)) (lt (int $le.renewDeadlineSeconds) (int $le.leaseDurationSeconds))) -}}
{{- fail "operator.leaderElection: retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds is required" -}}
{{- end -}}
{{- end -}}

{{/*
A serving certificate the chart generates (certManager.enabled false), kept
across upgrades. Arguments: root, ca (the CA object of "bloodraven.ca"),
caFresh (the CA was just made), name (Secret), hosts. Returns YAML {crt, key, notAfter}.
*/}}
{{- define "bloodraven.leaf" -}}
{{- $root := .root -}}
{{- $c := $root.Values.certificates -}}
{{- $now := now | unixEpoch | int64 -}}
{{- $renewAt := add $now (mul (int64 $c.renewBeforeDays) 86400) -}}
{{- $hosts := join "," .hosts -}}
{{- $old := lookup "v1" "Secret" $root.Release.Namespace .name -}}
{{- $keep := false -}}
{{- if and $old (not .caFresh) $old.metadata.annotations -}}
{{- $notAfter := index $old.metadata.annotations "bloodraven.shipstream.io/not-after" | default "0" | int64 -}}
{{- $oldHosts := index $old.metadata.annotations "bloodraven.shipstream.io/hosts" | default "" -}}
{{- if and (gt $notAfter $renewAt) (eq $oldHosts $hosts) (index $old.data "tls.crt") -}}
{{- $keep = true -}}
{{- end -}}
{{- end -}}
{{- if $keep -}}
crt: {{ index $old.data "tls.crt" }}
key: {{ index $old.data "tls.key" }}
notAfter: {{ index $old.metadata.annotations "bloodraven.shipstream.io/not-after" | quote }}
{{- else -}}
{{- $cert := genSignedCert (first .hosts) nil .hosts (int $c.leafDays) .ca -}}
crt: {{ $cert.Cert | b64enc }}
key: {{ $cert.Key | b64enc }}
notAfter: {{ add $now (mul (int64 $c.leafDays) 86400) | toString | quote }}
{{- end -}}
{{- end -}}

{{/* The chart's CA (Secret bloodraven-ca), kept across upgrades. Returns YAML {crt, key, notAfter, fresh}. */}}
{{- define "bloodraven.caData" -}}
{{- $c := .Values.certificates -}}
{{- $now := now | unixEpoch | int64 -}}
{{- $renewAt := add $now (mul (int64 $c.renewBeforeDays) 86400) -}}
{{- $old := lookup "v1" "Secret" .Release.Namespace "bloodraven-ca" -}}
{{- $keep := false -}}
{{- if and $old $old.metadata.annotations -}}
{{- $notAfter := index $old.metadata.annotations "bloodraven.shipstream.io/not-after" | default "0" | int64 -}}
{{- if and (gt $notAfter $renewAt) (index $old.data "tls.key") -}}
{{- $keep = true -}}
{{- end -}}
{{- end -}}
{{- if $keep -}}
crt: {{ index $old.data "tls.crt" }}
key: {{ index $old.data "tls.key" }}
notAfter: {{ index $old.metadata.annotations "bloodraven.shipstream.io/not-after" | quote }}
fresh: false
{{- else -}}
{{- $ca := genCA (printf "bloodraven-ca.%s" .Release.Namespace) (int $c.caDays) -}}
crt: {{ $ca.Cert | b64enc }}
key: {{ $ca.Key | b64enc }}
notAfter: {{ add $now (mul (int64 $c.caDays) 86400) | toString | quote }}
fresh: true
{{- end -}}
{{- end -}}

{{/*
Everything the generated certificates need, computed once per render and
memoized on the root context (the webhook configurations and the Secrets
must agree on the CA). Returns nothing; read .bloodravenCerts afterwards.
*/}}
{{- define "bloodraven.certs" -}}
{{- if not (hasKey .Values "__bloodravenCerts") -}}
{{- $ca := include "bloodraven.caData" . | fromYaml -}}
{{- $caObj := buildCustomCert $ca.crt $ca.key -}}
{{- $ns := .Release.Namespace -}}
{{- $webhook := include "bloodraven.leaf" (dict "root" . "ca" $caObj "caFresh" $ca.fresh "name" "bloodraven-webhook-tls" "hosts" (list (printf "bloodraven-webhook.%s.svc" $ns) (printf "bloodraven-webhook.%s.svc.cluster.local" $ns))) | fromYaml -}}
{{- $deploy := include "bloodraven.leaf" (dict "root" . "ca" $caObj "caFresh" $ca.fresh "name" "bloodraven-deploy-tls" "hosts" (list (printf "bloodraven.%s.svc" $ns) (printf "bloodraven.%s.svc.cluster.local" $ns))) | fromYaml -}}
{{- $_ := set .Values "__bloodravenCerts" (dict "ca" $ca "webhook" $webhook "deploy" $deploy) -}}
{{- end -}}
{{- end -}}
