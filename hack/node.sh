#!/usr/bin/env bash
# A single Kubernetes node on this machine, on top of hack/control-plane.sh's
# control plane in the same DIR: containerd + runc (Debian), the bridge CNI
# plugin (Debian's containernetworking-plugins), kubelet, kube-proxy
# (iptables), kube-controller-manager, kube-scheduler and CoreDNS, all as
# local processes. Pods run for real; images come from hack/node-images.sh
# (and `import`), never from a registry.
#
#   hack/node.sh up DIR                  start the control plane when needed, then the node; idempotent
#   hack/node.sh down DIR                stop everything of the node; verifies nothing is left
#   hack/node.sh status DIR              exit 0 when the node is Ready
#   hack/node.sh import DIR SRC REF      import an image into the node's containerd (namespace k8s.io)
#                                        SRC: an OCI archive (tar of a layout) or an OCI layout folder;
#                                        REF: the name Pods use, e.g. localhost/bloodraven/operator:TAG
#
# The node lives in DIR/node/: containerd/ (config.toml, root, state, socket),
# cni/ (net.d conflist, IPAM), kubelet/ (config, root dir, pod logs),
# kube-proxy/, coredns/, logs/NAME.log, pids/NAME.pid, sysctl.saved.
# Network (DIR/node-net.env, chosen by control-plane.sh): a bridge brv-XXXXXXXX
# made here, whose address NODE_ADDRESS (.1 of a /24 under 10.224.0.0/12) is
# the node's InternalIP, the Pods' gateway and CoreDNS's address; Pods get a
# route to the Service range only (no default route: nothing leaves the machine).
# `up` appends to DIR/env (after a marker line; `down` removes them):
#   BLOODRAVEN_NODE_NAME BLOODRAVEN_NODE_ADDRESS BLOODRAVEN_CONTAINERD_ADDRESS
#   BLOODRAVEN_PAUSE_IMAGE BLOODRAVEN_BUSYBOX_IMAGE
# One node per machine: kube-proxy and kubelet own machine-wide iptables chains
# (KUBE-*) and cgroups (kubepods), so `up` refuses while another DIR's node runs.
# Needs root. Timeouts: BLOODRAVEN_NODE_TIMEOUT seconds (default 90) per wait.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib/detach.sh
. "$root/hack/lib/detach.sh"
TIMEOUT=${BLOODRAVEN_NODE_TIMEOUT:-90}
me=node.sh
log() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
ENV_NODE_MARKER='# --- hack/node.sh ---'
# Kernel settings kubelet (vm.*, kernel.*) and the bridge plugin (ip_forward)
# change: saved at the first `up`, restored by `down`.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
  net.bridge.bridge-nf-call-iptables)
# Written outside DIR by kubelet, containerd's shims and libcni whatever their
# configuration; removed by `down` when `up` found them absent.
OUTSIDE=(/run/containerd /var/lib/kubelet /var/log/pods /var/log/containers /var/lib/cni)
COMPONENTS=(coredns kube-proxy kubelet kube-scheduler kube-controller-manager containerd)

abs_dir() { (cd "$1" && pwd); }

# --- processes ---------------------------------------------------------------

cmdline() { tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline"; }

# Processes of DIR's node, found by their command line (so none escapes when a
# pid file is lost): each component by the DIR path it was started with, and
# containerd's shims by the socket they serve.
procs_of() { # dir
  local n="$1/node" p cmd
  for p in /proc/[0-9]*; do
    cmd=$(cmdline "${p#/proc/}") || continue
    case $cmd in
      *" --config $n/containerd/config.toml"* | *" -address $n/containerd/containerd.sock "* | \
        *" --root-dir=$n/kubelet/root"* | *" --config=$n/kube-proxy/config.yaml"* | \
        *" -conf $n/coredns/Corefile"* | \
        *" --kubeconfig=$1/kubeconfigs/kube-controller-manager.kubeconfig"* | \
        *" --kubeconfig=$1/kubeconfigs/kube-scheduler.kubeconfig"*)
        echo "${p#/proc/}" ;;
    esac
  done
}

