#!/usr/bin/env bash
# The real-Kubernetes testbed (scripts/testbed is the door). Everything listens on 127.0.0.1.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
bin="$here/bin"
export CGO_ENABLED=0

# The components: binary name, the Go package it is built from, and the module file that pins
# its dependencies. Kueue and Trainer's controller are each built on the dependencies their own
# release pins (kueue.mod, trainer.mod: Kubernetes' libraries v0.35 and v0.36), not on go.mod's
# v0.37 that the Kubernetes components need: Trainer v2.3.0's generated OpenAPI names
# corev1.PodStatusResult, which v0.37 removed, and Kueue imports Trainer's API. One module, one
# build list per release.
components=(
  "etcd ./cmd/etcd go.mod"
  "kube-apiserver ./cmd/kube-apiserver go.mod"
  "kube-controller-manager ./cmd/kube-controller-manager go.mod"
  "kube-scheduler ./cmd/kube-scheduler go.mod"
  "kwok sigs.k8s.io/kwok/cmd/kwok go.mod"
  "jobset sigs.k8s.io/jobset go.mod"
  "kueue sigs.k8s.io/kueue/cmd/kueue kueue.mod"
  "trainer github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager trainer.mod"
)

# version_of MODULE [MODFILE]: the version the module file pins.
version_of() { (cd "$here" && go list -modfile="${2:-go.mod}" -m -f '{{.Version}}' "$1"); }
# dir_of MODULE [MODFILE]: where the Go module cache holds its source (CRDs, manifests).
dir_of() { (cd "$here" && go mod download -modfile="${2:-go.mod}" "$1" >/dev/null && go list -modfile="${2:-go.mod}" -m -f '{{.Dir}}' "$1"); }

