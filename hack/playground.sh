#!/usr/bin/env bash
# The local playground: a single-node Kubernetes cluster (etcd, kube-apiserver
# and the node of hack/node.sh: kubelet, containerd, kube-proxy, CoreDNS, the
# controller manager and scheduler), two MariaDB sites (FLAVOR=mysql: MySQL
# 9.7, hack/mysql.sh) outside the cluster
# (iad primary, pdx replica) listening on the node's bridge address, the
# CRDs, and charts/bloodraven installed with helm (hack/build-helm.sh) as
# release `bloodraven` in namespace `bloodraven`: the operator and the
# webhook as Deployments from their images (hack/images.sh), behind the
# Services `bloodraven` (deploy API on 8443, metrics and health on 8082,
# ClusterIP 10.96.0.84, which the host reaches too) and `bloodraven-webhook`;
# then the group `playground` and the MysqlDatabase `counter-app`. Everything lives in .playground/ and stays on this machine.
# Needs root (the node). One node per machine: not while `make test` runs.
#
#   hack/playground.sh up     build what is missing, start, bootstrap, print the env
#   hack/playground.sh down   stop every process of the playground (and the node's
#                             mounts, bridge, firewall chains and sysctls)
#   hack/playground.sh sql SITE SQL   run SQL as root on site iad or pdx
#   hack/playground.sh start SITE     start site iad or pdx again (after a kill -9), read-only
#
# FLAVOR (mariadb, the default, or mysql) is chosen when the playground is
# made and kept in .playground/sites.env; another flavor needs a new one
# (make playground-down; rm -rf .playground).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pg="$root/.playground"
ns=bloodraven
log() { echo "playground: $*" >&2; }
die() { echo "playground: error: $*" >&2; exit 1; }

