#!/usr/bin/env bash
# A bare Kubernetes control plane as local processes on 127.0.0.1: etcd and
# kube-apiserver, configured the way controller-runtime's envtest does (RBAC,
# service-account tokens, no ServiceAccount admission plugin). There is no
# kube-controller-manager and no kubelet: namespaces are never finalized and
# no `default` ServiceAccount appears; that is expected.
#
#   hack/control-plane.sh up DIR      # start (or, when already up, just reprint DIR/env)
#   hack/control-plane.sh down DIR    # stop every process of DIR; verifies none remains
#   hack/control-plane.sh status DIR  # exit 0 when up and /readyz is ok, 1 otherwise
#
# DIR holds pki/ (CA, serving and admin client certs, service-account keys;
# kept across down/up), etcd/ (data, kept), logs/{etcd,kube-apiserver}.log,
# pids/, ports.env, kubeconfig (admin = CN bloodraven-admin, O system:masters;
# certs embedded) and env (shell `export` lines, also printed by `up`):
#   KUBECONFIG BLOODRAVEN_APISERVER_URL BLOODRAVEN_APISERVER_CA BLOODRAVEN_K8S_BIN
# Binaries come from hack/build-k8s.sh (or from $BLOODRAVEN_K8S_BIN when it
# is set and holds etcd, kube-apiserver and kubectl).
# Timeouts: BLOODRAVEN_CONTROL_PLANE_TIMEOUT seconds (default 90) per wait.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
TIMEOUT=${BLOODRAVEN_CONTROL_PLANE_TIMEOUT:-90}
# The issuer is also the default audience of TokenRequest (as in a real cluster).
SA_ISSUER=https://kubernetes.default.svc.cluster.local
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
    q openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out apiserver.key
    q openssl req -new -key apiserver.key -subj "/CN=kube-apiserver" -out apiserver.csr
    q openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -CAserial ca.srl \
      -days 3650 -extfile leaf.ext -extensions server -out apiserver.crt
    q openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out admin.key
    q openssl req -new -key admin.key -subj "/O=system:masters/CN=bloodraven-admin" -out admin.csr
    q openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAserial ca.srl \
      -days 3650 -extfile leaf.ext -extensions client -out admin.crt
    q openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key
    q openssl pkey -in sa.key -pubout -out sa.pub
    rm -f ./*.csr openssl.err
  ) || die "openssl failed while generating $pki"
  touch "$pki/.complete"
}

write_kubeconfig() { # dir url
  local b64='base64 -w0'
  cat >"$1/kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: bloodraven
  cluster:
    server: $2
    certificate-authority-data: $($b64 <"$1/pki/ca.crt")
users:
- name: bloodraven-admin
  user:
    client-certificate-data: $($b64 <"$1/pki/admin.crt")
    client-key-data: $($b64 <"$1/pki/admin.key")
contexts:
- name: bloodraven
  context:
    cluster: bloodraven
    user: bloodraven-admin
    namespace: default
current-context: bloodraven
EOF
  chmod 600 "$1/kubeconfig.tmp"; mv "$1/kubeconfig.tmp" "$1/kubeconfig"
}

write_env() { # dir url bin
  {
    printf 'export KUBECONFIG=%q\n' "$1/kubeconfig"
    printf 'export BLOODRAVEN_APISERVER_URL=%q\n' "$2"
    printf 'export BLOODRAVEN_APISERVER_CA=%q\n' "$1/pki/ca.crt"
    printf 'export BLOODRAVEN_K8S_BIN=%q\n' "$3"
  } >"$1/env.tmp"
  mv "$1/env.tmp" "$1/env"
}

# Starts NAME detached (own session, stdin closed, output to its log); pid to pids/.
spawn() { # dir name cmd...
  local dir=$1 name=$2; shift 2
  echo "===== $(date -u +%FT%TZ) starting $name =====" >>"$dir/logs/$name.log"
  setsid "$@" </dev/null >>"$dir/logs/$name.log" 2>&1 &
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

is_up() { # dir : both processes alive and readyz ok
  local dir=$1 url
  [ -n "$(live_pid "$dir" etcd)" ] && [ -n "$(live_pid "$dir" kube-apiserver)" ] || return 1
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
  if [ -n "$(procs_of "$dir")" ]; then log "not healthy: restarting"; cmd_down "$dir"; fi
  command -v curl >/dev/null || die "curl is needed"
  local bin; bin=$(k8s_bin)
  mkdir -p "$dir/logs" "$dir/pids" "$dir/etcd"; chmod 700 "$dir/etcd"
  gen_pki "$dir"

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

  spawn "$dir" kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers="$etcd_url" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
    --cert-dir="$dir/pki/apiserver-cert-dir" \
    --tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
    --client-ca-file="$dir/pki/ca.crt" \
    --authorization-mode=RBAC \
    --service-account-issuer="$SA_ISSUER" --api-audiences="$SA_ISSUER" \
    --service-account-key-file="$dir/pki/sa.pub" \
    --service-account-signing-key-file="$dir/pki/sa.key" \
    --service-cluster-ip-range=10.96.0.0/24 \
    --allow-privileged=true \
    --disable-admission-plugins=ServiceAccount \
    --endpoint-reconciler-type=none \
    --profiling=false
  wait_for "$dir" kube-apiserver "/readyz ok on $url" readyz "$dir" "$url"

  write_kubeconfig "$dir" "$url"
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
