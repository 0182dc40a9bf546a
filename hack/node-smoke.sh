#!/usr/bin/env bash
# A first proof of the node, with kubectl only: run after `hack/node.sh up DIR`.
# Exits non-zero on the first failed check (and says which); prints one line
# per check and a closing "N passed, N failed" line.
#
#   hack/node-smoke.sh DIR
#
# Checks, in a namespace of its own (deleted at the end, which is a check too):
#   - a new namespace gets its `default` ServiceAccount (kube-controller-manager)
#   - a Job whose Pod has a native sidecar (init container, restartPolicy
#     Always) and a main container that exits 0 completes; the sidecar is stopped
#   - main exits 1 with backoffLimit 0: the Job is Failed, with exactly one Pod
#   - activeDeadlineSeconds ends a stuck Job as Failed, reason DeadlineExceeded
#   - a Pod resolves kubernetes.default.svc.cluster.local and the echo Service's
#     name through CoreDNS, and reaches the Service's ClusterIP (busybox nc)
#   - the host reaches the ClusterIP too; kubectl logs and exec work
#   - deleting the namespace finalizes it
set -euo pipefail
[ $# -eq 1 ] || { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
dir=$(cd "$1" && pwd)
[ -f "$dir/env" ] || { echo "node-smoke: no $dir/env (hack/node.sh up $dir)" >&2; exit 1; }
# shellcheck source=/dev/null
. "$dir/env"
export PATH="$BLOODRAVEN_K8S_BIN:$PATH"
[ -n "${BLOODRAVEN_BUSYBOX_IMAGE:-}" ] || { echo "node-smoke: no node in $dir (hack/node.sh up $dir)" >&2; exit 1; }
img=$BLOODRAVEN_BUSYBOX_IMAGE
ns=node-smoke-$(head -c 3 /dev/urandom | od -An -tx1 | tr -d ' \n')
passed=0
start=$SECONDS

ok() { passed=$((passed + 1)); printf 'node-smoke: ok   %-58s (%ss)\n' "$1" "$((SECONDS - start))"; }
fail() {
  echo "node-smoke: FAIL $1" >&2
  kubectl -n "$ns" get jobs,pods,svc,endpointslices -o wide >&2 2>/dev/null || true
  echo "$passed passed, 1 failed"
  exit 1
}
cleanup() { kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT
until_true() { # seconds cmd...
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do ((SECONDS < deadline)) || return 1; sleep 0.5; done
}
jp() { kubectl -n "$ns" get "$1" -o jsonpath="$2" 2>/dev/null; }

# --- namespace and ServiceAccount
kubectl create namespace "$ns" >/dev/null
has_default_sa() { kubectl -n "$ns" get serviceaccount default >/dev/null 2>&1; }
until_true 30 has_default_sa || fail "namespace $ns got no default ServiceAccount in 30s"
ok "a new namespace gets its default ServiceAccount"

job() { # name backoffLimit activeDeadlineSeconds main-command
  cat <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: $1, namespace: $ns}
spec:
  backoffLimit: $2
  ${3:+activeDeadlineSeconds: $3}
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 5
      initContainers:
      - name: sidecar
        image: $img
        imagePullPolicy: IfNotPresent
        restartPolicy: Always
        command: ["/bin/sh", "-c", "trap 'echo sidecar got TERM; exit 0' TERM; echo sidecar up; while true; do sleep 3600 & wait \$!; done"]
      containers:
      - name: main
        image: $img
        imagePullPolicy: IfNotPresent
        command: ["/bin/sh", "-c", "$4"]
EOF
}

# --- Jobs (created together; checked one by one)
{
  job complete 0 "" "echo main; ls /var/run/secrets/kubernetes.io/serviceaccount/token; sleep 2; exit 0"
  echo ---
  job fail 0 "" "echo main fails; exit 1"
  echo ---
  job deadline 3 5 "sleep 3600"
} | kubectl apply -f - >/dev/null

kubectl -n "$ns" wait --for=condition=Complete job/complete --timeout=90s >/dev/null ||
  fail "Job complete (native sidecar, main exits 0) did not complete in 90s"
pod=$(kubectl -n "$ns" get pods -l job-name=complete -o name | head -n 1)
sidecar_stopped() { [ -n "$(jp "$pod" '{.status.initContainerStatuses[?(@.name=="sidecar")].state.terminated}')" ]; }
until_true 30 sidecar_stopped || fail "the sidecar of $pod is not stopped 30s after the Job completed"
[ "$(jp "$pod" '{.status.phase}')" = Succeeded ] || fail "$pod is $(jp "$pod" '{.status.phase}'), not Succeeded"
ok "Job with a native sidecar completes; the sidecar is stopped"

kubectl -n "$ns" wait --for=condition=Failed job/fail --timeout=90s >/dev/null ||
  fail "Job fail (main exits 1, backoffLimit 0) did not fail in 90s"
sleep 3 # time for a (wrong) second Pod to appear
n=$(kubectl -n "$ns" get pods -l job-name=fail -o name | wc -l)
[ "$n" = 1 ] || fail "Job fail has $n Pods, not exactly 1"
ok "main exits 1, backoffLimit 0: Job Failed with exactly one Pod"

kubectl -n "$ns" wait --for=condition=Failed job/deadline --timeout=60s >/dev/null ||
  fail "Job deadline (activeDeadlineSeconds 5) did not fail in 60s"
reason=$(jp job/deadline '{.status.conditions[?(@.type=="Failed")].reason}')
[ "$reason" = DeadlineExceeded ] || fail "Job deadline failed with reason '$reason', not DeadlineExceeded"
ok "activeDeadlineSeconds ends a stuck Job: Failed, DeadlineExceeded"

# --- a Service in front of a busybox nc server: -ll -e is a persistent
# server, one `echo pong` per connection (a loop around a one-shot `nc -l`
# refuses connections between two clients, the readiness probe's included).
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: echo, namespace: $ns, labels: {app: echo}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: echo
    image: $img
    imagePullPolicy: IfNotPresent
    command: ["nc", "-ll", "-p", "8080", "-e", "echo", "pong"]
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: $ns}
spec:
  selector: {app: echo}
  ports: [{port: 80, targetPort: 8080}]
