#!/usr/bin/env bash
# Bring up the dev cluster (idempotent): a real control plane started by `kwokctl --runtime binary`
# from locally built binaries, two real nodes (kubelet + containerd + bridge CNI, hack/nodes.sh)
# running Berth's image (hack/image.sh), N kwok (fake) nodes for scale benchmarks, Redis and
# Prometheus from Debian's packages. The control plane and host services listen on $HOST_IP (an
# address on lo that pods reach through their bridge) and on 127.0.0.1 where they can.
# Writes .berth/dev/{kubeconfig,env,values.yaml}. Progress is printed; every step says what it
# waits for. Must run as root (it starts containerd and kubelets).
#
# Env knobs: BERTH_KWOK_NODE_COUNT (default 3); BERTH_DEV_JAEGER=1 starts Jaeger (hack/jaeger.sh)
# and points Berth's pods at it (off by default until a cluster run has shown it).
source "$(dirname "$0")/lib.sh"
LOG_TAG=cluster-up
KWOK_NODES=${BERTH_KWOK_NODE_COUNT:-3}
mkdir -p "$DEV"
start=$(date +%s)

[[ $(id -u) == 0 ]] || die "the dev cluster's nodes run containerd and kubelet: run as root"
bash "$ROOT/hack/host-packages.sh"
[[ -f $KUBE_BIN/.done && -x $KUBE_BIN/kubelet && -x $KUBE_BIN/kube-proxy && -f $ETCD_BIN/.done \
  && -f $KWOK_BIN/.done && -f $HELM_BIN/.done && -f $CRICTL_BIN/.done \
  && -f $CACHE/bin/kube-router-$KUBE_ROUTER_VERSION/.done ]] \
  || bash "$ROOT/hack/build-binaries.sh" all
KUBECTL=$KUBE_BIN/kubectl
ensure_address "$HOST_IP"
export KUBECONFIG=$DEV/kubeconfig

