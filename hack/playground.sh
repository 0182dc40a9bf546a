#!/usr/bin/env bash
# The local playground: a single-node Kubernetes cluster (etcd, kube-apiserver
# and the node of hack/node.sh: kubelet, containerd, kube-proxy, CoreDNS, the
# controller manager and scheduler), two MariaDB sites outside the cluster
# (iad primary, pdx replica) listening on the node's bridge address, the
# CRDs, the operator as a Deployment in namespace `bloodraven` from its image
# (hack/images.sh) under the chart's RBAC, behind the Service `bloodraven`
# (deploy API on 8443, metrics and health on 8082, ClusterIP 10.96.0.84, which
# the host reaches too), the group `playground` and the MysqlDatabase
# `counter-app`. Everything lives in .playground/ and stays on this machine.
# Needs root (the node). One node per machine: not while `make test` runs.
#
#   hack/playground.sh up     build what is missing, start, bootstrap, print the env
#   hack/playground.sh down   stop every process of the playground (and the node's
#                             mounts, bridge, firewall chains and sysctls)
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

# The admission webhook runs as a process on this machine (the chart runs it
# as a Deployment, issue 12), under its own ServiceAccount token with the
# chart's RBAC, and is registered by URL: https://127.0.0.1:9443.
start_webhook() {
  stop_process webhook
  log "building and starting the webhook"
  cargo build --quiet --locked --release -p bloodraven-webhook
  local webhook_bin="${CARGO_TARGET_DIR:-$root/target}/release/bloodraven-webhook"
  kubectl -n "$ns" create serviceaccount bloodraven-webhook --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  cargo xtask rbac --namespace "$ns" --component webhook | kubectl apply -f - >/dev/null
  if [ ! -f "$pg/webhook-tls/tls.crt" ]; then
    rm -rf "$pg/webhook-tls"; mkdir -p "$pg/webhook-tls"
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout "$pg/webhook-tls/ca.key" -out "$pg/webhook-tls/ca.crt" -days 365 -subj /CN=bloodraven-webhook-ca 2>/dev/null
    openssl req "${ec[@]}" -keyout "$pg/webhook-tls/tls.key" -out "$pg/webhook-tls/tls.csr" -subj /CN=bloodraven-webhook 2>/dev/null
    echo 'subjectAltName=IP:127.0.0.1' > "$pg/webhook-tls/san.ext"
    openssl x509 -req -in "$pg/webhook-tls/tls.csr" -CA "$pg/webhook-tls/ca.crt" -CAkey "$pg/webhook-tls/ca.key" -CAcreateserial \
      -out "$pg/webhook-tls/tls.crt" -days 365 -extfile "$pg/webhook-tls/san.ext" 2>/dev/null
  fi
  # A kubeconfig with the webhook's own token (a day; `make playground` again renews it).
  cp "$pg/control-plane/kubeconfig" "$pg/webhook.kubeconfig"
  KUBECONFIG="$pg/webhook.kubeconfig" kubectl config set-credentials bloodraven-webhook \
    --token="$(kubectl -n "$ns" create token bloodraven-webhook --duration=24h)" >/dev/null
  KUBECONFIG="$pg/webhook.kubeconfig" kubectl config set-context --current --user=bloodraven-webhook >/dev/null
  chmod 600 "$pg/webhook.kubeconfig"
  KUBECONFIG="$pg/webhook.kubeconfig" nohup "$webhook_bin" --namespace "$ns" \
    --addr 127.0.0.1:9443 --plain-addr 127.0.0.1:9082 --probe-addr 127.0.0.1:9081 \
    --tls-cert-file "$pg/webhook-tls/tls.crt" --tls-key-file "$pg/webhook-tls/tls.key" \
    --sidecar-image "$BLOODRAVEN_SIDECAR_IMAGE" --deploy-url "https://bloodraven.$ns.svc:8443" \
    --deploy-ca-file "$pg/tls/ca.crt" > "$pg/logs/webhook.log" 2>&1 &
  echo $! > "$pg/pids/webhook.pid"
  local deadline=$((SECONDS + 60))
  until "$webhook_bin" probe --addr 127.0.0.1:9081 /readyz >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ] || ! kill -0 "$(cat "$pg/pids/webhook.pid")" 2>/dev/null; then
      log "the webhook did not become ready; its log:"; tail -20 "$pg/logs/webhook.log" >&2; exit 1
    fi
    sleep 0.5
  done
  "$webhook_bin" configurations --url https://127.0.0.1:9443 --ca-file "$pg/webhook-tls/ca.crt" --namespace "$ns" |
    kubectl apply --server-side --force-conflicts --field-manager=bloodraven-playground -f - >/dev/null
}

