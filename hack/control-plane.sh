#!/usr/bin/env bash
# A Kubernetes control plane as local processes: etcd (127.0.0.1) and
# kube-apiserver (RBAC + Node authorization, service-account tokens, the
# ServiceAccount and NodeRestriction admission plugins, Pod Security admission
# enforcing `baseline` in every namespace, the lease endpoint reconciler).
# Alone it has no kube-controller-manager and no kubelet: namespaces are
# never finalized and no `default` ServiceAccount appears.
# hack/node.sh adds those (a node, on top of the same DIR); this script
# prepares what the node needs: the node's network (DIR/node-net.env, chosen
# once per DIR), client certificates and kubeconfigs for each node component.
#
#   hack/control-plane.sh up DIR      # start (or, when already up, just reprint DIR/env)
#   hack/control-plane.sh down DIR    # stop every process of DIR; verifies none remains
#   hack/control-plane.sh status DIR  # exit 0 when up and /readyz is ok, 1 otherwise
#
# DIR holds pki/ (CA, serving and admin client certs, service-account keys,
# node component certs; kept across down/up), etcd/ (data, kept),
# logs/{etcd,kube-apiserver}.log, pids/, ports.env, node-net.env, admission.yaml,
# kubeconfig (admin = CN bloodraven-admin, O system:masters; certs embedded),
# kubeconfigs/ (one per node component) and env (shell `export` lines, also
# printed by `up`; hack/node.sh appends its own lines after a marker, kept):
#   KUBECONFIG BLOODRAVEN_APISERVER_URL BLOODRAVEN_APISERVER_CA BLOODRAVEN_K8S_BIN
# kube-apiserver listens on 0.0.0.0 (clients use 127.0.0.1; Pods reach it
# through the `kubernetes` Service at the node address, see hack/README.md).
# `down` also stops a node of DIR (hack/node.sh down) when one runs.
# Binaries come from hack/build-k8s.sh (or from $BLOODRAVEN_K8S_BIN when it
# is set and holds etcd, kube-apiserver and kubectl).
# Timeouts: BLOODRAVEN_CONTROL_PLANE_TIMEOUT seconds (default 90) per wait.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib/detach.sh
. "$root/hack/lib/detach.sh"
TIMEOUT=${BLOODRAVEN_CONTROL_PLANE_TIMEOUT:-90}
# The issuer is also the default audience of TokenRequest (as in a real cluster).
SA_ISSUER=https://kubernetes.default.svc.cluster.local
# Service ClusterIPs; the first is the `kubernetes` Service.
SERVICE_CIDR=10.96.0.0/24
SERVICE_IP=10.96.0.1
me=control-plane.sh
log() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }

abs_dir() { mkdir -p "$1" && (cd "$1" && pwd); }

# Processes that belong to DIR, found by their command line (so none escapes
# even if a pid file was lost): etcd by its data dir, kube-apiserver by its
# cert dir.
procs_of() { # dir
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    case $cmd in
      *" --data-dir=$1/etcd "* | *" --cert-dir=$1/pki/apiserver-cert-dir "*) echo "${p#/proc/}" ;;
    esac
  done
}

# pid from DIR/pids/NAME.pid when alive and really that process of DIR.
live_pid() { # dir name
  local f="$1/pids/$2.pid" pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  local argv0
  argv0=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | head -n 1) || return 0
  # (no `procs_of | grep -q`: with pipefail, grep's early exit fails the pipe)
  if [ "${argv0##*/}" = "$2" ] && [[ $'\n'$(procs_of "$1")$'\n' == *$'\n'"$pid"$'\n'* ]]; then
    echo "$pid"
  fi
}

tail_log() {
  if [ -f "$1" ]; then echo "----- last lines of $1 -----" >&2; tail -n 40 "$1" >&2; echo "-----" >&2; fi
}

readyz() { # dir url : prints the body, fails unless "ok"
  local body
  body=$(curl -sS --max-time 5 --cacert "$1/pki/ca.crt" --cert "$1/pki/admin.crt" \
    --key "$1/pki/admin.key" "$2/readyz" 2>/dev/null) || return 1
  [ "$body" = ok ]
}

