#!/usr/bin/env bash
# dev-values.sh [OUT]: write the Helm values that run Berth in the dev cluster, so that
#   helm install berth charts/berth -f .berth/dev/values.yaml
# works there (ARCHITECTURE.md §9). Reads .berth/dev/env (written by cluster-up.sh); writes
# OUT (default .berth/dev/values.yaml) atomically. Idempotent; called by hack/cluster-up.sh.
#
# What differs from the chart defaults, and why:
# - operator pods on a process node (nodeSelector berth.dev/process-node=true), where the node
#   agent runs them as local processes (the image is ignored there, so it is never pulled);
# - the HTTP server binds to the pod IP: process pods share the host network (one 127.x IP each);
# - Redis is the dev cluster's redis-server (BERTH_REDIS_URL), not a bundled one;
# - the shared volume is the pre-bound claim berth-shared (hack/shared-pvc.sh), not created here.
source "$(dirname "$0")/lib.sh"
LOG_TAG=dev-values
env_file=${BERTH_DEV_ENV:-$DEV/env}
out=${1:-$DEV/values.yaml}
[[ -f $env_file ]] || die "$env_file not found: run hack/cluster-up.sh first"
# shellcheck disable=SC1090
source "$env_file"
[[ -n ${BERTH_REDIS_URL:-} ]] || die "BERTH_REDIS_URL missing in $env_file"
mkdir -p "$(dirname "$out")"
cat > "$out.tmp" <<YAML
# Written by hack/dev-values.sh from $env_file; do not edit (re-run the script).
image:
  repository: berth.dev.local/berth
  tag: dev
  pullPolicy: IfNotPresent
operator:
  replicas: 2
  bindPodIP: true
  nodeSelector:
    berth.dev/process-node: "true"
  # Restart faster in tests than the production defaults.
  leaderElection:
    leaseDurationSeconds: 6
    renewSeconds: 2
  podDisruptionBudget:
    enabled: false
sessions:
  # Process pods run as the agent's user; the UID only has to be non-root and valid.
  runAsUser: 10001
sharedVolume:
  create: false
  claimName: berth-shared
redis:
  enabled: false
  url: "$BERTH_REDIS_URL"
metrics:
  podAnnotations: true
grafanaDashboard:
  enabled: true
YAML
mv "$out.tmp" "$out"
log "wrote $out"