stop_process() { # name
  local pidfile="$pg/pids/$1.pid"
  [ -f "$pidfile" ] || return 0
  local pid; pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

stop_operator() { stop_process operator; }

# A playground made before the chart applied these with kubectl and ran the
# webhook as a process (registered by URL): helm adopts nothing it did not
# make, so they go before the first `helm install` (the decision records,
# Leases and the record key, which the operator made, stay).
remove_pre_chart_objects() {
  stop_process webhook
  kubectl -n "$ns" delete --ignore-not-found deployment/bloodraven-operator service/bloodraven \
    serviceaccount/bloodraven-operator serviceaccount/bloodraven-webhook \
    role/bloodraven-operator rolebinding/bloodraven-operator >/dev/null
  kubectl delete --ignore-not-found clusterrole/bloodraven-operator-"$ns" clusterrolebinding/bloodraven-operator-"$ns" \
    clusterrole/bloodraven-webhook-"$ns" clusterrolebinding/bloodraven-webhook-"$ns" \
    validatingwebhookconfiguration/bloodraven mutatingwebhookconfiguration/bloodraven >/dev/null
  rm -rf "$pg/webhook-tls" "$pg/webhook.kubeconfig"
}

down() {
  stop_process webhook
  stop_operator # a playground from before the node ran the operator as a process
  local f
  for f in mariadb mysql; do
    [ -d "$pg/$f" ] && "$root/hack/$f.sh" down "$pg/$f" || true
  done
  [ -d "$pg/control-plane" ] && "$root/hack/control-plane.sh" down "$pg/control-plane" || true
  log "stopped"
}

# The sites' account passwords: random for a new playground, made once and
# kept in .playground/passwords.env (mode 0600), so that a Pod on the node,
# which reaches the sites, cannot log in with a password printed in this
# repository. A playground made before this keeps the well-known ones (its
# sites were made with them); rm -rf .playground for random ones.
passwords() {
  local file="$pg/passwords.env"
  if [ ! -f "$file" ]; then
    if [ -d "$pg/mariadb/sites" ] || [ -d "$pg/mysql/sites" ]; then
      log "this playground's sites use the well-known passwords of hack/mariadb.sh; for random ones: make playground-down; rm -rf .playground"
      printf 'BLOODRAVEN_SITE_PASSWORD=%s\nBLOODRAVEN_REPL_PASSWORD=%s\n' \
        "${BLOODRAVEN_SITE_PASSWORD:-bloodraven-operator-pw}" "${BLOODRAVEN_REPL_PASSWORD:-bloodraven-repl-pw}" > "$file.tmp"
    else
      (umask 077; printf 'BLOODRAVEN_SITE_PASSWORD=%s\nBLOODRAVEN_REPL_PASSWORD=%s\n' \
        "$(openssl rand -hex 16)" "$(openssl rand -hex 16)" > "$file.tmp")
    fi
    chmod 600 "$file.tmp"; mv "$file.tmp" "$file"
  fi
  set -a
  # shellcheck source=/dev/null
  . "$file"
  set +a
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

up() {
  "$root/hack/deps.sh"
  # A playground made before the node (sites on 127.0.0.1, the operator as a
  # process, a decision record without a digest) cannot be carried over:
  # it held only the demo's state, so it is stopped and made afresh.
  if [ -f "$pg/sites.env" ] && ! grep -q '^SITE_ADDR=' "$pg/sites.env"; then
    log "this .playground was made before the node; stopping it and starting afresh"
    down
    rm -rf "$pg"
  fi
  mkdir -p "$pg/pids" "$pg/logs"
  passwords
  local bin; bin=$("$root/hack/build-k8s.sh" | tail -n 1)
  export BLOODRAVEN_K8S_BIN="$bin"
  local helm; helm=$("$root/hack/build-helm.sh" | tail -n 1)
  export PATH="$bin:${helm%/*}:$PATH"
  stop_operator
  "$root/hack/node.sh" up "$pg/control-plane" >/dev/null
  # shellcheck source=/dev/null
  . "$pg/control-plane/env"
  local addr=$BLOODRAVEN_NODE_ADDRESS

  # The sites' ports are chosen once and kept, so the group's spec stays valid.
  # The sites listen on the node's bridge address: the operator Pod (and
  # migration Jobs) reach them there, as external servers.
  if [ ! -f "$pg/sites.env" ]; then
    printf 'IAD_PORT=%s\nPDX_PORT=%s\nSITE_ADDR=%s\nSITE_FLAVOR=%s\n' "$(free_port)" "$(free_port)" "$addr" "${flavor:-mariadb}" > "$pg/sites.env"
  fi
  # shellcheck source=/dev/null
  . "$pg/sites.env"
  [ "$SITE_ADDR" = "$addr" ] || die "the sites listen on $SITE_ADDR but the node's address is now $addr: make playground-down; rm -rf .playground"
  # A playground made before the flavor choice runs MariaDB.
  if [ -z "${SITE_FLAVOR:-}" ]; then SITE_FLAVOR=mariadb; echo "SITE_FLAVOR=mariadb" >> "$pg/sites.env"; fi
  [ -z "$flavor" ] || [ "$SITE_FLAVOR" = "$flavor" ] ||
    die "this playground's sites run $SITE_FLAVOR, not FLAVOR=$flavor: make playground-down; rm -rf .playground for a new one"
  flavor=$SITE_FLAVOR
  local sites="$root/hack/$flavor.sh" sdir="$pg/$flavor"
  export BLOODRAVEN_SITE_ADDR=$addr BLOODRAVEN_PRIMARY_HOST=$addr
  if [ -f "$sdir/sites/iad/mysqld.pid" ] && kill -0 "$(cat "$sdir/sites/iad/mysqld.pid")" 2>/dev/null; then
    log "$flavor sites already running"
  elif [ -d "$sdir/sites/iad" ]; then
    # Restarted as the decision left them: the decided active site writable,
    # the other read-only (a planned failover may have moved the primary to pdx).
    local active; active=$(kubectl get mysqlfailovergroup playground -o jsonpath='{.status.activeSite}' 2>/dev/null || true)
    local iad_ro=0 pdx_ro=1
    if [ "$active" = pdx ]; then iad_ro=1 pdx_ro=0; fi
    BLOODRAVEN_SITE_READ_ONLY=$iad_ro "$sites" start "$sdir" iad "$IAD_PORT" 1 >/dev/null
    BLOODRAVEN_SITE_READ_ONLY=$pdx_ro "$sites" start "$sdir" pdx "$PDX_PORT" 2 >/dev/null
  else
    "$sites" pair "$sdir" "$IAD_PORT" "$PDX_PORT" >/dev/null
  fi

  log "building the images"
  "$root/hack/images.sh" import "$pg/control-plane" >/dev/null
  # The kubectl plugin of the same build (the operator image carries it too).
  mkdir -p "$pg/bin"
  cp -f "${CARGO_TARGET_DIR:-$root/target}/x86_64-unknown-linux-gnu/release/kubectl-bloodraven" "$pg/bin/kubectl-bloodraven"
  # shellcheck source=/dev/null
  . "$pg/control-plane/images.env"

  kubectl apply --server-side --field-manager=bloodraven-playground -f "$root/charts/bloodraven/crds/" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s crd/mysqlfailovergroups.bloodraven.shipstream.io crd/mysqldatabases.bloodraven.shipstream.io >/dev/null
  kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  helm status bloodraven -n "$ns" >/dev/null 2>&1 || remove_pre_chart_objects
  # The replication account is what a repointed old primary connects with
  # after a planned failover (without it the operator's own account, which has no
  # REPLICATION SLAVE here, would be used and the repoint would be refused).
  kubectl -n "$ns" create secret generic playground-site-creds \
    --from-literal=username=bloodraven --from-literal=password="$BLOODRAVEN_SITE_PASSWORD" \
    --from-literal=replicationUsername=repl --from-literal=replicationPassword="$BLOODRAVEN_REPL_PASSWORD" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null

  # The deploy API's certificate (the auxiliary.escrowTLS Secret): a
  # playground CA and a server certificate for the Service's names and its
  # fixed ClusterIP, which the host's curl uses (a certificate the chart
  # issued would name only the Service's DNS names).
  local cluster_ip=10.96.0.84
  if [ ! -f "$pg/tls/tls.crt" ] || ! openssl x509 -in "$pg/tls/tls.crt" -noout -ext subjectAltName 2>/dev/null | grep "$cluster_ip" >/dev/null; then
    rm -rf "$pg/tls"; mkdir -p "$pg/tls"
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout "$pg/tls/ca.key" -out "$pg/tls/ca.crt" -days 365 -subj /CN=bloodraven-playground-ca 2>/dev/null
    openssl req "${ec[@]}" -keyout "$pg/tls/tls.key" -out "$pg/tls/tls.csr" -subj /CN=bloodraven 2>/dev/null
    printf 'subjectAltName=DNS:bloodraven.%s.svc,DNS:bloodraven.%s.svc.cluster.local,IP:%s\n' "$ns" "$ns" "$cluster_ip" > "$pg/tls/san.ext"
    openssl x509 -req -in "$pg/tls/tls.csr" -CA "$pg/tls/ca.crt" -CAkey "$pg/tls/ca.key" -CAcreateserial \
      -out "$pg/tls/tls.crt" -days 365 -extfile "$pg/tls/san.ext" 2>/dev/null
  fi
  kubectl -n "$ns" create secret generic bloodraven-deploy-tls --type=kubernetes.io/tls --from-file=tls.crt="$pg/tls/tls.crt" \
    --from-file=tls.key="$pg/tls/tls.key" --from-file=ca.crt="$pg/tls/ca.crt" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null

  # The chart, with the images built here. One operator replica (a
  # playground needs no standby); the webhook keeps its two (its guards fail
  # closed).
  cat > "$pg/values.yaml" <<YAML
operator:
  replicas: 1
  image: {repository: ${BLOODRAVEN_OPERATOR_IMAGE%:*}, tag: "${BLOODRAVEN_OPERATOR_IMAGE##*:}", pullPolicy: IfNotPresent}
  logFormat: json
  service: {clusterIP: $cluster_ip}
webhook:
  image: {repository: ${BLOODRAVEN_WEBHOOK_IMAGE%:*}, tag: "${BLOODRAVEN_WEBHOOK_IMAGE##*:}", pullPolicy: IfNotPresent}
  sidecar:
    image: {repository: ${BLOODRAVEN_SIDECAR_IMAGE%:*}, tag: "${BLOODRAVEN_SIDECAR_IMAGE##*:}", pullPolicy: IfNotPresent}
auxiliary:
  deployAPI: {enabled: true}
  escrowTLS: {enabled: true, secretName: bloodraven-deploy-tls}
YAML
  log "installing charts/bloodraven (helm upgrade --install)"
  if ! helm upgrade --install bloodraven "$root/charts/bloodraven" -n "$ns" -f "$pg/values.yaml" \
      --wait --timeout 180s >"$pg/logs/helm.log" 2>&1; then
    log "helm did not install the chart:"; tail -20 "$pg/logs/helm.log" >&2
    kubectl -n "$ns" get pods -o wide >&2 || true
    kubectl -n "$ns" logs deployment/bloodraven-operator --tail=20 >&2 || true
    kubectl -n "$ns" logs deployment/bloodraven-webhook --tail=20 >&2 || true
    exit 1
  fi

  # initialActiveSite is read once, at bootstrap, and the webhook refuses to
  # rewrite it afterwards: a group kept from an earlier run keeps its own.
  local initial
  initial=$(kubectl get mysqlfailovergroup playground -o jsonpath='{.spec.initialActiveSite}' 2>/dev/null || true)
  kubectl apply -f - >/dev/null <<YAML
apiVersion: bloodraven.shipstream.io/v1alpha1
kind: MysqlFailoverGroup
metadata:
  name: playground
spec:
  initialActiveSite: ${initial:-iad}
  sites:
  - name: iad
    host: $addr
    port: $IAD_PORT
    credentialsSecretRef: {namespace: $ns, name: playground-site-creds}
  - name: pdx
    host: $addr
    port: $PDX_PORT
    credentialsSecretRef: {namespace: $ns, name: playground-site-creds}
  failover:
    probeIntervalSeconds: 2
  # Only the app's namespace may attach MysqlDatabases (the default is none).
  allowedDatabases:
    namespaces:
      from: Selector
      selector:
        matchExpressions:
        - {key: kubernetes.io/metadata.name, operator: In, values: [counter-app]}
---
apiVersion: v1
kind: Namespace
metadata:
  name: counter-app
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: deployer
  namespace: counter-app
---
apiVersion: bloodraven.shipstream.io/v1alpha1
kind: MysqlDatabase
metadata:
  name: counter-app
  namespace: counter-app
spec:
  failoverGroupRef: {name: playground}
  schema: counter
  deploymentClients:
  - {namespace: counter-app, serviceAccount: deployer}
YAML

  # Bootstrapped means a topologyGeneration exists (1 on a new playground,
  # higher once the primary has moved); wait for any value.
  local generation="" deadline=$((SECONDS + 90))
  while [ -z "$generation" ] && [ $SECONDS -lt $deadline ]; do
    generation=$(kubectl get mysqlfailovergroup playground -o jsonpath='{.status.topologyGeneration}' 2>/dev/null || true)
    [ -n "$generation" ] || sleep 0.5
  done
  if [ -z "$generation" ]; then
    log "the group did not bootstrap within 90 s; operator log tail:"
    kubectl -n "$ns" logs deployment/bloodraven-operator --tail=20 >&2 || true
    kubectl get mysqlfailovergroup playground -o yaml >&2 || true
    exit 1
  fi
  # The group's reconciler claims the database's name within a probe
  # interval; until then the deploy API and the webhook refuse its clients.
  if ! kubectl -n counter-app wait --for=condition=Ready --timeout=60s mysqldatabase/counter-app >/dev/null; then
    log "MysqlDatabase counter-app did not become Ready within 60 s:"
    kubectl -n counter-app get mysqldatabase counter-app -o jsonpath='{.status.conditions}' >&2 || true
    exit 1
  fi

  cat > "$pg/env" <<ENV
export KUBECONFIG=$pg/control-plane/kubeconfig
export PATH=$pg/bin:$bin:${helm%/*}:\$PATH
export BLOODRAVEN_NAMESPACE=$ns
export BLOODRAVEN_PLAIN_URL=http://$cluster_ip:8082
export BLOODRAVEN_URL=https://$cluster_ip:8443
export BLOODRAVEN_CA=$pg/tls/ca.crt
ENV
  # A migration Job to paste or apply, kept beside env for a reader who
  # comes back to a running playground.
  cat >"$pg/job.yaml" <<JOB
apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  annotations:
    bloodraven.shipstream.io/inject: "true"
    bloodraven.shipstream.io/group: playground
    bloodraven.shipstream.io/instance: counter-app
spec:
  template:
    spec:
      serviceAccountName: deployer
      restartPolicy: Never
      # The restricted Pod Security profile, which the namespace warns on.
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: migrate
          image: $BLOODRAVEN_TOOLS_IMAGE
          command: ["sh", "-c", "echo migrating"]
          securityContext:
            allowPrivilegeEscalation: false
            capabilities: {drop: ["ALL"]}
JOB
  kubectl get mysqlfailovergroups
  echo
  echo "# the playground is up; to use it:"
  echo "source $pg/env"
  cat "$pg/env"
  echo "# try: kubectl get mfg playground -o yaml; curl -s \$BLOODRAVEN_PLAIN_URL/metrics | grep ^bloodraven_"
  echo "# the chart: helm -n $ns status bloodraven; helm -n $ns get values bloodraven"
  echo
  echo "# the deploy API, as the pipeline ServiceAccount counter-app/deployer (see docs/deploy-api.md):"
  echo 'TOKEN=$(kubectl -n counter-app create token deployer --audience bloodraven-deploy)'
  echo 'curl -s --cacert "$BLOODRAVEN_CA" -H "Authorization: Bearer $TOKEN" "$BLOODRAVEN_URL/deploy/v1/groups/playground"'
  echo 'curl -s --cacert "$BLOODRAVEN_CA" -H "Authorization: Bearer $TOKEN" -X POST "$BLOODRAVEN_URL/deploy/v1/groups/playground/leases" -d '"'"'{"kind":"migration","operationId":"op-1","instance":"counter-app","ttlSeconds":30}'"'"' -w " %{http_code}\n"'
  echo
  echo "# the webhook (docs/webhook.md): a hand edit of the fence is refused, a migration Job is injected"
  echo "kubectl patch mfg playground --subresource=status --type=merge -p '{\"status\":{\"topologyGeneration\":99}}'"
  echo "kubectl -n $ns delete lease bloodraven-leader"
  echo "kubectl -n counter-app create -o yaml --dry-run=server -f $pg/job.yaml"
  echo "# ($pg/job.yaml: a migration Job annotated bloodraven.shipstream.io/inject: \"true\"; drop --dry-run to run it)"
  echo "# stop everything: make playground-down"
}

# Runs SQL as root on one of this playground's sites, whatever its flavor.
sql() { # SITE SQL
  [ $# -eq 2 ] || die "usage: hack/playground.sh sql iad|pdx SQL"
  [ -f "$pg/sites.env" ] || die "no playground here: make playground"
  # shellcheck source=/dev/null
  . "$pg/sites.env"
  local f=${SITE_FLAVOR:-mariadb}
  "$root/hack/$f.sh" sql "$pg/$f" "$1" "$2"
}

# Empty: the flavor of the playground there is, else mariadb.
# Starts a site of this playground again where it listened, read-only (a
# stopped or killed primary must not come back writable beside the new
# one; the operator repoints it). Nothing when it runs.
start_site() { # SITE
  [ $# -eq 1 ] || die "usage: hack/playground.sh start iad|pdx"
  [ -f "$pg/sites.env" ] || die "no playground here: make playground"
  # shellcheck source=/dev/null
  . "$pg/sites.env"
  local f=${SITE_FLAVOR:-mariadb} port id
  case $1 in iad) port=$IAD_PORT id=1 ;; pdx) port=$PDX_PORT id=2 ;; *) die "no site $1 (iad, pdx)" ;; esac
  BLOODRAVEN_SITE_ADDR=$SITE_ADDR BLOODRAVEN_SITE_READ_ONLY=1 "$root/hack/$f.sh" start "$pg/$f" "$1" "$port" "$id"
}

flavor=${FLAVOR:-}
case $flavor in '' | mariadb | mysql) ;; *) die "FLAVOR=$flavor: use mariadb or mysql" ;; esac

case "${1:-}" in
  up) up ;;
  down) down ;;
  sql) shift; sql "$@" ;;
  start) shift; start_site "$@" ;;
  *) echo "usage: hack/playground.sh up|down|sql SITE SQL|start SITE" >&2; exit 2 ;;
esac
