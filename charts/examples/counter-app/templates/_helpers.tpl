{{/* The MysqlDatabase's name: the deploy lease's instance. */}}
{{- define "counter-app.database" -}}
{{- .Values.database.name | default .Release.Name -}}
{{- end -}}

{{/* The migration Job's ServiceAccount: the one deployment client it needs. */}}
{{- define "counter-app.migrationServiceAccount" -}}
{{- .Values.migrationJob.serviceAccount.name | default (printf "%s-migrate" .Release.Name) -}}
{{- end -}}

{{/* The one image of the release (the app and its revisions), quoted: a
lint without values renders `repository:`, which unquoted is not YAML. */}}
{{- define "counter-app.image" -}}
{{- required "image.tag is required: the migration Job and the Deployment run the same image tag" .Values.image.tag | printf "%s:%s" .Values.image.repository | quote -}}
{{- end -}}

{{- define "counter-app.labels" -}}
app.kubernetes.io/name: counter-app
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "counter-app.selector" -}}
app.kubernetes.io/name: counter-app
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "counter-app.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* Every Pod of the chart passes the `restricted` Pod Security Standard. */}}
{{- define "counter-app.podSecurityContext" -}}
runAsNonRoot: true
seccompProfile:
  type: RuntimeDefault
{{- end -}}


{{/*
Refusals at render time, for values that would install something broken:
- the release name is the prefix of every object and of the Service
  `<database>-primary`: a DNS label of at most 45 characters, so
  `<release>-wait-for-database` stays a valid name (63);
- retryMinSeconds above retryMaxSeconds (the runner refuses it, but only
  inside the Job);
- a runner that could still be retrying when the Job's deadline ends it:
  Kubernetes then deletes the running Pod and its log with it, so the
  runner's own bounds (maxAttempts x (lockTimeout + retryMaxSeconds), plus
  a minute for connecting and the revisions' own work) must end first, and
  its failure keeps its log (the hook fails closed).
*/}}
{{- define "counter-app.validate" -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .Release.Name) -}}
{{- fail (printf "release name %q: must be a DNS label (lower-case letters, digits and '-'): it names the Service <database>-primary the app connects to" .Release.Name) -}}
{{- end -}}
{{- if gt (len .Release.Name) 45 -}}
{{- fail (printf "release name %q is %d characters: at most 45, so that %s-wait-for-database is a valid name (63)" .Release.Name (len .Release.Name) .Release.Name) -}}
{{- end -}}
{{- $mj := .Values.migrationJob -}}
{{- if gt (int $mj.retryMinSeconds) (int $mj.retryMaxSeconds) -}}
{{- fail (printf "migrationJob.retryMinSeconds (%d) is above migrationJob.retryMaxSeconds (%d)" (int $mj.retryMinSeconds) (int $mj.retryMaxSeconds)) -}}
{{- end -}}
{{- $lock := int (trimSuffix "s" (toString $mj.lockTimeout)) -}}
{{- $worst := add (mul (int $mj.maxAttempts) (add $lock (int $mj.retryMaxSeconds))) 60 -}}
{{- if ge $worst (int $mj.activeDeadlineSeconds) -}}
{{- fail (printf "migrationJob.activeDeadlineSeconds (%d) would end the Job while the runner may still retry: maxAttempts (%d) x (lockTimeout %d s + retryMaxSeconds %d) + 60 s = %d s. At the deadline Kubernetes deletes the running Pod and its log; lower maxAttempts or raise activeDeadlineSeconds (and helm's --timeout with it)" (int $mj.activeDeadlineSeconds) (int $mj.maxAttempts) $lock (int $mj.retryMaxSeconds) $worst) -}}
{{- end -}}
{{- end -}}
