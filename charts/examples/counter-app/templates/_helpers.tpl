{{/* The MysqlDatabase's name: the deploy lease's instance. */}}
{{- define "counter-app.database" -}}
{{- .Values.database.name | default .Release.Name -}}
{{- end -}}

{{/* The migration Job's ServiceAccount: the one deployment client it needs. */}}
{{- define "counter-app.migrationServiceAccount" -}}
{{- .Values.migrationJob.serviceAccount.name | default (printf "%s-migrate" .Release.Name) -}}
{{- end -}}

{{/* The one image of the release: the app and its revisions. */}}
{{- define "counter-app.image" -}}
{{- required "image.tag is required: the migration Job and the Deployment run the same image tag" .Values.image.tag | printf "%s:%s" .Values.image.repository -}}
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
