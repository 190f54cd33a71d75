#!/usr/bin/env bash
# make demo: bring up the dev cluster (cached binaries), then run the end-to-end job (hack/demo.py).
source "$(dirname "$0")/lib.sh"
LOG_TAG=demo
t0=$(date +%s)
log "step 1/2: dev cluster (control plane, two real nodes (kubelet + containerd), Redis, Prometheus)"
bash "$ROOT/hack/cluster-up.sh"
t1=$(date +%s)
log "dev cluster ready in $((t1 - t0))s; step 2/2: install Berth and run the session"
"$ROOT/.venv/bin/python" "$ROOT/hack/demo.py"
rc=$?
log "demo finished in $(( $(date +%s) - t0 ))s (cluster $((t1 - t0))s, job $(( $(date +%s) - t1 ))s), exit $rc"
exit $rc