# Processes of Pods: everything in a kubepods cgroup (kubelet's cgroupfs tree).
container_procs() {
  local f
  for f in /sys/fs/cgroup/pids/kubepods /sys/fs/cgroup/memory/kubepods; do
    if [ -d "$f" ]; then find "$f" -name cgroup.procs -exec cat {} + 2>/dev/null || true; fi
  done | sort -un
}

# A node of another DIR (its kubelet or kube-proxy runs): prints that DIR.
other_node() { # dir
  local p cmd d
  for p in /proc/[0-9]*; do
    cmd=$(cmdline "${p#/proc/}") || continue
    case $cmd in
      *kubelet*" --root-dir="*/node/kubelet/root*) d=${cmd#* --root-dir=}; d=${d%%/node/kubelet/root*} ;;
      *kube-proxy*" --config="*/node/kube-proxy/config.yaml*) d=${cmd#* --config=}; d=${d%%/node/kube-proxy/config.yaml*} ;;
      *) continue ;;
    esac
    if [ "$d" != "$1" ]; then echo "$d"; return 0; fi
  done
}

live_pid() { # dir name
  local f="$1/node/pids/$2.pid" pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  [[ $'\n'$(procs_of "$1")$'\n' == *$'\n'"$pid"$'\n'* ]] && echo "$pid"
  return 0
}

spawn() { # dir name cmd...
  local dir=$1 name=$2; shift 2
  echo "===== $(date -u +%FT%TZ) starting $name =====" >>"$dir/node/logs/$name.log"
  detach "$@" >>"$dir/node/logs/$name.log" 2>&1
  echo $! >"$dir/node/pids/$name.pid"
}

tail_log() {
  if [ -f "$1" ]; then echo "----- last lines of $1 -----" >&2; tail -n 30 "$1" >&2; echo "-----" >&2; fi
}

wait_for() { # dir name what check-cmd...
  local dir=$1 name=$2 what=$3 pid deadline=$((SECONDS + TIMEOUT)); shift 3
  pid=$(cat "$dir/node/pids/$name.pid")
  while ((SECONDS < deadline)); do
    if "$@"; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      tail_log "$dir/node/logs/$name.log"
      die "$name exited before $what"
    fi
    sleep 0.25
  done
  tail_log "$dir/node/logs/$name.log"
  die "$name: timed out after ${TIMEOUT}s waiting for $what"
}

stop_pid() { # pid name seconds
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < ${3:-30} * 5; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  log "$2 (pid $pid) still alive ${3:-30}s after TERM: KILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 10 * 5; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  return 1
}

# --- helpers -----------------------------------------------------------------

load_net() { # dir
  [ -f "$1/node-net.env" ] || die "no $1/node-net.env: start the control plane first (hack/control-plane.sh up $1)"
  # shellcheck source=/dev/null
  . "$1/node-net.env"
}

k8s_bin() { # dir
  local b
  b=$(sed -n 's/^export BLOODRAVEN_K8S_BIN=//p' "$1/env" 2>/dev/null | head -n 1)
  local c
  for c in kubectl kubelet kube-proxy kube-controller-manager kube-scheduler coredns; do
    if ! [ -x "$b/$c" ]; then
      b=$("$root/hack/build-k8s.sh" | tail -n 1) || die "hack/build-k8s.sh failed"
      break
    fi
  done
  for c in kubectl kubelet kube-proxy kube-controller-manager kube-scheduler coredns; do
    [ -x "$b/$c" ] || die "$b lacks $c (hack/build-k8s.sh)"
  done
  echo "$b"
}

kc() { "$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" "$@"; }
ctr_() { ctr --address "$DIR/node/containerd/containerd.sock" --namespace k8s.io "$@"; }