down() {
  stop_process webhook
  stop_operator # a playground from before the node ran the operator as a process
  [ -d "$pg/mariadb" ] && "$root/hack/mariadb.sh" down "$pg/mariadb" || true
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
    if [ -d "$pg/mariadb/sites" ]; then
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
  export PATH="$bin:$PATH"
  stop_operator
  "$root/hack/node.sh" up "$pg/control-plane" >/dev/null
  # shellcheck source=/dev/null
  . "$pg/control-plane/env"
  local addr=$BLOODRAVEN_NODE_ADDRESS

  # MariaDB ports are chosen once and kept, so the group's spec stays valid.
  # The sites listen on the node's bridge address: the operator Pod (and
  # migration Jobs) reach them there, as external servers.
  if [ ! -f "$pg/sites.env" ]; then
    printf 'IAD_PORT=%s\nPDX_PORT=%s\nSITE_ADDR=%s\n' "$(free_port)" "$(free_port)" "$addr" > "$pg/sites.env"
  fi
  # shellcheck source=/dev/null
  . "$pg/sites.env"
  [ "$SITE_ADDR" = "$addr" ] || die "the sites listen on $SITE_ADDR but the node's address is now $addr: make playground-down; rm -rf .playground"
  export BLOODRAVEN_SITE_ADDR=$addr BLOODRAVEN_PRIMARY_HOST=$addr
  if [ -f "$pg/mariadb/sites/iad/mysqld.pid" ] && kill -0 "$(cat "$pg/mariadb/sites/iad/mysqld.pid")" 2>/dev/null; then
    log "MariaDB sites already running"
  elif [ -d "$pg/mariadb/sites/iad" ]; then
    # Restarted as the decision left them: the decided active site writable,
    # the other read-only (a switchover may have moved the primary to pdx).
    local active; active=$(kubectl get mysqlfailovergroup playground -o jsonpath='{.status.activeSite}' 2>/dev/null || true)
    local iad_ro=0 pdx_ro=1
    if [ "$active" = pdx ]; then iad_ro=1 pdx_ro=0; fi
    BLOODRAVEN_SITE_READ_ONLY=$iad_ro "$root/hack/mariadb.sh" start "$pg/mariadb" iad "$IAD_PORT" 1 >/dev/null
    BLOODRAVEN_SITE_READ_ONLY=$pdx_ro "$root/hack/mariadb.sh" start "$pg/mariadb" pdx "$PDX_PORT" 2 >/dev/null
  else
    "$root/hack/mariadb.sh" pair "$pg/mariadb" "$IAD_PORT" "$PDX_PORT" >/dev/null
  fi

  log "building the operator image"
  "$root/hack/images.sh" import "$pg/control-plane" >/dev/null
  # shellcheck source=/dev/null
  . "$pg/control-plane/images.env"

  kubectl apply --server-side --field-manager=bloodraven-playground -f "$root/charts/bloodraven/crds/" >/dev/null
  kubectl wait --for=condition=Established --timeout=60s crd/mysqlfailovergroups.bloodraven.shipstream.io crd/mysqldatabases.bloodraven.shipstream.io >/dev/null
  kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl -n "$ns" create serviceaccount bloodraven-operator --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  cargo xtask rbac --namespace "$ns" | kubectl apply -f - >/dev/null
  # The replication account is what a repointed old primary connects with
  # after a switchover (without it the operator's own account, which has no
  # REPLICATION SLAVE here, would be used and the repoint would be refused).
  kubectl -n "$ns" create secret generic playground-site-creds \
    --from-literal=username=bloodraven --from-literal=password="$BLOODRAVEN_SITE_PASSWORD" \
    --from-literal=replicationUsername=repl --from-literal=replicationPassword="$BLOODRAVEN_REPL_PASSWORD" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null

  # The deploy API's certificate: a playground CA and a server certificate
  # for the Service's names and its fixed ClusterIP (in a real cluster: the
  # auxiliary.escrowTLS Secret).
  local cluster_ip=10.96.0.84
  if [ ! -f "$pg/tls/tls.crt" ] || ! openssl x509 -in "$pg/tls/tls.crt" -noout -ext subjectAltName 2>/dev/null | grep -q "$cluster_ip"; then
    rm -rf "$pg/tls"; mkdir -p "$pg/tls"
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout "$pg/tls/ca.key" -out "$pg/tls/ca.crt" -days 365 -subj /CN=bloodraven-playground-ca 2>/dev/null
    openssl req "${ec[@]}" -keyout "$pg/tls/tls.key" -out "$pg/tls/tls.csr" -subj /CN=bloodraven 2>/dev/null
    printf 'subjectAltName=DNS:bloodraven.%s.svc,DNS:bloodraven.%s.svc.cluster.local,IP:%s\n' "$ns" "$ns" "$cluster_ip" > "$pg/tls/san.ext"
    openssl x509 -req -in "$pg/tls/tls.csr" -CA "$pg/tls/ca.crt" -CAkey "$pg/tls/ca.key" -CAcreateserial \
      -out "$pg/tls/tls.crt" -days 365 -extfile "$pg/tls/san.ext" 2>/dev/null
  fi
  kubectl -n "$ns" create secret tls bloodraven-deploy-tls --cert="$pg/tls/tls.crt" --key="$pg/tls/tls.key" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null

  kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: bloodraven, namespace: $ns}