k8s_bin() {
  local b=${BLOODRAVEN_K8S_BIN:-}
  if [ -n "$b" ] && [ -x "$b/etcd" ] && [ -x "$b/kube-apiserver" ] && [ -x "$b/kubectl" ]; then
    echo "$b"; return 0
  fi
  b=$("$root/hack/build-k8s.sh" | tail -n 1) || die "hack/build-k8s.sh failed"
  if ! [ -x "$b/etcd" ] || ! [ -x "$b/kube-apiserver" ] || ! [ -x "$b/kubectl" ]; then
    die "hack/build-k8s.sh printed '$b', which lacks etcd, kube-apiserver or kubectl"
  fi
  echo "$b"
}

# N free loopback TCP ports, all distinct (held open until all are chosen).
free_ports() { # n
  command -v python3 >/dev/null || die "python3 is needed to pick free ports"
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

port_free() { # port : as etcd and kube-apiserver bind (Go sets SO_REUSEADDR)
  python3 - "$1" <<'PY' 2>/dev/null
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
PY
}

gen_pki() { # dir : idempotent; a complete pki/ is kept
  local pki="$1/pki"
  if [ -f "$pki/.complete" ]; then return 0; fi
  command -v openssl >/dev/null || die "openssl is needed"
  rm -rf "$pki"; mkdir -p "$pki/apiserver-cert-dir"; chmod 700 "$pki"
  log "generating certificates in $pki"
  (
    cd "$pki"
    q() { "$@" >/dev/null 2>openssl.err || { cat openssl.err >&2; exit 1; }; }
    q openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out ca.key
    q openssl req -x509 -new -key ca.key -out ca.crt -days 3650 -subj "/CN=bloodraven-control-plane-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    cat >leaf.ext <<'EXT'
[server]
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost
authorityKeyIdentifier=keyid
subjectKeyIdentifier=hash
[client]
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
authorityKeyIdentifier=keyid
subjectKeyIdentifier=hash
EXT
    # (kube-apiserver's serving certificate is made by node_pki: its SANs
    # include the node address.)
    q openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out admin.key
    q openssl req -new -key admin.key -subj "/O=system:masters/CN=bloodraven-admin" -out admin.csr
    q openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAserial ca.srl -CAcreateserial \
      -days 3650 -extfile leaf.ext -extensions client -out admin.crt
    q openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key
    q openssl pkey -in sa.key -pubout -out sa.pub
    rm -f ./*.csr openssl.err
  ) || die "openssl failed while generating $pki"
  touch "$pki/.complete"
}

# The node's network, chosen once per DIR and kept (node-net.env): a bridge
# name and a /24 under 10.224.0.0/12 derived from DIR's path, so two DIRs
# differ. The bridge's own address (.1) is the node address: kube-apiserver
# advertises it (the `kubernetes` Service's endpoint), kubelet registers it as
# the node's InternalIP, CoreDNS listens there. Only hack/node.sh creates the
# bridge; without a node the address is simply not reachable.
node_net() { # dir
  local f="$1/node-net.env"
  if ! [ -s "$f" ]; then
    local h; h=$(printf '%s' "$1" | cksum | cut -d' ' -f1)
    local b=$((224 + h % 16)) c=$(((h / 16) % 256))
    {
      printf 'NODE_NAME=%s\n' bloodraven-node
      printf 'NODE_BRIDGE=%s\n' "brv-$(printf '%08x' "$h")"
      printf 'NODE_ADDRESS=%s\n' "10.$b.$c.1"
      printf 'NODE_POD_SUBNET=%s\n' "10.$b.$c.0/24"
      printf 'NODE_SERVICE_CIDR=%s\n' "$SERVICE_CIDR"
      printf 'NODE_SERVICE_IP=%s\n' "$SERVICE_IP"
    } >"$f.tmp"
    mv "$f.tmp" "$f"
  fi
}

# A leaf certificate signed by DIR's CA (EC P-256: fast to make), created
# when missing or when its subject or SANs changed (recorded in NAME.spec).
# The CA is never replaced, so every kubeconfig stays valid.
leaf() { # dir name server|client subject [sans]
  local pki="$1/pki" name=$2 kind=$3 subj=$4 sans=${5:-}
  local spec="$kind|$subj|$sans"
  if [ -f "$pki/$name.crt" ] && [ "$(cat "$pki/$name.spec" 2>/dev/null)" = "$spec" ]; then return 0; fi
  (
    cd "$pki"
    q() { "$@" >/dev/null 2>"$name.err" || { cat "$name.err" >&2; exit 1; }; }
    {
      echo "basicConstraints=critical,CA:FALSE"
      echo "keyUsage=critical,digitalSignature,keyEncipherment"
      if [ "$kind" = server ]; then echo "extendedKeyUsage=serverAuth"; else echo "extendedKeyUsage=clientAuth"; fi
      [ -z "$sans" ] || echo "subjectAltName=$sans"
      echo "authorityKeyIdentifier=keyid"
      echo "subjectKeyIdentifier=hash"
    } >"$name.ext"
    q openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$name.key.tmp"
    q openssl req -new -key "$name.key.tmp" -subj "$subj" -out "$name.csr"
    q openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAserial ca.srl -CAcreateserial \
      -days 3650 -extfile "$name.ext" -out "$name.crt.tmp"
    chmod 600 "$name.key.tmp"
    mv "$name.key.tmp" "$name.key"; mv "$name.crt.tmp" "$name.crt"
    echo "$spec" >"$name.spec"
    rm -f "$name.csr" "$name.ext" "$name.err"
  ) || die "openssl failed while making $pki/$name.crt"
}

# What a node needs besides the CA: kube-apiserver's serving certificate also
# for the `kubernetes` Service's names and IP and the node address (Pods call
# https://kubernetes.default.svc), its client certificate for kubelets (logs,
# exec), and one client identity per node component, with the names the
# default RBAC bindings (and the Node authorizer) expect.
node_pki() { # dir
  local dir=$1
  # shellcheck source=/dev/null
  . "$dir/node-net.env"
  local svc=kubernetes.default.svc
  leaf "$dir" apiserver-serving server "/CN=kube-apiserver" \
    "IP:127.0.0.1,DNS:localhost,IP:$NODE_SERVICE_IP,IP:$NODE_ADDRESS,DNS:kubernetes,DNS:kubernetes.default,DNS:$svc,DNS:$svc.cluster.local"
  leaf "$dir" apiserver-kubelet-client client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  leaf "$dir" kube-controller-manager client "/CN=system:kube-controller-manager"
  leaf "$dir" kube-scheduler client "/CN=system:kube-scheduler"
  leaf "$dir" kubelet client "/O=system:nodes/CN=system:node:$NODE_NAME"
  leaf "$dir" kubelet-serving server "/CN=$NODE_NAME" "IP:$NODE_ADDRESS,DNS:$NODE_NAME"
  leaf "$dir" kube-proxy client "/CN=system:kube-proxy"
  leaf "$dir" coredns client "/CN=bloodraven:coredns"
}

write_kubeconfig() { # dir url [user cert-name file]
  local b64='base64 -w0' user=${3:-bloodraven-admin} cert=${4:-admin} out=${5:-$1/kubeconfig}
  cat >"$out.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: bloodraven
  cluster:
    server: $2
    certificate-authority-data: $($b64 <"$1/pki/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $($b64 <"$1/pki/$cert.crt")
    client-key-data: $($b64 <"$1/pki/$cert.key")
contexts:
- name: bloodraven
  context:
    cluster: bloodraven
    user: $user
    namespace: default
current-context: bloodraven
EOF
  chmod 600 "$out.tmp"; mv "$out.tmp" "$out"
}

write_component_kubeconfigs() { # dir url
  local c
  mkdir -p "$1/kubeconfigs"
  for c in kube-controller-manager kube-scheduler kubelet kube-proxy coredns; do
    write_kubeconfig "$1" "$2" "$c" "$c" "$1/kubeconfigs/$c.kubeconfig"
  done
}

# The line after which hack/node.sh keeps its own env lines (image refs...).
ENV_NODE_MARKER='# --- hack/node.sh ---'

write_env() { # dir url bin
  {
    printf 'export KUBECONFIG=%q\n' "$1/kubeconfig"
    printf 'export BLOODRAVEN_APISERVER_URL=%q\n' "$2"
    printf 'export BLOODRAVEN_APISERVER_CA=%q\n' "$1/pki/ca.crt"
    printf 'export BLOODRAVEN_K8S_BIN=%q\n' "$3"
    if [ -f "$1/env" ]; then sed -n "\\|^$ENV_NODE_MARKER\$|,\$p" "$1/env"; fi
  } >"$1/env.tmp"
  mv "$1/env.tmp" "$1/env"
}

# Starts NAME detached (own session, stdin closed, output to its log); pid to pids/.
spawn() { # dir name cmd...
  local dir=$1 name=$2; shift 2
  echo "===== $(date -u +%FT%TZ) starting $name =====" >>"$dir/logs/$name.log"
  detach "$@" >>"$dir/logs/$name.log" 2>&1
  echo $! >"$dir/pids/$name.pid"
}

wait_for() { # dir name what check-cmd...
  local dir=$1 name=$2 what=$3 pid deadline=$((SECONDS + TIMEOUT)); shift 3
  pid=$(cat "$dir/pids/$name.pid")
  while ((SECONDS < deadline)); do
    if "$@"; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      tail_log "$dir/logs/$name.log"; cmd_down "$dir" >/dev/null 2>&1 || true
      die "$name exited before $what"
    fi
    sleep 0.25
  done
  tail_log "$dir/logs/$name.log"; cmd_down "$dir" >/dev/null 2>&1 || true
  die "$name: timed out after ${TIMEOUT}s waiting for $what"
}

etcd_healthy() { local b; b=$(curl -sf --max-time 2 "$1/health" 2>/dev/null) && [[ $b == *'"health":"true"'* ]]; }

# The admission configuration kube-apiserver reads (DIR/admission.yaml):
# Pod Security admission enforces `baseline` in every namespace, so a Pod that
# asks for the host (privileged, hostNetwork/PID/IPC, hostPath, hostPort,
# added capabilities beyond the default set) is refused at creation, whoever
# may create Pods in its namespace. `restricted` only warns (kubectl prints
# it; the test Pods and Jobs run busybox as root, which baseline allows).
# Audit would annotate audit events; there is no audit log. No exemption: no
# Pod runs in kube-system here (kube-proxy, CoreDNS and the CNI plugins are
# host processes), and the operator's Pod in `bloodraven` meets `restricted`.
# A namespace label (pod-security.kubernetes.io/enforce) overrides the
# default; changing a Namespace's labels takes cluster-wide rights
# (namespace-admins, RBAC's `admin` role, may not).
admission_config() {
  cat <<'EOF'
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: latest
      audit: restricted
      audit-version: latest
      warn: restricted
      warn-version: latest
    exemptions:
      usernames: []
      runtimeClasses: []
      namespaces: []
EOF
}

write_admission_config() { # dir
  admission_config >"$1/admission.yaml.tmp"
  mv "$1/admission.yaml.tmp" "$1/admission.yaml"
}

# kube-apiserver's arguments (after argv[0]); is_up compares them with the
# running process (and DIR/admission.yaml with admission_config), so a
# control plane started by an older version of this script is restarted
# with the current flags.
apiserver_args() { # dir etcd-url port
  local dir=$1
  # shellcheck source=/dev/null
  . "$dir/node-net.env"
  APISERVER_ARGS=(
    --etcd-servers="$2"
    --bind-address=0.0.0.0 --advertise-address="$NODE_ADDRESS" --secure-port="$3"
    --cert-dir="$dir/pki/apiserver-cert-dir"
    --tls-cert-file="$dir/pki/apiserver-serving.crt" --tls-private-key-file="$dir/pki/apiserver-serving.key"
    --client-ca-file="$dir/pki/ca.crt"
    --authorization-mode=Node,RBAC
    --enable-admission-plugins=NodeRestriction
    --admission-control-config-file="$dir/admission.yaml"
    --service-account-issuer="$SA_ISSUER" --api-audiences="$SA_ISSUER"
    --service-account-key-file="$dir/pki/sa.pub"
    --service-account-signing-key-file="$dir/pki/sa.key"
    --service-cluster-ip-range="$SERVICE_CIDR"
    --endpoint-reconciler-type=lease
    --kubelet-client-certificate="$dir/pki/apiserver-kubelet-client.crt"
    --kubelet-client-key="$dir/pki/apiserver-kubelet-client.key"
    --kubelet-certificate-authority="$dir/pki/ca.crt"
    --kubelet-preferred-address-types=InternalIP
    --allow-privileged=true
    --profiling=false
  )
}

running_args_match() { # dir pid
  local etcd_url port want got
  # shellcheck source=/dev/null
  etcd_url=$(. "$1/ports.env" && echo "http://127.0.0.1:$ETCD_PORT")
  # shellcheck source=/dev/null
  port=$(. "$1/ports.env" && echo "$APISERVER_PORT")
  apiserver_args "$1" "$etcd_url" "$port"
  want=$(printf '%s\n' "${APISERVER_ARGS[@]}")
  got=$(tr '\0' '\n' <"/proc/$2/cmdline" 2>/dev/null | tail -n +2)
  [ "$want" = "$got" ] || return 1
  # The file is read at start only: written just before the start, so what
  # it holds is what the process runs with.
  [ "$(admission_config)" = "$(cat "$1/admission.yaml" 2>/dev/null)" ]
}

is_up() { # dir : both processes alive, current flags and readyz ok
  local dir=$1 url pid
  [ -n "$(live_pid "$dir" etcd)" ] || return 1
  pid=$(live_pid "$dir" kube-apiserver)
  [ -n "$pid" ] || return 1
  [ -f "$dir/node-net.env" ] && [ -f "$dir/ports.env" ] && running_args_match "$dir" "$pid" || return 1
  [ -f "$dir/ports.env" ] && [ -f "$dir/env" ] && [ -f "$dir/kubeconfig" ] || return 1
  # shellcheck source=/dev/null
  url=$(. "$dir/ports.env" && echo "https://127.0.0.1:$APISERVER_PORT")
  readyz "$dir" "$url"
}

cmd_up() { # dir
  local dir; dir=$(abs_dir "$1")
  local start=$SECONDS
  if is_up "$dir"; then
    log "already up ($dir)"; cat "$dir/env"; return 0
  fi
  # Half up (one process dead, or not ready): start over cleanly.
  if [ -n "$(procs_of "$dir")" ]; then log "not healthy or started with other flags: restarting"; cmd_down "$dir"; fi
  command -v curl >/dev/null || die "curl is needed"
  local bin; bin=$(k8s_bin)
  mkdir -p "$dir/logs" "$dir/pids" "$dir/etcd"; chmod 700 "$dir/etcd"
  gen_pki "$dir"
  node_net "$dir"
  node_pki "$dir"

  # Keep the ports of the previous run when they are still free (a stable URL
  # across down/up), else pick new ones.
  local ETCD_PORT='' ETCD_PEER_PORT='' APISERVER_PORT='' p
  if [ -f "$dir/ports.env" ]; then
    # shellcheck source=/dev/null
    . "$dir/ports.env"
    for p in "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT"; do
      port_free "$p" || { ETCD_PORT=''; break; }
    done
  fi
  if [ -z "$ETCD_PORT" ]; then
    read -r ETCD_PORT ETCD_PEER_PORT APISERVER_PORT <<<"$(free_ports 3)"
    printf 'ETCD_PORT=%s\nETCD_PEER_PORT=%s\nAPISERVER_PORT=%s\n' \
      "$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" >"$dir/ports.env"
  fi
  local etcd_url="http://127.0.0.1:$ETCD_PORT" peer_url="http://127.0.0.1:$ETCD_PEER_PORT"
  local url="https://127.0.0.1:$APISERVER_PORT"

  spawn "$dir" etcd "$bin/etcd" --name=bloodraven --data-dir="$dir/etcd" \
    --listen-client-urls="$etcd_url" --advertise-client-urls="$etcd_url" \
    --listen-peer-urls="$peer_url" --initial-advertise-peer-urls="$peer_url" \
    --initial-cluster="bloodraven=$peer_url" --initial-cluster-state=new \
    --unsafe-no-fsync --log-level=warn
  wait_for "$dir" etcd "/health on $etcd_url" etcd_healthy "$etcd_url"

  apiserver_args "$dir" "$etcd_url" "$APISERVER_PORT"
  write_admission_config "$dir"
  spawn "$dir" kube-apiserver "$bin/kube-apiserver" "${APISERVER_ARGS[@]}"
  wait_for "$dir" kube-apiserver "/readyz ok on $url" readyz "$dir" "$url"

  write_kubeconfig "$dir" "$url"
  write_component_kubeconfigs "$dir" "$url"
  write_env "$dir" "$url" "$bin"
  log "up in $((SECONDS - start))s: $url (etcd $etcd_url); logs in $dir/logs"
  cat "$dir/env"
}

# TERM, a bounded wait, then KILL; true when the pid is gone.
stop_pid() { # pid name
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 30 * 5; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  log "$2 (pid $pid) still alive 30s after TERM: KILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 10 * 5; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  return 1
}

cmd_down() { # dir
  local dir name pid
  [ -d "$1" ] || { log "no $1: nothing to stop"; return 0; }
  dir=$(cd "$1" && pwd)
  # A node on this control plane goes first (it deletes its Pods through the
  # API server while that still runs).
  if [ -d "$dir/node" ]; then "$root/hack/node.sh" down "$dir" || log "hack/node.sh down $dir failed"; fi
  # The API server first (it holds etcd connections), then etcd, then strays.
  for name in kube-apiserver etcd; do
    pid=$(live_pid "$dir" "$name")
    if [ -n "$pid" ]; then stop_pid "$pid" "$name" || true; log "stopped $name (pid $pid)"; fi
    rm -f "$dir/pids/$name.pid"
  done
  for pid in $(procs_of "$dir"); do
    log "stray process $pid of $dir: stopping it"; stop_pid "$pid" stray || true
  done
  local left; left=$(procs_of "$dir")
  [ -z "$left" ] || die "processes of $dir remain: $left"
}

cmd_status() { # dir
  local dir=$1 name pid url='' rc=0
  [ -d "$dir" ] || { echo "not up: no $dir"; return 1; }
  dir=$(cd "$dir" && pwd)
  for name in etcd kube-apiserver; do
    pid=$(live_pid "$dir" "$name")
    if [ -n "$pid" ]; then echo "$name: running (pid $pid)"; else echo "$name: stopped"; rc=1; fi
  done
  if [ -f "$dir/ports.env" ]; then
    # shellcheck source=/dev/null
    url=$(. "$dir/ports.env" && echo "https://127.0.0.1:$APISERVER_PORT")
  fi
  if [ -n "$url" ] && [ -f "$dir/pki/admin.crt" ] && readyz "$dir" "$url"; then
    echo "readyz: ok ($url)"
  else
    echo "readyz: not ok${url:+ ($url)}"; rc=1
  fi
  return $rc
}

[ $# -eq 2 ] || usage
case $1 in
  up) cmd_up "$2" ;;
  down) cmd_down "$2" ;;
  status) cmd_status "$2" ;;
  *) echo "$me: unknown command '$1'" >&2; usage ;;
esac