# Ready, and (when SINCE is set: during `up`) reported by this kubelet, not
# a stale condition left in the API by an earlier run.
node_ready() {
  local st
  st=$(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}' 2>/dev/null) || return 1
  [ "${st%% *}" = True ] || return 1
  [ -z "${SINCE:-}" ] || [[ ! ${st#* } < $SINCE ]]
}
containerd_ready() { ctr_ version >/dev/null 2>&1; }
coredns_ready() { curl -sf --max-time 2 "http://$NODE_ADDRESS:8181/ready" >/dev/null 2>&1; }
# kube-proxy's and kubelet's health servers listen on 127.0.0.1 only (Pods
# reach the node address, not the host's loopback).
proxy_ready() { curl -sf --max-time 2 "http://127.0.0.1:10256/healthz" >/dev/null 2>&1; }
kubelet_healthy() { curl -sf --max-time 2 "http://127.0.0.1:10248/healthz" >/dev/null 2>&1; }

# --- configuration -------------------------------------------------------------

write_configs() { # dir pause-ref
  local dir=$1 n="$1/node" pause=$2
  mkdir -p "$n/containerd" "$n/cni/net.d" "$n/cni/ipam" "$n/kubelet/root" "$n/kubelet/pki" \
    "$n/kubelet/pod-logs" "$n/kube-proxy" "$n/coredns" "$n/logs" "$n/pids"
  # containerd 1.6 (config version 2). Why each non-default line: hack/README.md.
  cat >"$n/containerd/config.toml" <<EOF
version = 2
root = "$n/containerd/root"
state = "$n/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$n/containerd/containerd.sock"
[ttrpc]
  address = "$n/containerd/containerd.sock.ttrpc"
[debug]
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "$n/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$n/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$n/cni/net.d"
    max_conf_num = 1
EOF
  cat >"$n/cni/net.d/10-bloodraven.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "bloodraven-$NODE_BRIDGE",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$NODE_BRIDGE",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$NODE_POD_SUBNET", "gateway": "$NODE_ADDRESS"}]],
        "routes": [{"dst": "$NODE_SERVICE_CIDR"}],
        "dataDir": "$n/cni/ipam"
      }
    }
  ]
}
EOF
  echo "nameserver $NODE_ADDRESS" >"$n/kubelet/resolv.conf"
  cat >"$n/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: $NODE_ADDRESS
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $dir/pki/kubelet-serving.crt
tlsPrivateKeyFile: $dir/pki/kubelet-serving.key
rotateCertificates: false
serverTLSBootstrap: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: [$NODE_ADDRESS]
resolvConf: $n/kubelet/resolv.conf
containerRuntimeEndpoint: unix://$n/containerd/containerd.sock
imageServiceEndpoint: unix://$n/containerd/containerd.sock
serializeImagePulls: false
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {"memory.available": "100Mi", "nodefs.available": "256Mi", "nodefs.inodesFree": "1%", "imagefs.available": "256Mi"}
podLogsDir: $n/kubelet/pod-logs
EOF
  cat >"$n/kube-proxy/config.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $dir/kubeconfigs/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $NODE_NAME
bindAddress: $NODE_ADDRESS
clusterCIDR: $NODE_POD_SUBNET
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [$NODE_ADDRESS/32]
iptables: {localhostNodePorts: false, syncPeriod: 30s, minSyncPeriod: 0s}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s, udpTimeout: 0s, udpStreamTimeout: 0s}
EOF
  cat >"$n/coredns/Corefile" <<EOF
.:53 {
    bind $NODE_ADDRESS
    errors
    ready $NODE_ADDRESS:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $dir/kubeconfigs/coredns.kubeconfig bloodraven
        pods insecure
        ttl 5
    }
    cache 5
    loadbalance
}
EOF
}

coredns_rbac() {
  kc apply -f - >/dev/null <<'EOF'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "bloodraven:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "bloodraven:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "bloodraven:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "bloodraven:coredns"}
EOF
}

# --- host state: sysctls, outside paths, bridge ---------------------------------

