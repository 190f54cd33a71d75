#!/usr/bin/env bash
# make demo-down: remove what the demo created, then stop the dev cluster.
source "$(dirname "$0")/lib.sh"
LOG_TAG=demo-down
ns=${BERTH_DEMO_NAMESPACE:-berth-demo}
if [[ -f $DEV/env ]]; then
  # shellcheck disable=SC1091
  source "$DEV/env"
  kubectl -n "$ns" delete agentsession,laneworker --all --wait=true --timeout=60s 2>/dev/null || true
  release=$ns; [[ $ns == *berth* ]] || release=berth-$ns  # as hack/demo.py names it
  helm uninstall "$release" -n "$ns" --wait 2>/dev/null || true
  kubectl delete namespace "$ns" --wait=false 2>/dev/null || true
fi
bash "$ROOT/hack/cluster-down.sh"