spec:
  clusterIP: $cluster_ip
  selector: {app.kubernetes.io/name: bloodraven-operator}
  ports:
  - {name: deploy, port: 8443, targetPort: deploy}
  - {name: plain, port: 8082, targetPort: plain}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: bloodraven-operator, namespace: $ns}
spec:
  replicas: 1
  selector:
    matchLabels: {app.kubernetes.io/name: bloodraven-operator}
  template:
    metadata:
      labels: {app.kubernetes.io/name: bloodraven-operator}
    spec:
      serviceAccountName: bloodraven-operator
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
      - name: operator
        image: $BLOODRAVEN_OPERATOR_IMAGE
        imagePullPolicy: IfNotPresent
        args: [--namespace=$ns, --log-format=json, --deploy-api-enabled, --tls-cert-file=/tls/tls.crt, --tls-key-file=/tls/tls.key]
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        ports:
        - {name: deploy, containerPort: 8443}
        - {name: plain, containerPort: 8082}
        # exec, against the loopback-only probe listener (127.0.0.1:8081):
        # no other Pod can fill its connection slots and fail readiness.
        readinessProbe:
          exec: {command: [/bloodraven-operator, probe, /readyz]}
          periodSeconds: 2
        # About 66 MiB at steady state with 1,000 groups (make figures); the
        # bootstrap of many groups at once peaks near 200 MiB.
        resources:
          requests: {cpu: 50m, memory: 64Mi}
          limits: {memory: 256Mi}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        volumeMounts:
        - {name: tls, mountPath: /tls, readOnly: true}
      volumes:
      - name: tls
        secret: {secretName: bloodraven-deploy-tls}
YAML
  if ! kubectl -n "$ns" rollout status deployment/bloodraven-operator --timeout=120s >/dev/null; then
    log "the operator Deployment did not roll out; its Pods:"
    kubectl -n "$ns" get pods -o wide >&2 || true
    kubectl -n "$ns" logs deployment/bloodraven-operator --tail=20 >&2 || true
    exit 1
  fi

  start_webhook

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

  cat > "$pg/env" <<ENV
export KUBECONFIG=$pg/control-plane/kubeconfig
export PATH=$bin:\$PATH
export BLOODRAVEN_PLAIN_URL=http://$cluster_ip:8082
export BLOODRAVEN_URL=https://$cluster_ip:8443
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
  echo
  echo "# the webhook (docs/webhook.md): a hand edit of the fence is refused, a migration Job is injected"
  echo "kubectl patch mfg playground --subresource=status --type=merge -p '{\"status\":{\"topologyGeneration\":99}}'"
  echo "kubectl -n $ns delete lease bloodraven-leader"
  echo "kubectl -n counter-app create -o yaml --dry-run=server -f - <<'EOF'"
  echo "{\"apiVersion\": \"batch/v1\", \"kind\": \"Job\", \"metadata\": {\"name\": \"migrate\", \"annotations\": {\"bloodraven.shipstream.io/inject\": \"true\", \"bloodraven.shipstream.io/group\": \"playground\", \"bloodraven.shipstream.io/instance\": \"counter-app\"}}, \"spec\": {\"template\": {\"spec\": {\"serviceAccountName\": \"deployer\", \"restartPolicy\": \"Never\", \"containers\": [{\"name\": \"migrate\", \"image\": \"$BLOODRAVEN_TOOLS_IMAGE\", \"command\": [\"sh\", \"-c\", \"echo migrating\"]}]}}}}"
  echo "EOF"
  echo "# stop everything: make playground-down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: hack/playground.sh up|down" >&2; exit 2 ;;
esac