EOF
kubectl -n "$ns" wait --for=condition=Ready pod/echo --timeout=60s >/dev/null || fail "the echo Pod is not Ready in 60s"
cip=$(jp svc/echo '{.spec.clusterIP}')
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: $ns}
spec:
  restartPolicy: Never
  containers:
  - name: client
    image: $img
    imagePullPolicy: IfNotPresent
    command:
    - /bin/sh
    - -c
    - |
      set -e
      nslookup kubernetes.default.svc.cluster.local | grep -qx 'Address: 10.96.0.1'
      echo resolved-kubernetes
      nslookup echo.$ns.svc.cluster.local | grep -qx "Address: $cip"
      echo resolved-echo
      for i in 1 2 3 4 5; do
        out=\$(nc -w 3 echo.$ns.svc.cluster.local 80 </dev/null || true)
        [ "\$out" = pong ] && { echo reached-echo; break; }
        sleep 1
      done
      [ "\$out" = pong ]
      out=\$(nc -w 3 $cip 80 </dev/null)
      [ "\$out" = pong ] && echo reached-cluster-ip
EOF
kubectl -n "$ns" wait --for=jsonpath='{.status.phase}'=Succeeded pod/client --timeout=60s >/dev/null ||
  fail "the client Pod did not succeed: $(kubectl -n "$ns" logs client 2>&1 | tr '\n' ' ')"
logs=$(kubectl -n "$ns" logs client)
[[ $logs == *resolved-kubernetes*resolved-echo*reached-echo*reached-cluster-ip* ]] || fail "client logs: $logs"
ok "a Pod resolves names via CoreDNS and reaches a ClusterIP"

host_pong() {
  python3 - "$cip" <<'PY'
import socket, sys
s = socket.create_connection((sys.argv[1], 80), timeout=3)
s.settimeout(3)
data = s.recv(64)
sys.exit(0 if data.strip() == b"pong" else 1)
PY
}
until_true 10 host_pong || fail "the host does not reach the ClusterIP $cip:80"
ok "the host reaches a ClusterIP"

[ "$(kubectl -n "$ns" exec echo -- echo exec-ok)" = exec-ok ] || fail "kubectl exec"
ok "kubectl exec and logs work"

# --- namespace finalization
trap - EXIT
kubectl delete namespace "$ns" --wait=false >/dev/null
ns_gone() { ! kubectl get namespace "$ns" >/dev/null 2>&1; }
until_true 90 ns_gone || fail "namespace $ns is not finalized 90s after delete"
ok "deleting the namespace finalizes it"
echo "node-smoke: $passed passed, 0 failed"
