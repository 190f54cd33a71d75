#!/usr/bin/env bash
# Stop the dev cluster and everything cluster-up started; leaves no process, mount, network device
# or address behind (built binaries and images stay cached outside the repo).
source "$(dirname "$0")/lib.sh"
LOG_TAG=cluster-down
bash "$ROOT/hack/netpol.sh" down
log "removing the nodes' pods, stopping kubelets, containerds and kube-proxy"
bash "$ROOT/hack/nodes.sh" down
log "stopping prometheus, jaeger and redis"
stop_pidfile "$DEV/prometheus.pid" 10
stop_pidfile "$DEV/promsd.pid" 5
stop_pidfile "$DEV/jaeger.pid" 5
stop_pidfile "$DEV/redis.pid" 10
if [[ -x $KWOK_BIN/kwokctl ]]; then
  log "deleting kwokctl cluster $CLUSTER_NAME"
  "$KWOK_BIN/kwokctl" delete cluster --name "$CLUSTER_NAME" --kubeconfig "$DEV/kubeconfig" 2>&1 | sed 's/^/  /' || true
fi
# Belt and braces: anything still running from this dev dir (components of a crashed run).
pkill -KILL -f "$DEV" 2>/dev/null || true
ip addr del "$HOST_IP/32" dev lo 2>/dev/null || true
rm -f "$DEV/env" "$DEV/kubeconfig"
log "dev cluster stopped"
