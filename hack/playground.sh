#!/usr/bin/env bash
# The local playground: etcd + kube-apiserver, two MariaDB sites (iad primary,
# pdx replica), the CRDs, the operator running under its own ServiceAccount
# with the chart's RBAC, the group `playground` and the MysqlDatabase
# `counter-app`. Everything lives in .playground/ and runs on 127.0.0.1.
#
#   hack/playground.sh up     build what is missing, start, bootstrap, print the env
#   hack/playground.sh down   stop every process of the playground
#
#   BLOODRAVEN_PLAYGROUND_PLAIN_PORT   operator metrics/health port (default 8082)
#   BLOODRAVEN_PLAYGROUND_DEPLOY_PORT  deploy API TLS port (default 8443)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pg="$root/.playground"
ns=bloodraven
site_password=${BLOODRAVEN_SITE_PASSWORD:-bloodraven-operator-pw}
log() { echo "playground: $*" >&2; }

stop_operator() {
  local pidfile="$pg/pids/operator.pid"
  [ -f "$pidfile" ] || return 0
  local pid; pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

down() {
  stop_operator
  [ -d "$pg/mariadb" ] && "$root/hack/mariadb.sh" down "$pg/mariadb" || true
  [ -d "$pg/control-plane" ] && "$root/hack/control-plane.sh" down "$pg/control-plane" || true
  log "stopped"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

up() {
  mkdir -p "$pg/pids" "$pg/logs"
  local bin; bin=$("$root/hack/build-k8s.sh" | tail -n 1)
  export BLOODRAVEN_K8S_BIN="$bin"
  export PATH="$bin:$PATH"
  "$root/hack/control-plane.sh" up "$pg/control-plane" >/dev/null
  # shellcheck source=/dev/null
  . "$pg/control-plane/env"

  # MariaDB ports are chosen once and kept, so the group's spec stays valid.
  if [ ! -f "$pg/sites.env" ]; then
    printf 'IAD_PORT=%s\nPDX_PORT=%s\n' "$(free_port)" "$(free_port)" > "$pg/sites.env"
  fi
  # shellcheck source=/dev/null
  . "$pg/sites.env"
  if [ -f "$pg/mariadb/sites/iad/mysqld.pid" ] && kill -0 "$(cat "$pg/mariadb/sites/iad/mysqld.pid")" 2>/dev/null; then
    log "MariaDB sites already running"
  elif [ -d "$pg/mariadb/sites/iad" ]; then
    "$root/hack/mariadb.sh" start "$pg/mariadb" iad "$IAD_PORT" 1 >/dev/null
    BLOODRAVEN_SITE_READ_ONLY=1 "$root/hack/mariadb.sh" start "$pg/mariadb" pdx "$PDX_PORT" 2 >/dev/null
  else
    "$root/hack/mariadb.sh" pair "$pg/mariadb" "$IAD_PORT" "$PDX_PORT" >/dev/null
  fi

  log "building the operator"
  cargo build --quiet -p bloodraven-operator
  local target; target=${CARGO_TARGET_DIR:-$root/target}

  kubectl apply --server-side --field-manager=bloodraven-playground -f "$root/charts/bloodraven/crds/" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s crd/mysqlfailovergroups.bloodraven.shipstream.io crd/mysqldatabases.bloodraven.shipstream.io >/dev/null
  kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl -n "$ns" create serviceaccount bloodraven-operator --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  cargo xtask rbac --namespace "$ns" | kubectl apply -f - >/dev/null
  kubectl -n "$ns" create secret generic playground-site-creds \
    --from-literal=username=bloodraven --from-literal=password="$site_password" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null

  # The operator authenticates with its own ServiceAccount token, never as admin.
  local token; token=$(kubectl -n "$ns" create token bloodraven-operator --duration=24h)
  umask 077
  cat > "$pg/operator.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: playground
  cluster: {server: "$BLOODRAVEN_APISERVER_URL", certificate-authority: "$BLOODRAVEN_APISERVER_CA"}
users:
- name: bloodraven-operator
  user: {token: "$token"}
contexts:
- name: playground
  context: {cluster: playground, user: bloodraven-operator, namespace: $ns}
current-context: playground
KUBECONFIG
  umask 022

  # The deploy API's certificate: a playground CA and a server certificate
  # for 127.0.0.1/localhost (in a cluster: the auxiliary.escrowTLS Secret).
  if [ ! -f "$pg/tls/tls.crt" ]; then
    mkdir -p "$pg/tls"
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout "$pg/tls/ca.key" -out "$pg/tls/ca.crt" -days 365 -subj /CN=bloodraven-playground-ca 2>/dev/null
    openssl req "${ec[@]}" -keyout "$pg/tls/tls.key" -out "$pg/tls/tls.csr" -subj /CN=bloodraven 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$pg/tls/san.ext"
    openssl x509 -req -in "$pg/tls/tls.csr" -CA "$pg/tls/ca.crt" -CAkey "$pg/tls/ca.key" -CAcreateserial \
      -out "$pg/tls/tls.crt" -days 365 -extfile "$pg/tls/san.ext" 2>/dev/null
  fi

  stop_operator
  local plain_port=${BLOODRAVEN_PLAYGROUND_PLAIN_PORT:-8082}
  local deploy_port=${BLOODRAVEN_PLAYGROUND_DEPLOY_PORT:-8443}
  KUBECONFIG="$pg/operator.kubeconfig" setsid nohup "$target/debug/bloodraven-operator" \
    --namespace "$ns" --plain-addr "127.0.0.1:$plain_port" --log-format json \
    --deploy-api-enabled --deploy-api-addr "127.0.0.1:$deploy_port" \
    --tls-cert-file "$pg/tls/tls.crt" --tls-key-file "$pg/tls/tls.key" \
    >> "$pg/logs/operator.log" 2>&1 < /dev/null &
  echo $! > "$pg/pids/operator.pid"

  kubectl apply -f - >/dev/null <<YAML
apiVersion: bloodraven.shipstream.io/v1alpha1
kind: MysqlFailoverGroup
metadata:
  name: playground
spec:
  initialActiveSite: iad
  sites:
  - name: iad
    host: 127.0.0.1
    port: $IAD_PORT
    credentialsSecretRef: {namespace: $ns, name: playground-site-creds}
  - name: pdx
    host: 127.0.0.1
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
    tail -n 20 "$pg/logs/operator.log" >&2
    kubectl get mysqlfailovergroup playground -o yaml >&2 || true
    exit 1
  fi

  cat > "$pg/env" <<ENV
export KUBECONFIG=$pg/control-plane/kubeconfig
export PATH=$bin:\$PATH
export BLOODRAVEN_PLAIN_URL=http://127.0.0.1:$plain_port
export BLOODRAVEN_URL=https://127.0.0.1:$deploy_port
export BLOODRAVEN_CA=$pg/tls/ca.crt
ENV
  kubectl get mysqlfailovergroups
  echo
  echo "# the playground is up; to use it:"
  echo "source $pg/env"
  cat "$pg/env"
  echo "# try: kubectl get mfg playground -o yaml; curl -s \$BLOODRAVEN_PLAIN_URL/metrics | grep ^bloodraven_"
  echo
  echo "# the deploy API, as the pipeline ServiceAccount counter-app/deployer (see docs/deploy-api.md):"
  echo 'TOKEN=$(kubectl -n counter-app create token deployer --audience bloodraven-deploy)'
  echo 'curl -s --cacert "$BLOODRAVEN_CA" -H "Authorization: Bearer $TOKEN" "$BLOODRAVEN_URL/deploy/v1/groups/playground"'
  echo 'curl -s --cacert "$BLOODRAVEN_CA" -H "Authorization: Bearer $TOKEN" -X POST "$BLOODRAVEN_URL/deploy/v1/groups/playground/leases" -d '"'"'{"kind":"migration","operationId":"op-1","instance":"counter-app","ttlSeconds":30}'"'"' -w " %{http_code}\n"'
  echo "# stop everything: make playground-down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: hack/playground.sh up|down" >&2; exit 2 ;;
esac