# build [NAME...]: builds what is missing of the named components (all without names; Go's
# build cache makes a rebuild after a change short) and prints the versions. A Kubernetes build from a module is unstamped (v0.0.0-master+$Format:%H$) unless
# told its version: Kueue refuses to start against such a server, so every binary is stamped.
build() {
  command -v go >/dev/null || { echo "testbed: go is not installed (the testbed builds upstream components from their Go modules)" >&2; exit 1; }
  local k8s minor
  k8s=$(version_of k8s.io/kubernetes)
  minor=${k8s#v1.}; minor=${minor%%.*}
  local ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  mkdir -p "$bin"
  local failed=()
  local wanted=" $* "
  for c in "${components[@]}"; do
    set -- $c
    [ "$wanted" = "  " ] || [[ "$wanted" == *" $1 "* ]] || continue
    local sum=${3%.mod}.sum
    if [ -x "$bin/$1" ] && [ "$bin/$1" -nt "$here/$sum" ]; then continue; fi
    echo "testbed: building $1 ($2, pinned by $3)" >&2
    if ! (cd "$here" && go build -modfile="$3" -p 2 -trimpath -ldflags "$ld" -o "$bin/$1" "$2"); then
      failed+=("$1")
    fi
  done
  echo "kubernetes $k8s (kube-apiserver, kube-controller-manager, kube-scheduler)"
  echo "etcd $(version_of go.etcd.io/etcd/server/v3)"
  echo "kwok $(version_of sigs.k8s.io/kwok)"
  echo "jobset $(version_of sigs.k8s.io/jobset)"
  echo "kueue $(version_of sigs.k8s.io/kueue kueue.mod)"
  echo "trainer $(version_of github.com/kubeflow/trainer/v2 trainer.mod) (trainer-controller-manager)"
  if [ ${#failed[@]} -gt 0 ]; then
    echo "testbed: failed to build: ${failed[*]}" >&2
    exit 1
  fi
}

# ---------------------------------------------------------------------------------------------
# up / down

die() { echo "testbed: $*" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start NAME CMD...: one process, detached, its pid in $D/pids/NAME.pid, its output in
# $D/logs/NAME.log; $D/run/NAME.sh starts it again the same way (the fault tests restart
# processes they killed).
start() {
  local name=$1; shift
  mkdir -p "$D/run"
  {
    printf '#!/usr/bin/env bash\n# Starts %s as scripts/testbed up did.\nsetsid' "$name"
    printf ' %q' "$@"
    printf ' >>%q 2>&1 </dev/null &\necho $! >%q\n' "$D/logs/$name.log" "$D/pids/$name.pid"
  } >"$D/run/$name.sh"
  bash "$D/run/$name.sh"
}

# wait_for WHAT SECONDS CMD...: until CMD succeeds, or fail naming WHAT and its log.
wait_for() {
  local what=$1 limit=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      die "$what not ready after ${limit}s (logs in $D/logs/)"
    fi
    sleep 0.3
  done
}

# A kubeconfig: NAME SERVER TOKEN PATH [NAMESPACE].
kubeconfig() {
  cat >"$4" <<KC
apiVersion: v1
kind: Config
clusters:
- name: $1
  cluster:
    server: $2
    certificate-authority: $D/pki/ca.crt
users:
- name: $1
  user:
    token: $3
contexts:
- name: $1
  context: {cluster: $1, user: $1, namespace: ${5:-default}}
current-context: $1
KC
}

pki() {
  local d=$D/pki
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=stowage-testbed-ca \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  # One serving certificate for every server on 127.0.0.1 (API servers, webhooks, the relay).
  openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$d/serving.key" -out "$d/serving.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >"$d/ext"
  openssl x509 -req -in "$d/serving.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 30 \
    -extfile "$d/ext" -out "$d/serving.crt" 2>/dev/null
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
}

# cluster NAME ROLE: etcd, kube-apiserver and kube-controller-manager (every cluster); on a
# member also kube-scheduler, kwok and JobSet. Writes $D/clusters/NAME/admin.kubeconfig.
cluster() {
  local name=$1 role=$2 c=$D/clusters/$1
  mkdir -p "$c"
  local etcd_port peer_port api_port
  etcd_port=$(free_port); peer_port=$(free_port); api_port=$(free_port)
  start "$name-etcd" "$bin/etcd" --name "$name" --data-dir "$c/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "$name=http://127.0.0.1:$peer_port" --unsafe-no-fsync --log-level warn
  wait_for "$name etcd" 60 curl -sf "http://127.0.0.1:$etcd_port/health"
  local admin_token
  admin_token=$(head -c 24 /dev/urandom | base64 | tr -dc 'a-zA-Z0-9')
  # The admin, and the tenant of each namespace `up` makes (bound to one namespace below).
  {
    echo "$admin_token,admin,admin,system:masters"
    for ns in $TENANTS; do
      echo "$(head -c 24 /dev/urandom | base64 | tr -dc 'a-zA-Z0-9'),tenant-$ns,tenant-$ns,tenants"
    done
  } >"$c/tokens.csv"
  local gates=(--feature-gates=GenericWorkload=true)
  start "$name-apiserver" "$bin/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --endpoint-reconciler-type none --secure-port "$api_port" \
    --tls-cert-file "$D/pki/serving.crt" --tls-private-key-file "$D/pki/serving.key" --client-ca-file "$D/pki/ca.crt" \
    --service-account-issuer "https://127.0.0.1:$api_port" --service-account-key-file "$D/pki/sa.pub" \
    --service-account-signing-key-file "$D/pki/sa.key" --service-cluster-ip-range 10.0.0.0/24 \
    --authorization-mode Node,RBAC --token-auth-file "$c/tokens.csv" \
    --kubelet-client-certificate "$D/pki/serving.crt" --kubelet-client-key "$D/pki/serving.key" \
    "${gates[@]}" --runtime-config scheduling.k8s.io/v1beta1=true
  kubeconfig "$name" "https://127.0.0.1:$api_port" "$admin_token" "$c/admin.kubeconfig"
  wait_for "$name kube-apiserver" 120 kubectl --kubeconfig "$c/admin.kubeconfig" get --raw /readyz
  start "$name-controller-manager" "$bin/kube-controller-manager" --kubeconfig "$c/admin.kubeconfig" \
    --authentication-kubeconfig "$c/admin.kubeconfig" --authorization-kubeconfig "$c/admin.kubeconfig" \
    --service-account-private-key-file "$D/pki/sa.key" --root-ca-file "$D/pki/ca.crt" \
    --use-service-account-credentials --leader-elect=false --bind-address 127.0.0.1 --secure-port "$(free_port)" \
    "${gates[@]}"
  [ "$role" = member ] || return 0
  start "$name-scheduler" "$bin/kube-scheduler" --kubeconfig "$c/admin.kubeconfig" \
    --authentication-kubeconfig "$c/admin.kubeconfig" --authorization-kubeconfig "$c/admin.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port "$(free_port)" "${gates[@]}"
  # Fake nodes: kwok keeps them Ready and plays the kubelet for their pods.
  local stages=$KWOK_MOD/kustomize/stage
  {
    # No KwokConfiguration document: kwok's defaults hold only when there is none.
    for f in "$stages/node/fast/node-initialize.yaml" "$stages/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
      "$stages/pod/fast/pod-ready.yaml" "$stages/pod/fast/pod-delete.yaml" "$here/kwok/pod-complete.yaml"; do
      printf -- '---\n'; cat "$f"
    done
    # Every container's log, for `kubectl logs` on the member (and through the relay, the hub).
    printf -- '---\nkind: ClusterLogs\napiVersion: kwok.x-k8s.io/v1alpha1\nmetadata: {name: testbed}\nspec:\n  logs:\n  - logsFile: %s\n' "$c/container.log"
  } >"$c/kwok.yaml"
  # In the CRI log format kwok reads (time, stream, tag, line), as a kubelet keeps logs.
  echo "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ) stdout F stowage-testbed: a kwok container on $name" >"$c/container.log"
  local kubelet_port
  kubelet_port=$(free_port)
  start "$name-kwok" "$bin/kwok" --kubeconfig "$c/admin.kubeconfig" --config "$c/kwok.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds 40 --server-address "127.0.0.1:$kubelet_port" --node-ip 127.0.0.1 \
    --node-port "$kubelet_port" --tls-cert-file "$D/pki/serving.crt" --tls-private-key-file "$D/pki/serving.key"
  # JobSet: its CRD and webhooks (always registered; its defaulting lives there) by URL.
  local k="kubectl --kubeconfig $c/admin.kubeconfig"
  $k apply --server-side -f "$JOBSET_MOD/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" >/dev/null
  local webhook_port
  webhook_port=$(free_port)
  mkdir -p "$c/jobset-certs"
  cp "$D/pki/serving.crt" "$c/jobset-certs/tls.crt"; cp "$D/pki/serving.key" "$c/jobset-certs/tls.key"
  cat >"$c/jobset.yaml" <<CFG
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
webhook: {port: $webhook_port, host: 127.0.0.1, certDir: $c/jobset-certs}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "127.0.0.1:$(free_port)"}
CFG
  start "$name-jobset" "$bin/jobset" --kubeconfig "$c/admin.kubeconfig" --config "$c/jobset.yaml" --zap-log-level=error
  sed -e "s#__URL__#https://127.0.0.1:$webhook_port#" -e "s#__CA__#$(base64 -w0 <"$D/pki/ca.crt")#" \
    "$here/jobset-webhooks.yaml" | $k apply --server-side -f - >/dev/null
  wait_for "$name JobSet webhook" 60 curl -sk "https://127.0.0.1:$webhook_port/"
  [ -z "${TRAINER:-}" ] || trainer_on "$name"
}

# kueue_on NAME [DISPATCHER]: Kueue on a cluster, its CRDs and webhooks (by URL,
# testbed/kueue-webhooks.yaml), managing JobSets and TrainJobs that carry its queue label; on the
# hub, the MultiKueue manager with DISPATCHER as its external dispatcher.
kueue_on() {
  local name=$1 dispatcher=${2:-} c=$D/clusters/$1
  local k="kubectl --kubeconfig $c/admin.kubeconfig"
  for f in "$KUEUE_MOD"/config/components/crd/bases/kueue.x-k8s.io_*.yaml; do
    $k apply --server-side -f "$f" >/dev/null
  done
  # Kueue sets up its indexes at start: its kinds must be served by then.
  $k wait --for=condition=Established --timeout 60s $($k get crd -o name | grep 'kueue\.x-k8s\.io$') >/dev/null
  $k create namespace kueue-system >/dev/null
  local webhook_port
  webhook_port=$(free_port)
  mkdir -p "$c/kueue-certs"
  cp "$D/pki/serving.crt" "$c/kueue-certs/tls.crt"; cp "$D/pki/serving.key" "$c/kueue-certs/tls.key"
  # Without its internal certificate management Kueue v0.17 reads its metrics server's
  # certificate from this fixed path (cmd/kueue/main.go), even with metrics off.
  if [ ! -e /etc/kueue/metrics/certs/tls.crt ]; then
    mkdir -p /etc/kueue/metrics/certs 2>/dev/null || die "Kueue needs /etc/kueue/metrics/certs (run as root, or make it)"
    cp "$D/pki/serving.crt" /etc/kueue/metrics/certs/tls.crt; cp "$D/pki/serving.key" /etc/kueue/metrics/certs/tls.key
  fi
  local multikueue=""
  [ -z "$dispatcher" ] || multikueue="multiKueue: {dispatcherName: $dispatcher}"
  cat >"$c/kueue.yaml" <<CFG
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
manageJobsWithoutQueueName: false
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
webhook: {port: $webhook_port, host: 127.0.0.1, certDir: $c/kueue-certs}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "127.0.0.1:$(free_port)"}
integrations: {frameworks: [jobset.x-k8s.io/jobset, trainer.kubeflow.org/trainjob]}
# The pending-workloads API (an aggregated API server with its certificate at a fixed /visibility)
# is not what the testbed checks.
featureGates: {VisibilityOnDemand: false}
$multikueue
CFG
  start "$name-kueue" "$bin/kueue" --kubeconfig "$c/admin.kubeconfig" --config "$c/kueue.yaml" --zap-log-level=error
  sed -e "s#__URL__#https://127.0.0.1:$webhook_port#" -e "s#__CA__#$(base64 -w0 <"$D/pki/ca.crt")#" \
    "$here/kueue-webhooks.yaml" | $k apply --server-side -f - >/dev/null
  wait_for "$name Kueue webhook" 60 curl -sk "https://127.0.0.1:$webhook_port/"
}

# multikueue: Kueue on every member as a MultiKueue worker (a ClusterQueue `workers` with room
# for the member's GPUs, LocalQueue `user-queue` in `default`), and on the hub as the manager with
# Stowage as its external dispatcher: ClusterQueue `fleet` behind the AdmissionCheck `multikueue`,
# MultiKueueConfig `fleet` naming every member, a MultiKueueCluster and kubeconfig Secret each.
multikueue() {
  local hk="kubectl --kubeconfig $D/clusters/hub/admin.kubeconfig"
  local quota='{name: cpu, nominalQuota: "100000"}, {name: memory, nominalQuota: 100000Gi}, {name: nvidia.com/gpu, nominalQuota: "100000"}'
  local queues="
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: user-queue, namespace: default}
spec: {clusterQueue: __CQ__}
"
  for m in "${MEMBERS[@]}"; do
    echo "testbed: Kueue on $m" >&2
    kueue_on "$m"
    local mk="kubectl --kubeconfig $D/clusters/$m/admin.kubeconfig"
    printf '%s---\n%s\n' "${queues/__CQ__/workers}" "apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: workers}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors: [{name: default, resources: [$quota]}]" | $mk apply --server-side -f - >/dev/null
  done
  echo "testbed: Kueue on the hub (MultiKueue manager, dispatcher stowage.dev/dispatcher)" >&2
  # Kueue's TrainJob integration watches the JobSets a TrainJob owns: the manager needs their CRD
  # (MultiKueue's guide installs every dispatched kind's CRD on the manager).
  $hk apply --server-side -f "$JOBSET_MOD/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" >/dev/null
  kueue_on hub stowage.dev/dispatcher
  echo stowage.dev/dispatcher >"$D/kueue.dispatcher"
  local clusters=""
  for m in "${MEMBERS[@]}"; do
    # Kueue reads the worker's kubeconfig from a Secret: the CA inline, no file paths.
    local server token config
    server=$(server_of "$D/clusters/$m/admin.kubeconfig")
    token=$(kubectl --kubeconfig "$D/clusters/$m/admin.kubeconfig" config view --raw -o jsonpath='{.users[0].user.token}')
    config="apiVersion: v1
kind: Config
clusters: [{name: $m, cluster: {server: '$server', certificate-authority-data: $(base64 -w0 <"$D/pki/ca.crt")}}]
users: [{name: $m, user: {token: $token}}]
contexts: [{name: $m, context: {cluster: $m, user: $m}}]
current-context: $m"
    $hk -n kueue-system create secret generic "$m-kubeconfig" --from-literal=kubeconfig="$config" \
      --dry-run=client -o yaml | $hk apply --server-side -f - >/dev/null
    printf 'apiVersion: kueue.x-k8s.io/v1beta2\nkind: MultiKueueCluster\nmetadata: {name: %s}\nspec: {clusterSource: {kubeConfig: {locationType: Secret, location: %s-kubeconfig}}}\n' \
      "$m" "$m" | $hk apply --server-side -f - >/dev/null
    clusters+="${clusters:+, }$m"
  done
  printf '%s---\n%s\n' "${queues/__CQ__/fleet}" "apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata: {name: fleet}
spec: {clusters: [$clusters]}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: multikueue}
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters: {apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, name: fleet}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: fleet}
spec:
  namespaceSelector: {}
  admissionChecksStrategy: {admissionChecks: [{name: multikueue}]}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors: [{name: default, resources: [$quota]}]" | $hk apply --server-side -f - >/dev/null
}

