#!/usr/bin/env bash
# Bring up the dev cluster (idempotent): a real control plane on 127.0.0.1 started by
# `kwokctl --runtime binary` from locally built binaries, N kwok (fake) nodes, two "process" nodes
# served by the test-only node agent, Redis and Prometheus from Debian's packages.
# Writes .berth/dev/{kubeconfig,env}. Progress is printed; every step says what it waits for.
#
# Env knobs: BERTH_KWOK_NODE_COUNT (default 3), BERTH_PROCESS_NODES (default "proc-a proc-b").
source "$(dirname "$0")/lib.sh"
LOG_TAG=cluster-up
KWOK_NODES=${BERTH_KWOK_NODE_COUNT:-3}
PROCESS_NODES=${BERTH_PROCESS_NODES:-proc-a proc-b}
mkdir -p "$DEV"
start=$(date +%s)

[[ -f $KUBE_BIN/.done && -f $ETCD_BIN/.done && -f $KWOK_BIN/.done && -f $HELM_BIN/.done ]] \
  || bash "$ROOT/hack/build-binaries.sh" all
command -v redis-server >/dev/null || die "redis-server not found: apt-get install -y redis-server"
command -v prometheus >/dev/null || die "prometheus not found: apt-get install -y prometheus"
KUBECTL=$KUBE_BIN/kubectl
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
elif [[ -f $KUBECONFIG ]] && "$KWOK_BIN/kwokctl" get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; then
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
  securePort: true
  kubeAuthorization: true
  kubeAdmission: true
  kubeApiserverBinary: $KUBE_BIN/kube-apiserver
  kubeControllerManagerBinary: $KUBE_BIN/kube-controller-manager
  kubeSchedulerBinary: $KUBE_BIN/kube-scheduler
  kubectlBinary: $KUBE_BIN/kubectl
  etcdBinary: $ETCD_BIN/etcd
  kwokControllerBinary: $KWOK_BIN/kwok
# kwokctl starts kwok with --manage-all-nodes=true; then kwok would also fake the process nodes'
# leases, node status and pods, fighting the node agent. Only nodes annotated as fake are kwok's.
componentsPatches:
- name: kwok-controller
  extraArgs:
  - {key: manage-all-nodes, value: "false"}
  - {key: manage-nodes-with-annotation-selector, value: kwok.x-k8s.io/node=fake}
# One controller-manager and one scheduler: without leader election they cannot lose a lease when a
# loaded machine makes the apiserver slow, and exit (which leaves PVCs unbound, pods unscheduled).
- name: kube-controller-manager
  extraArgs:
  - {key: leader-elect, value: "false"}
- name: kube-scheduler
  extraArgs:
  - {key: leader-elect, value: "false"}
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

# --- Redis --------------------------------------------------------------------------------------
mkdir -p "$DEV/redis"
if pid_alive "$DEV/redis.pid" && [[ -f $DEV/redis.port ]] && redis-cli -p "$(cat "$DEV/redis.port")" ping >/dev/null 2>&1; then
  log "redis already up on 127.0.0.1:$(cat "$DEV/redis.port")"
else
  port=$(free_port); echo "$port" > "$DEV/redis.port"
  redis-server --bind 127.0.0.1 --port "$port" --dir "$DEV/redis" --save "" --appendonly no \
    --daemonize yes --pidfile "$DEV/redis.pid" --logfile "$DEV/redis.log"
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  log "redis up on 127.0.0.1:$port"
fi
REDIS_URL=redis://127.0.0.1:$(cat "$DEV/redis.port")/0

# --- process node agent -------------------------------------------------------------------------
if pid_alive "$DEV/nodeagent.pid"; then
  log "process node agent already running (pid $(cat "$DEV/nodeagent.pid"))"
else
  args=()
  for n in $PROCESS_NODES; do args+=(--node "$n"); done
  setsid "$ROOT/.venv/bin/python" "$ROOT/hack/process_node_agent.py" --kubeconfig "$KUBECONFIG" \
    "${args[@]}" --state-dir "$DEV/nodes" --path-prepend "$ROOT/.venv/bin" \
    >> "$DEV/nodeagent.log" 2>&1 < /dev/null &
  echo $! > "$DEV/nodeagent.pid"
  log "process node agent started for: $PROCESS_NODES (log: $DEV/nodeagent.log)"
fi
for n in $PROCESS_NODES; do
  for _ in $(seq 120); do
    [[ $("$KUBECTL" get node "$n" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]] && break
    pid_alive "$DEV/nodeagent.pid" || die "node agent exited; see $DEV/nodeagent.log"
    sleep 0.5
  done
  [[ $("$KUBECTL" get node "$n" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]] \
    || die "process node $n not Ready after 60s; see $DEV/nodeagent.log"
done
log "process nodes Ready: $PROCESS_NODES"

# --- shared volume for the default namespace ---------------------------------------------------
bash "$ROOT/hack/shared-pvc.sh" default berth-shared >/dev/null
log "shared PVC default/berth-shared bound"

# --- Prometheus: scrapes pods annotated prometheus.io/scrape=true through pod IPs ---------------
if pid_alive "$DEV/prometheus.pid" && pid_alive "$DEV/promsd.pid" && [[ -f $DEV/prometheus.port ]]; then
  log "prometheus already up on 127.0.0.1:$(cat "$DEV/prometheus.port")"
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
    --web.listen-address "127.0.0.1:$port" >> "$DEV/prometheus.log" 2>&1 < /dev/null &
  echo $! > "$DEV/prometheus.pid"
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1 && break; sleep 0.2; done
  curl -fs "http://127.0.0.1:$port/-/ready" >/dev/null || die "prometheus did not start; see $DEV/prometheus.log"
  log "prometheus up on 127.0.0.1:$port"
fi

cat > "$DEV/env" <<ENV
# Written by hack/cluster-up.sh; source it to use the dev cluster.
export KUBECONFIG=$KUBECONFIG
export PATH=$KUBE_BIN:$HELM_BIN:$KWOK_BIN:\$PATH
export BERTH_REDIS_URL=$REDIS_URL
export BERTH_PROCESS_NODES="$PROCESS_NODES"
export BERTH_KWOK_NODE_NAMES="$(seq -s ' ' -f 'kwok-node-%g' 0 $((KWOK_NODES - 1)))"
export BERTH_NODE_STATE_DIR=$DEV/nodes
export PROMETHEUS_URL=http://127.0.0.1:$(cat "$DEV/prometheus.port")
ENV
# Helm values for running Berth itself in this cluster (.berth/dev/values.yaml), once the chart exists.
[[ -f $ROOT/hack/dev-values.sh ]] && bash "$ROOT/hack/dev-values.sh" >/dev/null
log "dev cluster ready in $(( $(date +%s) - start ))s; use: source $DEV/env"