save_host_state() { # dir
  local n="$1/node" k p
  if ! [ -f "$n/sysctl.saved" ]; then
    for k in "${SYSCTLS[@]}"; do
      [ -e "/proc/sys/${k//.//}" ] && echo "$k=$(cat "/proc/sys/${k//.//}")"
    done >"$n/sysctl.saved.tmp"
    mv "$n/sysctl.saved.tmp" "$n/sysctl.saved"
  fi
  if ! [ -f "$n/outside.created" ]; then
    for p in "${OUTSIDE[@]}"; do [ -e "$p" ] || echo "$p"; done >"$n/outside.created.tmp"
    mv "$n/outside.created.tmp" "$n/outside.created"
  fi
}

bridge_up() {
  if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    ip link add "$NODE_BRIDGE" type bridge
  fi
  ip addr replace "$NODE_ADDRESS/24" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
  # The Service range goes to the bridge (from the node address), so traffic
  # to a ClusterIP never follows the default route off the machine, even
  # before kube-proxy has a rule for it.
  ip route replace "$NODE_SERVICE_CIDR" dev "$NODE_BRIDGE" src "$NODE_ADDRESS"
  # Pods reach Service backends through the host (DNAT, then routed back to
  # the bridge): forwarding and bridge netfilter must be on.
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
}

# --- up -------------------------------------------------------------------------

write_env_lines() { # dir pause busybox
  local f="$1/env"
  {
    sed "\\|^$ENV_NODE_MARKER\$|,\$d" "$f"
    echo "$ENV_NODE_MARKER"
    printf 'export BLOODRAVEN_NODE_NAME=%q\n' "$NODE_NAME"
    printf 'export BLOODRAVEN_NODE_ADDRESS=%q\n' "$NODE_ADDRESS"
    printf 'export BLOODRAVEN_CONTAINERD_ADDRESS=%q\n' "$1/node/containerd/containerd.sock"
    printf 'export BLOODRAVEN_PAUSE_IMAGE=%q\n' "$2"
    printf 'export BLOODRAVEN_BUSYBOX_IMAGE=%q\n' "$3"
  } >"$f.tmp"
  mv "$f.tmp" "$f"
}

# Up: every component runs, the node is Ready, and kube-proxy and kubelet
# answer on 127.0.0.1 (a node started by an older version of this script has
# them on the node address, where Pods reached them: it is restarted).
is_up() { # dir
  local c
  for c in "${COMPONENTS[@]}"; do [ -n "$(live_pid "$1" "$c")" ] || return 1; done
  grep -qx "$ENV_NODE_MARKER" "$1/env" 2>/dev/null && node_ready && proxy_ready && kubelet_healthy
}

import_image() { # src ref
  local src=$1 ref=$2 name tag
  name=${ref%:*}; tag=${ref##*:}
  [ "$name" != "$ref" ] && [[ $tag != */* ]] || die "import: REF must be NAME:TAG (got '$ref')"
  # An OCI archive's index names its manifest by tag only (umoci writes
  # that); --base-name makes it NAME:TAG, --digests also NAME@DIGEST. The
  # manifest's digest (ctr prints it) is then tagged REF, and the names the
  # import added besides REF are removed again.
  local before out digest
  before=$(ctr_ images ls -q)
  if [ -d "$src" ]; then
    [ -f "$src/index.json" ] || die "import: $src is not an OCI layout (no index.json)"
    out=$(tar -C "$src" -cf - . | ctr_ images import --base-name "$name" --digests -) || die "import of $src failed"
  else
    [ -f "$src" ] || die "import: no $src"
    out=$(ctr_ images import --base-name "$name" --digests "$src") || die "import of $src failed"
  fi
  digest=$(sed -n 's/^unpacking [^ ]*@sha256:[0-9a-f]* (\(sha256:[0-9a-f]\{64\}\)).*/\1/p' <<<"$out" | head -n 1)
  [ -n "$digest" ] || die "import of $src: no manifest digest in ctr's output: $out"
  ctr_ images tag --force "$name@$digest" "$ref" >/dev/null || die "import of $src: cannot tag $ref"
  local extra
  extra=$(ctr_ images ls -q | grep -vxF "$ref" | grep -v '^sha256:' | grep -vxF -f <(echo "$before") || true)
  if [ -n "$extra" ]; then ctr_ images rm $extra >/dev/null; fi
  log "imported $ref ($digest)"
}

cmd_up() {
  [ "$(id -u)" = 0 ] || die "needs root (kubelet, containerd, iptables, a bridge)"
  local c
  for c in containerd containerd-shim-runc-v2 runc ctr ip iptables iptables-save curl umoci; do
    command -v "$c" >/dev/null || die "$c is missing (.ci/run lists the Debian packages the node needs)"
  done
  [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] ||
    die "the CNI plugins are missing in /usr/lib/cni (apt-get install containernetworking-plugins)"
  local start=$SECONDS
  DIR=$(realpath -m "$1")
  local other; other=$(other_node "$DIR")
  [ -z "$other" ] || die "another node runs on this machine: $other (one node per machine: stop it with hack/node.sh down $other)"
  local sock="$DIR/node/containerd/containerd.sock.ttrpc"
  [ ${#sock} -lt 100 ] || die "DIR is too long for containerd's socket paths ($sock: ${#sock} > 99 characters)"

  "$root/hack/control-plane.sh" up "$DIR" >/dev/null
  load_net "$DIR"
  BIN=$(k8s_bin "$DIR")
  if is_up "$DIR"; then
    log "already up ($DIR)"; sed -n "\\|^$ENV_NODE_MARKER\$|,\$p" "$DIR/env"; return 0
  fi
  if [ -n "$(procs_of "$DIR")" ]; then log "not healthy or started with other settings: restarting"; cmd_down "$DIR"; fi
  local n="$DIR/node"
  mkdir -p "$n/logs" "$n/pids"

  local pause busybox line
  while read -r line; do
    case $line in
      localhost/bloodraven/pause:*) pause=$line ;;
      localhost/bloodraven/busybox:*) busybox=$line ;;
    esac
  done < <("$root/hack/node-images.sh" build)
  [ -n "${pause:-}" ] && [ -n "${busybox:-}" ] || die "hack/node-images.sh build did not print both images"

  # From here on a failed `up` takes down what it started (logs stay).
  trap 'rc=$?; if [ $rc -ne 0 ]; then log "up failed: stopping what it started"; (cmd_down "$DIR") >&2 || true; fi' EXIT
  save_host_state "$DIR"
  write_configs "$DIR" "${pause%% *}"
  bridge_up

  SINCE=$(date -u +%FT%TZ)
  spawn "$DIR" containerd containerd --config "$n/containerd/config.toml"
  wait_for "$DIR" containerd "its socket to answer" containerd_ready
  import_image "${pause#* }" "${pause%% *}"
  import_image "${busybox#* }" "${busybox%% *}"

  coredns_rbac
  spawn "$DIR" kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$DIR/kubeconfigs/kube-controller-manager.kubeconfig" \
    --service-account-private-key-file="$DIR/pki/sa.key" --root-ca-file="$DIR/pki/ca.crt" \
    --use-service-account-credentials=true --leader-elect=false --secure-port=0 \
    --controllers='*,-nodeipam,-csrsigning'
  spawn "$DIR" kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig="$DIR/kubeconfigs/kube-scheduler.kubeconfig" --leader-elect=false --secure-port=0
  spawn "$DIR" kube-proxy "$BIN/kube-proxy" --config="$n/kube-proxy/config.yaml"
  spawn "$DIR" coredns "$BIN/coredns" -conf "$n/coredns/Corefile"
  spawn "$DIR" kubelet "$BIN/kubelet" --config="$n/kubelet/config.yaml" \
    --kubeconfig="$DIR/kubeconfigs/kubelet.kubeconfig" --root-dir="$n/kubelet/root" \
    --cert-dir="$n/kubelet/pki" --hostname-override="$NODE_NAME" --node-ip="$NODE_ADDRESS"

  wait_for "$DIR" kubelet "node $NODE_NAME Ready" node_ready
  wait_for "$DIR" kube-proxy "its first sync (healthz)" proxy_ready
  wait_for "$DIR" coredns "ready" coredns_ready
  for c in "${COMPONENTS[@]}"; do
    [ -n "$(live_pid "$DIR" "$c")" ] || { tail_log "$n/logs/$c.log"; die "$c exited"; }
  done
  write_env_lines "$DIR" "${pause%% *}" "${busybox%% *}"
  trap - EXIT
  log "up in $((SECONDS - start))s: node $NODE_NAME Ready at $NODE_ADDRESS (bridge $NODE_BRIDGE); logs in $n/logs"
  sed -n "\\|^$ENV_NODE_MARKER\$|,\$p" "$DIR/env"
}

# --- down -----------------------------------------------------------------------

apiserver_ok() {
  "$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" --request-timeout=3s get --raw /readyz >/dev/null 2>&1
}

# Pods are deleted through the API while kubelet runs, so kubelet stops their
# sandboxes (CNI DEL: veths and IPAM entries go). Controllers and the
# scheduler are stopped first so nothing replaces them.
delete_pods() {
  [ -n "$(live_pid "$DIR" kubelet)" ] && [ -n "${BIN:-}" ] && apiserver_ok || return 0
  local c pid
  for c in kube-controller-manager kube-scheduler; do
    pid=$(live_pid "$DIR" "$c")
    if [ -n "$pid" ]; then stop_pid "$pid" "$c" 10 || true; fi
  done
  kc delete pods --all-namespaces --all --grace-period=5 --wait=false >/dev/null 2>&1 || true
  local deadline=$((SECONDS + 45)) left
  while ((SECONDS < deadline)); do
    left=$(kc get pods --all-namespaces --field-selector "spec.nodeName=$NODE_NAME" -o name 2>/dev/null | wc -l)
    [ "$left" = 0 ] && break
    sleep 0.5
  done
  [ "$left" = 0 ] || log "$left Pod(s) still on the node after 45s; they are killed below"
  # The Node object goes too: the next `up` waits for a fresh registration.
  kc delete node "$NODE_NAME" --wait=false >/dev/null 2>&1 || true
}

# Every rule that jumps to CHAINS is deleted, then the chains themselves.
delete_chains() { # iptables-cmd pattern
  local ipt=$1 pat=$2 table rule chains c
  command -v "$ipt-save" >/dev/null || return 0
  for table in filter nat mangle raw; do
    chains=$("$ipt-save" -t "$table" 2>/dev/null | sed -n "s/^:\($pat[^ ]*\) .*/\1/p") || true
    [ -n "$chains" ] || continue
    # Rules (in any chain) that reference one of them; deleted by their spec.
    while read -r rule; do
      [ -n "$rule" ] || continue
      eval "\"$ipt\" -w -t \"$table\" -D ${rule#-A }" 2>/dev/null || true
    done < <("$ipt-save" -t "$table" | grep -E "^-A " | grep -E -- "-j ($pat)" || true)
    for c in $chains; do "$ipt" -w -t "$table" -F "$c" 2>/dev/null || true; done
    for c in $chains; do "$ipt" -w -t "$table" -X "$c" 2>/dev/null || true; done
  done
}

remaining_chains() { # prints leftovers
  local ipt t
  for ipt in iptables ip6tables; do
    command -v "$ipt-save" >/dev/null || continue
    for t in filter nat mangle raw; do
      "$ipt-save" -t "$t" 2>/dev/null | sed -n "s/^:\(KUBE-[^ ]*\|CNI-[^ ]*\) .*/$ipt $t \1/p"
    done
  done
}

mounts_under() { # dir : mount points, deepest first
  awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-
}

cmd_down() {
  [ -d "$1" ] || { log "no $1: nothing to stop"; return 0; }
  DIR=$(abs_dir "$1")
  local n="$DIR/node" pid c
  [ -d "$n" ] || { log "no node in $DIR"; return 0; }
  [ -f "$DIR/node-net.env" ] && load_net "$DIR"
  BIN=$(sed -n 's/^export BLOODRAVEN_K8S_BIN=//p' "$DIR/env" 2>/dev/null | head -n 1)
  [ -x "${BIN:-/nonexistent}/kubectl" ] || BIN=''
  # What is machine-wide (processes in kubepods cgroups, KUBE-* chains, the
  # cgroups themselves, paths outside DIR, kernel settings) belongs to the
  # node that runs: when another DIR's node runs, this down leaves it all
  # alone (a stale DIR, e.g. the e2e's after a playground came up, must not
  # kill the playground's containers or turn its ip_forward off).
  local other; other=$(other_node "$DIR")
  [ -z "$other" ] || log "the node of $other runs: leaving machine-wide state (containers, chains, cgroups, sysctls) to it"

  delete_pods
  for c in "${COMPONENTS[@]}"; do
    [ "$c" = containerd ] && continue
    pid=$(live_pid "$DIR" "$c")
    if [ -n "$pid" ]; then stop_pid "$pid" "$c" 20 || true; log "stopped $c (pid $pid)"; fi
  done
  # Whatever kubelet did not stop: containerd's tasks and containers.
  if [ -n "$(live_pid "$DIR" containerd)" ]; then
    local ids
    ids=$(ctr_ tasks ls -q 2>/dev/null || true)
    for c in $ids; do ctr_ tasks kill -a -s SIGKILL "$c" >/dev/null 2>&1 || true; done
    for c in $ids; do ctr_ tasks delete -f "$c" >/dev/null 2>&1 || true; done
    ids=$(ctr_ containers ls -q 2>/dev/null || true)
    for c in $ids; do ctr_ containers delete "$c" >/dev/null 2>&1 || true; done
    pid=$(live_pid "$DIR" containerd)
    stop_pid "$pid" containerd 20 || true; log "stopped containerd (pid $pid)"
  fi
  for pid in $(procs_of "$DIR"); do
    log "stray process $pid ($(cmdline "$pid" | cut -c1-80)): stopping it"; stop_pid "$pid" stray 5 || true
  done
  if [ -z "$other" ]; then
    for pid in $(container_procs); do kill -KILL "$pid" 2>/dev/null || true; done
  fi
  rm -f "$n"/pids/*.pid

  # Mounts: kubelet's volumes and root dir, containerd's rootfs, shm, netns.
  local m
  for m in $(mounts_under "$DIR"); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  for m in $(mounts_under "$DIR"); do umount -l "$m" 2>/dev/null || true; done
  # Runtime state (kept: containerd's root with the imported images).
  rm -rf "$n/containerd/state" "$n/containerd/runc" "$n/kubelet/root" "$n/cni/ipam" 2>/dev/null || true

  # Network: veths left on the bridge, the bridge (its routes go with it).
  if [ -n "${NODE_BRIDGE:-}" ] && ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    for c in $(ip -o link show master "$NODE_BRIDGE" 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
      ip link delete "$c" 2>/dev/null || true
    done
    ip link delete "$NODE_BRIDGE" || true
  fi
  # kube-proxy's and kubelet's iptables chains (v4 and v6). KUBE-* belongs to
  # this node only: `up` refuses to start a second one. CNI-* chains come from
  # the bridge plugin's masquerading, which this node does not use; any
  # left on the machine with our network's name are removed too.
  if [ -z "$other" ]; then
    if [ -n "$BIN" ] && [ -x "$BIN/kube-proxy" ]; then "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
    delete_chains iptables 'KUBE-'
    delete_chains ip6tables 'KUBE-'
  fi
  if [ -n "${NODE_BRIDGE:-}" ]; then
    local cni
    cni=$(iptables-save -t nat 2>/dev/null | grep -F "bloodraven-$NODE_BRIDGE" | grep -oE -- '-j CNI-[0-9a-f]+' | cut -c4- | sort -u || true)
    if [ -n "$cni" ]; then delete_chains iptables "$(echo "$cni" | paste -sd'|')"; fi
  fi

  # kubelet's cgroups (cgroupfs driver), deepest first, in every hierarchy.
  if [ -z "$other" ]; then
    local cg
    for cg in /sys/fs/cgroup/*/kubepods; do
      [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
    done
  fi

  # What kubelet, the shims and libcni wrote outside DIR, when up found it absent.
  if [ -z "$other" ] && [ -f "$n/outside.created" ]; then
    local p
    while read -r p; do
      [ -n "$p" ] || continue
      for m in $(mounts_under "$p"); do umount -l "$m" 2>/dev/null || true; done
      rm -rf "$p"
    done <"$n/outside.created"
    rm -f "$n/outside.created"
  fi

  # Kernel settings, as they were before the first up.
  if [ -z "$other" ] && [ -f "$n/sysctl.saved" ]; then
    local kv
    while read -r kv; do
      [ -n "$kv" ] && sysctl -qw "$kv" 2>/dev/null || log "could not restore $kv"
    done <"$n/sysctl.saved"
    rm -f "$n/sysctl.saved"
  fi
  if [ -f "$DIR/env" ] && grep -qx "$ENV_NODE_MARKER" "$DIR/env"; then
    sed "\\|^$ENV_NODE_MARKER\$|,\$d" "$DIR/env" >"$DIR/env.tmp" && mv "$DIR/env.tmp" "$DIR/env"
  fi

  # Verify.
  local problems=()
  local left; left=$(procs_of "$DIR")
  [ -z "$left" ] || problems+=("processes of the node: $left")
  if [ -z "$other" ]; then
    left=$(container_procs | tr '\n' ' ')
    [ -z "${left// /}" ] || problems+=("processes in kubepods cgroups: $left")
  fi
  left=$(mounts_under "$DIR" | tr '\n' ' ')
  [ -z "${left// /}" ] || problems+=("mounts under $DIR: $left")
  if [ -n "${NODE_BRIDGE:-}" ] && ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then problems+=("the bridge $NODE_BRIDGE"); fi
  if [ -z "$other" ]; then
    left=$(remaining_chains | tr '\n' ';')
    [ -z "$left" ] || problems+=("iptables chains: $left")
    left=$(ls -d /sys/fs/cgroup/*/kubepods 2>/dev/null | tr "\n" " " || true)
    [ -z "$left" ] || problems+=("cgroups: $left")
  fi
  if [ ${#problems[@]} -gt 0 ]; then
    local p
    for p in "${problems[@]}"; do log "left behind: $p"; done
    die "down of $DIR left the above behind"
  fi
  log "node of $DIR stopped; nothing left behind"
}

# --- status / import ---------------------------------------------------------

cmd_status() {
  [ -d "$1" ] || { echo "not up: no $1"; return 1; }
  DIR=$(abs_dir "$1")
  local c pid rc=0
  for c in "${COMPONENTS[@]}"; do
    pid=$(live_pid "$DIR" "$c")
    if [ -n "$pid" ]; then echo "$c: running (pid $pid)"; else echo "$c: stopped"; rc=1; fi
  done
  if [ -f "$DIR/node-net.env" ] && [ -f "$DIR/env" ]; then
    load_net "$DIR"
    BIN=$(sed -n 's/^export BLOODRAVEN_K8S_BIN=//p' "$DIR/env" | head -n 1)
    if [ -x "$BIN/kubectl" ] && node_ready; then echo "node $NODE_NAME: Ready"; else echo "node ${NODE_NAME:-?}: not Ready"; rc=1; fi
  else
    echo "node: not Ready (no control plane in $DIR)"; rc=1
  fi
  return $rc
}

cmd_import() { # dir src ref
  DIR=$(abs_dir "$1")
  [ -n "$(live_pid "$DIR" containerd)" ] || die "the node of $DIR is not up (hack/node.sh up $DIR)"
  # One import at a time per node: an import removes the names it added
  # besides REF (the difference of two listings), so a concurrent import's
  # new name would be removed too (e2e test files run side by side).
  local fd
  exec {fd}>"$DIR/node-import.lock"
  flock "$fd"
  import_image "$2" "$3"
}

case ${1:-} in
  up) [ $# -eq 2 ] || usage; cmd_up "$2" ;;
  down) [ $# -eq 2 ] || usage; cmd_down "$2" ;;
  status) [ $# -eq 2 ] || usage; cmd_status "$2" ;;
  import) [ $# -eq 4 ] || usage; cmd_import "$2" "$3" "$4" ;;
  *) usage ;;
esac
