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
{{- if ne (empty .Values.operator.groupSelector) (empty .Values.webhook.groupSelector.matchExpressions) -}}
{{- fail "operator.groupSelector and webhook.groupSelector.matchExpressions go together (the same selector, in two forms): with only one set, the webhook guards other groups than the ones this operator manages (and refuses another release's operator on them)" -}}
{{- end -}}
{{- include "bloodraven.validateTLS" . -}}
{{- include "bloodraven.validateScope" . -}}
{{- include "bloodraven.validatePods" . -}}
{{- include "bloodraven.validateOtherReleases" . -}}
{{- end -}}

{{/*
webhook.namespaceSelector is added to the operator-state guards too, whose
own selector is the release namespace: a requirement that leaves the release
namespace out makes them guard nothing. Checked against the namespace's
labels (lookup); without a cluster (helm template), only requirements on
kubernetes.io/metadata.name are checked.
*/}}
{{- define "bloodraven.validateScope" -}}
{{- $labels := dict "kubernetes.io/metadata.name" .Release.Namespace -}}
{{- $nsObj := lookup "v1" "Namespace" "" .Release.Namespace -}}
{{- if $nsObj }}{{ $labels = merge (deepCopy ($nsObj.metadata.labels | default dict)) $labels }}{{ end -}}
{{- range $e := .Values.webhook.namespaceSelector.matchExpressions | default list -}}
{{- if or $nsObj (eq $e.key "kubernetes.io/metadata.name") -}}
{{- $has := hasKey $labels $e.key -}}
{{- $in := and $has (has (get $labels $e.key) ($e.values | default list)) -}}
{{- $match := true -}}
{{- if eq $e.operator "In" }}{{ $match = $in }}{{ else if eq $e.operator "NotIn" }}{{ $match = not $in }}{{ else if eq $e.operator "Exists" }}{{ $match = $has }}{{ else }}{{ $match = not $has }}{{ end -}}
{{- if not $match -}}
{{- fail (printf "webhook.namespaceSelector requirement {key: %s, operator: %s, values: %v} leaves out the release namespace %s: the operator-state guards (leader Lease, deploy Leases, decision records) are scoped by the same requirements and would guard nothing. Select the release namespace too" $e.key $e.operator ($e.values | default list) $.Release.Namespace) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The deploy API's Secret and the certificates' lifetimes. */}}
{{- define "bloodraven.validateTLS" -}}
{{- $esc := .Values.auxiliary.escrowTLS -}}
{{- if and $esc.secretName (not $esc.enabled) -}}
{{- fail (printf "auxiliary.escrowTLS.secretName (%s) is set but auxiliary.escrowTLS.enabled is false: the operator would serve no TLS and the Secret would be ignored; set auxiliary.escrowTLS.enabled=true or leave secretName empty" $esc.secretName) -}}
{{- end -}}
{{- if has $esc.secretName (list "bloodraven-ca" "bloodraven-webhook-tls") -}}
{{- fail (printf "auxiliary.escrowTLS.secretName %s is a Secret the chart (or cert-manager for it) writes itself for the CA or the webhook: name your own Secret differently, or leave secretName empty for the chart's bloodraven-deploy-tls" $esc.secretName) -}}
{{- end -}}
{{- if eq $esc.secretName "bloodraven-deploy-tls" -}}
{{- $old := lookup "v1" "Secret" .Release.Namespace "bloodraven-deploy-tls" -}}
{{- if and $old (eq (get ($old.metadata.annotations | default dict) "meta.helm.sh/release-name") .Release.Name) -}}
{{- fail "auxiliary.escrowTLS.secretName bloodraven-deploy-tls is the Secret this release issued itself (secretName was empty): naming it now would make this upgrade delete it, and the operator would lose its certificate. Leave secretName empty, or give your own Secret another name" -}}
{{- end -}}
{{- end -}}
{{- if or (eq $esc.caKey "tls.key") (hasSuffix ".key" $esc.caKey) -}}
{{- fail (printf "auxiliary.escrowTLS.caKey %s names a private key: the webhook copies the content of caKey into every injected Job (BLOODRAVEN_CA_PEM), so it must be the CA certificate (e.g. ca.crt)" $esc.caKey) -}}
{{- end -}}
{{- $c := .Values.certificates -}}
{{- if not .Values.certManager.enabled -}}
{{- if ge (int $c.renewBeforeDays) (int $c.leafDays) -}}
{{- fail (printf "certificates.renewBeforeDays (%d) must be less than certificates.leafDays (%d): otherwise every helm upgrade re-issues the serving certificates" (int $c.renewBeforeDays) (int $c.leafDays)) -}}
{{- end -}}
{{- if ge (int $c.renewBeforeDays) (int $c.caDays) -}}
{{- fail (printf "certificates.renewBeforeDays (%d) must be less than certificates.caDays (%d): otherwise every helm upgrade re-issues the CA, and running sidecars and callers stop trusting the deploy API" (int $c.renewBeforeDays) (int $c.caDays)) -}}
{{- end -}}
{{- else -}}
{{- $d := include "bloodraven.seconds" .Values.certManager.duration | float64 -}}
{{- $r := include "bloodraven.seconds" .Values.certManager.renewBefore | float64 -}}
{{- if lt $d 3600.0 -}}
{{- fail (printf "certManager.duration %s is shorter than 1h, which cert-manager refuses" .Values.certManager.duration) -}}
{{- end -}}
{{- if or (lt $r 300.0) (ge $r $d) -}}
{{- fail (printf "certManager.renewBefore %s must be at least 5m and less than certManager.duration %s (cert-manager refuses it otherwise)" .Values.certManager.renewBefore .Values.certManager.duration) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A Go duration (certManager.*; the schema checks its form) in seconds. */}}
{{- define "bloodraven.seconds" -}}
{{- $total := 0.0 -}}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- range $part := regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" . -1 -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $part -}}
{{- $unit := trimPrefix $num $part -}}
{{- $total = addf $total (mulf (float64 $num) (get $units $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/* Replicas, the PodDisruptionBudget, and the labels the Services select on. */}}
{{- define "bloodraven.validatePods" -}}
{{- $wh := .Values.webhook -}}
{{- $pdb := $wh.podDisruptionBudget -}}
{{- if and $pdb.enabled (not (kindIs "string" $pdb.minAvailable)) -}}
{{- $min := int $pdb.minAvailable -}}
{{- $n := int $wh.replicas -}}
{{- if ge $min $n -}}
{{- fail (printf "webhook.podDisruptionBudget.minAvailable (%d) with webhook.replicas %d: no webhook Pod could ever be evicted, so every node drain would hang; set minAvailable below replicas, or podDisruptionBudget.enabled=false" $min $n) -}}
{{- end -}}
{{- end -}}
{{- range $component := list "operator" "webhook" -}}
{{- $psc := (index $.Values $component).podSecurityContext | default dict -}}
{{- $sc := (index $.Values $component).securityContext | default dict -}}
{{- $caps := $sc.capabilities | default dict -}}
{{- if or (ne (toString $psc.runAsNonRoot) "true") (eq (toString $psc.runAsUser) "0") (eq (toString $sc.runAsUser) "0") (eq (toString $sc.runAsNonRoot) "false") -}}
{{- fail (printf "%s.podSecurityContext/securityContext: the chart runs its Pods as non-root (runAsNonRoot: true, never runAsUser 0); the binaries need no root" $component) -}}
{{- end -}}
{{- if or (ne (toString $sc.allowPrivilegeEscalation) "false") (ne (toString $sc.readOnlyRootFilesystem) "true") (eq (toString $sc.privileged) "true") $caps.add -}}
{{- fail (printf "%s.securityContext must keep allowPrivilegeEscalation: false and readOnlyRootFilesystem: true, and add no privileges or capabilities: the binaries need none" $component) -}}
{{- end -}}
{{- $labels := (index $.Values $component).podLabels | default dict -}}
{{- range $key := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "bloodraven.shipstream.io/leader" -}}
{{- if hasKey $labels $key -}}
{{- fail (printf "%s.podLabels must not set %s: the chart's Deployments and Services select the Pods on it (and the operator's leader sets bloodraven.shipstream.io/leader itself)" $component $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Another release of this chart in another namespace (found by lookup on
install and upgrade; helm template finds none): both would guard and inject
for every namespace and group, and each webhook refuses the other operator's
status writes. Both must be scoped (operator.groupSelector,
webhook.groupSelector, webhook.namespaceSelector).
*/}}
{{- define "bloodraven.validateOtherReleases" -}}
{{- $found := lookup "admissionregistration.k8s.io/v1" "ValidatingWebhookConfiguration" "" "" -}}
{{- range $c := (get $found "items" | default list) -}}
{{- $labels := $c.metadata.labels | default dict -}}
{{- $ns := "" -}}
{{- range $w := $c.webhooks | default list -}}{{- if and $w.clientConfig.service (not $ns) -}}{{- $ns = $w.clientConfig.service.namespace -}}{{- end -}}{{- end -}}
{{- if and (eq (get $labels "app.kubernetes.io/part-of") "bloodraven") $ns (ne $ns $.Release.Namespace) -}}
{{- $otherScoped := true -}}
{{- range $w := $c.webhooks | default list -}}
{{- $onGroups := false -}}
{{- range $r := $w.rules }}{{ range $res := $r.resources }}{{ if hasPrefix "mysqlfailovergroups" $res }}{{ $onGroups = true }}{{ end }}{{ end }}{{ end -}}
{{- if and $onGroups (not $w.objectSelector) -}}{{- $otherScoped = false -}}{{- end -}}
{{- end -}}
{{- $v := $.Values -}}
{{- $scoped := and $v.operator.groupSelector $v.webhook.groupSelector.matchExpressions $v.webhook.namespaceSelector.matchExpressions -}}
{{- if not (and $scoped $otherScoped) -}}
{{- fail (printf "another bloodraven release serves namespace %s (ValidatingWebhookConfiguration %s): two releases that are not both scoped would both guard and inject for every namespace and group, and each webhook would refuse the other operator's status writes. Set operator.groupSelector, webhook.groupSelector.matchExpressions and webhook.namespaceSelector.matchExpressions on this release, and scope the other one the same way (docs/install.md)" $ns $c.metadata.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A serving certificate the chart generates (certManager.enabled false), kept
across upgrades. Arguments: root, ca (the CA object of "bloodraven.ca"),
caCrt (the CA certificate, base64), caFresh (the CA was just made),
name (Secret), hosts. Returns YAML {crt, key, notAfter}.
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
{{- /* Kept only if signed by the current CA (its ca.crt is that CA) and whole. */ -}}
{{- if and (gt $notAfter $renewAt) (eq $oldHosts $hosts) (index $old.data "tls.crt") (index $old.data "tls.key") (eq (index $old.data "ca.crt" | default "") .caCrt) -}}
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
{{- $webhook := include "bloodraven.leaf" (dict "root" . "ca" $caObj "caCrt" $ca.crt "caFresh" $ca.fresh "name" "bloodraven-webhook-tls" "hosts" (list (printf "bloodraven-webhook.%s.svc" $ns) (printf "bloodraven-webhook.%s.svc.cluster.local" $ns))) | fromYaml -}}
{{- $deploy := include "bloodraven.leaf" (dict "root" . "ca" $caObj "caCrt" $ca.crt "caFresh" $ca.fresh "name" "bloodraven-deploy-tls" "hosts" (list (printf "bloodraven.%s.svc" $ns) (printf "bloodraven.%s.svc.cluster.local" $ns))) | fromYaml -}}
{{- $_ := set .Values "__bloodravenCerts" (dict "ca" $ca "webhook" $webhook "deploy" $deploy) -}}
{{- end -}}
{{- end -}}