# --- control plane ----------------------------------------------------------------------------
# components_alive: every process kwokctl started (etcd, apiserver, controller-manager, scheduler,
# kwok) is still running.
components_alive() {
  local f
  for f in "$KWOK_WORKDIR/clusters/$CLUSTER_NAME"/pids/*.pid; do
    [[ -f $f ]] || return 1
    kill -0 "$(cat "$f")" 2>/dev/null || return 1
  done
}
if [[ -f $KUBECONFIG ]] && "$KUBECTL" get --raw /readyz >/dev/null 2>&1 && components_alive; then
  log "control plane already up ($("$KUBECTL" config view -o jsonpath='{.clusters[0].cluster.server}'))"
elif [[ -f $KUBECONFIG ]] && has_line "$CLUSTER_NAME" "$KWOK_BIN/kwokctl" get clusters; then
  log "a control-plane component had stopped: restarting the cluster's components (state kept)"
  "$KWOK_BIN/kwokctl" stop cluster --name "$CLUSTER_NAME" >/dev/null 2>&1 || true
  "$KWOK_BIN/kwokctl" start cluster --name "$CLUSTER_NAME" --wait 3m 2>&1 | sed 's/^/  /'
else
  # A leftover (stopped) cluster from an earlier run: remove it so creation starts clean.
  "$KWOK_BIN/kwokctl" delete cluster --name "$CLUSTER_NAME" --kubeconfig "$KUBECONFIG" >/dev/null 2>&1 || true
  cat > "$DEV/kwokctl.yaml" <<CFG
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  kubeVersion: $KUBE_VERSION
  bindAddress: 127.0.0.1
  kubeApiserverCertSANs: [$HOST_IP, 198.19.128.1]
  securePort: true
  kubeAuthorization: true
  kubeAdmission: true
  kubeApiserverBinary: $KUBE_BIN/kube-apiserver
  kubeControllerManagerBinary: $KUBE_BIN/kube-controller-manager
  kubeSchedulerBinary: $KUBE_BIN/kube-scheduler
  kubectlBinary: $KUBE_BIN/kubectl
  etcdBinary: $ETCD_BIN/etcd
  kwokControllerBinary: $KWOK_BIN/kwok
# kwokctl starts kwok with --manage-all-nodes=true; then kwok would also fake the real nodes'
# leases, node status and pods, fighting their kubelets. Only nodes annotated as fake are kwok's.
componentsPatches:
- name: kwok-controller
  extraArgs:
  - {key: manage-all-nodes, value: "false"}
  - {key: manage-nodes-with-annotation-selector, value: kwok.x-k8s.io/node=fake}
# The apiserver alone also serves pods: it advertises $HOST_IP (the kubernetes Service's endpoint)
# and listens beyond loopback (every request needs a client certificate or token). Services get
# addresses from the test range too (never a private range); the apiserver reaches kubelets by
# their InternalIP and authenticates with the admin certificate (logs, exec).
- name: kube-apiserver
  extraArgs:
  - {key: bind-address, value: 0.0.0.0}
  - {key: advertise-address, value: $HOST_IP}
  - {key: service-cluster-ip-range, value: 198.19.128.0/17}
  - {key: kubelet-preferred-address-types, value: InternalIP}
  - {key: kubelet-client-certificate, value: $KWOK_WORKDIR/clusters/$CLUSTER_NAME/pki/admin.crt}
  - {key: kubelet-client-key, value: $KWOK_WORKDIR/clusters/$CLUSTER_NAME/pki/admin.key}
# One controller-manager and one scheduler: without leader election they cannot lose a lease when a
# loaded machine makes the apiserver slow, and exit (which leaves PVCs unbound, pods unscheduled).
# A node whose kubelet stops is NotReady after 40 s (kwokctl sets 200 s; upstream's default is
# 40-50 s), checked every 5 s: node-loss tests wait for this.
#
# Both read their callers' credentials through the apiserver (as kubeadm sets them up), so the
# admin certificate may read their /debug/pprof (bench/placement.py --cpu-profile).
- name: kube-controller-manager
  extraArgs:
  - {key: leader-elect, value: "false"}
  - {key: authentication-kubeconfig, value: $KWOK_WORKDIR/clusters/$CLUSTER_NAME/kubeconfig.yaml}
  - {key: authorization-kubeconfig, value: $KWOK_WORKDIR/clusters/$CLUSTER_NAME/kubeconfig.yaml}
  - {key: node-monitor-period, value: 5s}
  - {key: node-monitor-grace-period, value: 40s}
  - {key: service-cluster-ip-range, value: 198.19.128.0/17}
- name: kube-scheduler
  extraArgs:
  - {key: leader-elect, value: "false"}
  - {key: authentication-kubeconfig, value: $KWOK_WORKDIR/clusters/$CLUSTER_NAME/kubeconfig.yaml}
  - {key: authorization-kubeconfig, value: $KWOK_WORKDIR/clusters/$CLUSTER_NAME/kubeconfig.yaml}
CFG
  log "starting kube-apiserver, etcd, controller-manager, scheduler, kwok-controller (kwokctl, binary runtime)"
  "$KWOK_BIN/kwokctl" create cluster --name "$CLUSTER_NAME" --config "$DEV/kwokctl.yaml" \
    --kubeconfig "$KUBECONFIG" --wait 3m 2>&1 | sed 's/^/  /'
  "$KUBECTL" config use-context "kwok-$CLUSTER_NAME" >/dev/null
fi
log "apiserver $("$KUBECTL" version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])') ready"

# --- kwok (fake) nodes: tainted so only pods that opt in land on them -------------------------
for i in $(seq 0 $((KWOK_NODES - 1))); do
  cat <<NODE
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {node.alpha.kubernetes.io/ttl: "0", kwok.x-k8s.io/node: fake}
  labels: {kubernetes.io/hostname: kwok-node-$i, kubernetes.io/os: linux, type: kwok}
spec:
  taints: [{key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}]
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "1000"}
  capacity: {cpu: "32", memory: 256Gi, pods: "1000"}
---
NODE
done | "$KUBECTL" apply -f - >/dev/null
log "$KWOK_NODES kwok nodes present (taint kwok.x-k8s.io/node=fake:NoSchedule, label type=kwok)"

# --- Redis: TLS only, the chart's ACL users, an append-only file (hack/redis.sh) --------------
bash "$ROOT/hack/redis.sh" up
redis_url() { bash "$ROOT/hack/redis.sh" url "$1"; }
REDIS_URL=$(redis_url admin)

# --- real nodes and Berth's image -------------------------------------------------------------
bash "$ROOT/hack/nodes.sh" up
bash "$ROOT/hack/netpol.sh" up  # NetworkPolicy enforcement (kube-router, test component)
bash "$ROOT/hack/image.sh" load
IMAGE=$(cat "$DEV/image")

# --- shared volumes: a real RWX provisioner serves StorageClass berth-shared ----------------------
# Claims come from it on demand, with root-owned roots (the operator creates and sets them up).
bash "$ROOT/hack/provisioner.sh"

# --- Prometheus: scrapes pods annotated prometheus.io/scrape=true through pod IPs ---------------
if pid_alive "$DEV/prometheus.pid" && pid_alive "$DEV/promsd.pid" && [[ -f $DEV/prometheus.port ]]; then
  log "prometheus already up on $HOST_IP:$(cat "$DEV/prometheus.port")"
else
  port=$(free_port); echo "$port" > "$DEV/prometheus.port"
  stop_pidfile "$DEV/prometheus.pid" 5
  mkdir -p "$DEV/prometheus"
  echo '[]' > "$DEV/prometheus-targets.json"
  stop_pidfile "$DEV/promsd.pid" 2
  setsid "$ROOT/.venv/bin/python" "$ROOT/hack/prom_targets.py" --kubeconfig "$KUBECONFIG" \
    --out "$DEV/prometheus-targets.json" >> "$DEV/promsd.log" 2>&1 < /dev/null &
  echo $! > "$DEV/promsd.pid"
  # Debian's prometheus has no Kubernetes SD; hack/prom_targets.py writes a file_sd target file.
  cat > "$DEV/prometheus.yml" <<PROM
global: {scrape_interval: 5s, evaluation_interval: 5s}
scrape_configs:
  - job_name: pods
    file_sd_configs: [{files: ["$DEV/prometheus-targets.json"], refresh_interval: 5s}]
PROM
  setsid prometheus --config.file "$DEV/prometheus.yml" --storage.tsdb.path "$DEV/prometheus" \
    --web.listen-address "$HOST_IP:$port" >> "$DEV/prometheus.log" 2>&1 < /dev/null &
  echo $! > "$DEV/prometheus.pid"
  for _ in $(seq 100); do curl -fs "http://$HOST_IP:$port/-/ready" >/dev/null 2>&1 && break; sleep 0.2; done
  curl -fs "http://$HOST_IP:$port/-/ready" >/dev/null || die "prometheus did not start; see $DEV/prometheus.log"
  log "prometheus up on $HOST_IP:$port"
fi

# --- Jaeger v2 (traces): with BERTH_DEV_JAEGER=1, once hack/build-binaries.sh jaeger built it --
otlp=""
if [[ ${BERTH_DEV_JAEGER:-0} == 1 ]]; then
  bash "$ROOT/hack/jaeger.sh"
  if pid_alive "$DEV/jaeger.pid"; then otlp="http://$HOST_IP:4318"; fi
fi

cat > "$DEV/env" <<ENV
# Written by hack/cluster-up.sh; source it to use the dev cluster.
export KUBECONFIG=$KUBECONFIG
export PATH=$KUBE_BIN:$HELM_BIN:$KWOK_BIN:$CRICTL_BIN:\$PATH
# BERTH_REDIS_URL is the dev-only admin user (tests read streams with it); Berth's pods get the
# role URLs below through the operator, as the chart wires them. All are rediss:// URLs naming
# the dev CA (BERTH_REDIS_CA).
export BERTH_REDIS_URL=$REDIS_URL
export BERTH_REDIS_SESSION_URL=$(redis_url session)
export BERTH_REDIS_WORKER_URL=$(redis_url worker)
export BERTH_REDIS_OPERATOR_URL=$(redis_url operator)
export BERTH_REDIS_CA=$DEV/redis-tls/ca.crt
# The nodes with Landlock, where sessions run; the one without it (tainted, see hack/lib.sh).
export BERTH_NODES="$LANDLOCK_NODE_NAMES"
export BERTH_NO_LANDLOCK_NODES="$NO_LANDLOCK_NODE_NAMES"
export BERTH_HOST_IP=$HOST_IP
export BERTH_IMAGE=$IMAGE
export BERTH_SHARED_DIR=$DEV/pvc
export BERTH_KWOK_NODE_NAMES="$(seq -s ' ' -f 'kwok-node-%g' 0 $((KWOK_NODES - 1)))"
export PROMETHEUS_URL=http://$HOST_IP:$(cat "$DEV/prometheus.port")
# Jaeger (hack/jaeger.sh): empty when it does not run.
export BERTH_OTLP_ENDPOINT=$otlp
export JAEGER_URL=${otlp:+http://$HOST_IP:16686}
ENV
# Helm values for running Berth itself in this cluster (.berth/dev/values.yaml), once the chart exists.
[[ -f $ROOT/hack/dev-values.sh ]] && bash "$ROOT/hack/dev-values.sh" >/dev/null
log "dev cluster ready in $(( $(date +%s) - start ))s; use: source $DEV/env"