# trainer_on NAME: Kubeflow Trainer's controller on a member, as Trainer's own install makes it
# (its CRDs, its webhooks by URL, the coscheduling and Volcano PodGroup CRDs its plugins render
# for): the rendering oracle (tests/tests/trainer_oracle.rs) and a MultiKueue worker.
trainer_on() {
  local name=$1 c=$D/clusters/$1
  local k="kubectl --kubeconfig $c/admin.kubeconfig"
  for f in "$TRAINER_MOD"/manifests/base/crds/trainer.kubeflow.org_*.yaml; do $k apply --server-side -f "$f" >/dev/null; done
  $k apply --server-side -f "$(dir_of sigs.k8s.io/scheduler-plugins trainer.mod)/manifests/coscheduling/crd.yaml" >/dev/null
  # Trainer's runtimes, as its install applies them (a MultiKueue worker's copy names them).
  $k apply --server-side -f "$root/upstream/trainer/runtimes/" >/dev/null 2>&1 || true
  $k apply --server-side -f "$root/../shared/upstream/volcano/scheduling.volcano.sh_podgroups.yaml" >/dev/null
  local webhook_port
  webhook_port=$(free_port)
  # controller-runtime reads the serving certificate from $TMPDIR/k8s-webhook-server/serving-certs
  # when, as in Trainer's Configuration, no directory can be named.
  mkdir -p "$c/trainer-tmp/k8s-webhook-server/serving-certs"
  cp "$D/pki/serving.crt" "$c/trainer-tmp/k8s-webhook-server/serving-certs/tls.crt"
  cp "$D/pki/serving.key" "$c/trainer-tmp/k8s-webhook-server/serving-certs/tls.key"
  cat >"$c/trainer.yaml" <<CFG
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
leaderElection: {leaderElect: false}
certManagement: {enable: false}
webhook: {port: $webhook_port, host: 127.0.0.1}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "127.0.0.1:$(free_port)"}
CFG
  start "$name-trainer" env TMPDIR="$c/trainer-tmp" "$bin/trainer" --kubeconfig "$c/admin.kubeconfig" \
    --config "$c/trainer.yaml" --zap-log-level=error
  sed -e "s#__URL__#https://127.0.0.1:$webhook_port#" -e "s#__CA__#$(base64 -w0 <"$D/pki/ca.crt")#" \
    "$here/trainer-webhooks.yaml" | $k apply --server-side -f - >/dev/null
  wait_for "$name Trainer webhook" 60 curl -sk "https://127.0.0.1:$webhook_port/"
}

token_for() { # CLUSTER NAMESPACE SERVICEACCOUNT: a TokenRequest token
  kubectl --kubeconfig "$D/clusters/$1/admin.kubeconfig" create token "$3" -n "$2" --duration 48h
}

server_of() { kubectl --kubeconfig "$1" config view -o jsonpath='{.clusters[0].cluster.server}'; }

up() {
  local members=2
  HUB_LOST=20
  while [ $# -gt 0 ]; do
    case "$1" in
      --dir) D=$2; shift 2 ;;
      --members) members=$2; shift 2 ;;
      --fleet) FLEET=$2; shift 2 ;;
      --trainer) TRAINER=1; shift ;;
      # MultiKueue's workers run the TrainJob copies: Trainer renders them there.
      --kueue) KUEUE=1; TRAINER=1; shift ;;
      --hub-lost-seconds) HUB_LOST=$2; shift 2 ;;
      *) die "up: unknown option $1" ;;
    esac
  done
  [ -n "${D:-}" ] || die "up: --dir D is required"
  if [ -d "$D/pids" ] && ls "$D"/pids/*.pid >/dev/null 2>&1; then
    die "up: $D holds a running testbed (pids in $D/pids); scripts/testbed down --dir $D first"
  fi
  # What `up` runs: Kueue only with --kueue, Trainer only with --trainer.
  build etcd kube-apiserver kube-controller-manager kube-scheduler kwok jobset ${TRAINER:+trainer} ${KUEUE:+kueue} >/dev/null
  command -v kubectl >/dev/null || die "kubectl is needed"
  STOWAGE=${STOWAGE_BIN:-$root/target/debug/stowage}
  if [ ! -x "$STOWAGE" ]; then
    (cd "$root" && cargo build --bin stowage) || die "building stowage failed"
  fi
  mkdir -p "$D"/{logs,pids,members,agents,users,clusters}
  D=$(cd "$D" && pwd)
  KWOK_MOD=$(cd "$here" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  JOBSET_MOD=$(cd "$here" && go list -m -f '{{.Dir}}' sigs.k8s.io/jobset)
  if [ -n "${TRAINER:-}" ]; then
    TRAINER_MOD=$(dir_of github.com/kubeflow/trainer/v2 trainer.mod)
    echo "$TRAINER_MOD" >"$D/trainer.dir"
  fi
  [ -z "${KUEUE:-}" ] || KUEUE_MOD=$(dir_of sigs.k8s.io/kueue kueue.mod)
  TENANTS="team-a team-b"
  pki
  local fleet_args=()
  [ -n "${FLEET:-}" ] && fleet_args=(--fleet "$FLEET")
  # The fleet's members, in file order: the first N are started.
  mapfile -t all < <("$STOWAGE" nodes "${fleet_args[@]}" --list-members)
  [ "${#all[@]}" -ge "$members" ] || die "up: the fleet has ${#all[@]} members, --members $members"
  MEMBERS=("${all[@]:0:$members}")

  echo "testbed: hub" >&2
  cluster hub hub
  for m in "${MEMBERS[@]}"; do
    echo "testbed: member $m" >&2
    cluster "$m" member
  done
  local hk="kubectl --kubeconfig $D/clusters/hub/admin.kubeconfig"

  # The hub as an admin sets it up: Trainer's CRDs and runtimes, Stowage's manifests.
  $hk apply --server-side -f "$root/upstream/trainer/" >/dev/null
  $hk apply --server-side -f "$root/upstream/trainer/runtimes/" >/dev/null 2>&1 || true
  # As docs/operations.md installs the hub: Stowage's CRDs first, established, then the rest
  # (kubectl cannot map the default Queue before its CRD is established).
  $hk apply --server-side -k "$root/manifests/crds" >/dev/null
  $hk wait --for=condition=Established --timeout 60s \
    crd/memberclusters.stowage.dev crd/placements.stowage.dev crd/queues.stowage.dev >/dev/null
  $hk apply --server-side -k "$root/manifests/hub" >/dev/null
  # No scheduler runs on the hub: the Deployments' pods would wait forever. Stowage runs below as
  # processes with the same ServiceAccounts.
  $hk -n stowage-system scale deployment stowage-dispatcher --replicas 0 >/dev/null
  for part in hub-webhook hub-relay; do
    $hk apply --server-side -f "$root/manifests/$part/serviceaccount.yaml" -f "$root/manifests/$part/clusterrole.yaml" >/dev/null
  done
  for m in "${MEMBERS[@]}"; do
    mkdir -p "$D/clusters/hub/access-$m"
    for f in serviceaccount.yaml rbac.yaml membercluster.yaml; do
      sed "s/MEMBER/$m/g" "$root/manifests/hub-member-access/$f" >"$D/clusters/hub/access-$m/$f"
    done
    $hk apply --server-side -f "$D/clusters/hub/access-$m/" >/dev/null
  done
  # Tenants: one namespace each, edit rights there only.
  for ns in $TENANTS; do
    $hk create namespace "$ns" --dry-run=client -o yaml | $hk apply --server-side -f - >/dev/null
    $hk -n "$ns" create rolebinding "tenant-$ns" --clusterrole edit --user "tenant-$ns" --dry-run=client -o yaml |
      $hk apply --server-side -f - >/dev/null
    $hk -n "$ns" create role trainjobs --verb '*' --resource trainjobs.trainer.kubeflow.org --dry-run=client -o yaml |
      $hk apply --server-side -f - >/dev/null
    $hk -n "$ns" create rolebinding "tenant-$ns-trainjobs" --role trainjobs --user "tenant-$ns" --dry-run=client -o yaml |
      $hk apply --server-side -f - >/dev/null
    local tok
    tok=$(awk -F, -v u="tenant-$ns" '$2 == u {print $1}' "$D/clusters/hub/tokens.csv")
    kubeconfig "hub" "$(server_of "$D/clusters/hub/admin.kubeconfig")" "$tok" "$D/users/$ns.kubeconfig" "$ns"
  done
  local hub_server
  hub_server=$(server_of "$D/clusters/hub/admin.kubeconfig")

  # Stowage's webhook, called by the hub over TLS.
  local wport
  wport=$(free_port)
  kubeconfig hub "$hub_server" "$(token_for hub stowage-system stowage-webhook)" "$D/clusters/hub/webhook.kubeconfig"
  start stowage-webhook "$STOWAGE" webhook --addr "127.0.0.1:$wport" --tls-cert-file "$D/pki/serving.crt" \
    --tls-key-file "$D/pki/serving.key" --kubeconfig "$D/clusters/hub/webhook.kubeconfig" --health-addr "127.0.0.1:$(free_port)"
  wait_for "stowage webhook" 60 curl -sk "https://127.0.0.1:$wport/"
  sed -e "s#^    service:\$#    url: https://127.0.0.1:$wport/validate-trainer-kubeflow-org-v1alpha1-trainjob\n    caBundle: $(base64 -w0 <"$D/pki/ca.crt")#" \
      -e '/^      name: stowage-webhook$/d' -e '/^      namespace: stowage-system$/d' -e '/^      path: \/validate/d' \
      -e '/^      port: 443$/d' -e '/^  annotations:$/d' -e '/^    cert-manager.io/d' \
      "$root/manifests/hub-webhook/validatingwebhookconfiguration.yaml" | $hk apply --server-side -f - >/dev/null

  # Each member: the agent's RBAC, its nodes.
  for m in "${MEMBERS[@]}"; do
    local mk="kubectl --kubeconfig $D/clusters/$m/admin.kubeconfig"
    $mk apply --server-side -k "$root/manifests/member" >/dev/null
    $mk -n stowage-system scale deployment stowage-agent --replicas 0 >/dev/null
    "$STOWAGE" nodes "${fleet_args[@]}" --member "$m" --kwok | $mk apply --server-side -f - >/dev/null
    cp "$D/clusters/$m/admin.kubeconfig" "$D/members/$m.kubeconfig"
  done

  [ -z "${KUEUE:-}" ] || multikueue

  # The log relay: the hub's API server reads the members' pod logs from it as their virtual
  # Nodes' kubelet (with its kubelet client certificate), the agents dial its tunnel.
  local relay_kubelet relay_tunnel
  relay_kubelet=$(free_port); relay_tunnel=$(free_port)
  kubeconfig hub "$hub_server" "$(token_for hub stowage-system stowage-relay)" "$D/clusters/hub/relay.kubeconfig"
  start stowage-relay "$STOWAGE" relay --kubeconfig "$D/clusters/hub/relay.kubeconfig" \
    --kubelet-addr "127.0.0.1:$relay_kubelet" --tunnel-addr "127.0.0.1:$relay_tunnel" \
    --tls-cert-file "$D/pki/serving.crt" --tls-key-file "$D/pki/serving.key" --client-ca-file "$D/pki/ca.crt" \
    --health-addr "127.0.0.1:$(free_port)"

  # Stowage: two dispatchers electing a leader on a Lease, one agent per member, each with its
  # own ServiceAccount's token. The agents' hub-lost time (20 s here, shorter than the default 60
  # so that the hub-outage test is quick) with the dispatcher's member grace twice as long, as
  # docs/operations.md asks; written down for the tests. With Kueue, an evicted Workload's stale
  # TrainJob counts are cleared after 20 s (default 60: kwok's pods stop at once).
  local member_grace=$((2 * HUB_LOST))
  printf 'hub_lost_seconds=%s\nmember_grace_seconds=%s\n' "$HUB_LOST" "$member_grace" >"$D/timings"
  kubeconfig hub "$hub_server" "$(token_for hub stowage-system stowage-dispatcher)" "$D/clusters/hub/dispatcher.kubeconfig"
  for i in 0 1; do
    start "stowage-dispatcher-$i" "$STOWAGE" dispatcher --kubeconfig "$D/clusters/hub/dispatcher.kubeconfig" \
      --health-addr "127.0.0.1:$(free_port)" --lease-namespace stowage-system --identity "dispatcher-$i" \
      --member-grace-seconds "$member_grace" ${KUEUE:+--kueue multikueue --eviction-settle 20s} ${STOWAGE_DISPATCHER_ARGS:-}
  done
  for m in "${MEMBERS[@]}"; do
    kubeconfig hub "$hub_server" "$(token_for hub stowage-system "stowage-agent-$m")" "$D/agents/$m-on-hub.kubeconfig" stowage-system
    kubeconfig "$m" "$(server_of "$D/clusters/$m/admin.kubeconfig")" "$(token_for "$m" stowage-system stowage-agent)" \
      "$D/agents/$m-member.kubeconfig" stowage-system
    local levels
    levels=$("$STOWAGE" nodes "${fleet_args[@]}" --member "$m" --levels)
    start "stowage-agent-$m" "$STOWAGE" agent --cluster "$m" --hub-kubeconfig "$D/agents/$m-on-hub.kubeconfig" \
      --member-kubeconfig "$D/agents/$m-member.kubeconfig" --levels "$levels" --health-addr "127.0.0.1:$(free_port)" \
      --heartbeat-seconds 2 --log-relay "https://127.0.0.1:$relay_tunnel" --log-relay-kubelet "127.0.0.1:$relay_kubelet" \
      --log-relay-ca "$D/pki/ca.crt" --hub-lost-seconds "$HUB_LOST" ${STOWAGE_AGENT_ARGS:-}
  done
  cp "$D/clusters/hub/admin.kubeconfig" "$D/hub.kubeconfig"
  for m in "${MEMBERS[@]}"; do
    wait_for "member $m reporting" 120 sh -c "$hk get membercluster $m -o jsonpath='{.status.heartbeatTime}' | grep -q ."
  done
  printf '%s\n' "${MEMBERS[@]}" >"$D/members.txt"
  echo ready
}

down() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --dir) D=$2; shift 2 ;;
      *) die "down: unknown option $1" ;;
    esac
  done
  [ -n "${D:-}" ] || die "down: --dir D is required"
  [ -d "$D/pids" ] || return 0
  local pids=()
  for f in "$D"/pids/*.pid; do
    [ -e "$f" ] || continue
    pids+=("$(cat "$f")")
  done
  [ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null || true
  local deadline=$((SECONDS + 10))
  for p in "${pids[@]}"; do
    while kill -0 "$p" 2>/dev/null; do
      if [ $SECONDS -ge $deadline ]; then kill -KILL "$p" 2>/dev/null || true; break; fi
      sleep 0.2
    done
  done
  rm -f "$D"/pids/*.pid
  echo down
}

case "${1:-}" in
  build) shift; build "$@" ;;
  up) shift; up "$@" ;;
  down) shift; down "$@" ;;
  *) echo "usage: scripts/testbed build [COMPONENT...] | up --dir D [--members N] [--fleet F] [--trainer] [--kueue] [--hub-lost-seconds S] | down --dir D" >&2; exit 2 ;;
esac
