#!/usr/bin/env bash
# dev-values.sh [OUT]: write the Helm values that run Berth in the dev cluster, so that
#   helm install berth charts/berth -f .berth/dev/values.yaml
# works there (ARCHITECTURE.md §9). Reads .berth/dev/env (written by cluster-up.sh); writes
# OUT (default .berth/dev/values.yaml) atomically. Idempotent; called by hack/cluster-up.sh.
#
# What differs from the chart defaults, and why:
# - the image is the one hack/image.sh built and loaded into the nodes (BERTH_IMAGE): there is no
#   registry to pull from, so pullPolicy Never (a missing image fails loudly, never pulls);
# - operator pods on the real nodes (the kwok nodes are tainted, so no selector is needed);
# - Redis is the dev cluster's redis-server (on the host address pods reach), not a bundled one;
#   it has the chart's ACL users, whose passwords hack/dev-redis-secret.sh puts into the Secret
#   named here (create it in the release namespace before installing);
# - the operator creates each namespace's claim berth-shared with class berth-shared, served by
#   the dev cluster's RWX provisioner (hack/provisioner.sh), and sets its root-owned root up.
source "$(dirname "$0")/lib.sh"
LOG_TAG=dev-values
env_file=${BERTH_DEV_ENV:-$DEV/env}
out=${1:-$DEV/values.yaml}
[[ -f $env_file ]] || die "$env_file not found: run hack/cluster-up.sh first"
# shellcheck disable=SC1090
source "$env_file"
[[ -n ${BERTH_REDIS_URL:-} ]] || die "BERTH_REDIS_URL missing in $env_file"
[[ -n ${BERTH_IMAGE:-} ]] || die "BERTH_IMAGE missing in $env_file"
mkdir -p "$(dirname "$out")"
cat > "$out.tmp" <<YAML
# Written by hack/dev-values.sh from $env_file; do not edit (re-run the script).
image:
  repository: ${BERTH_IMAGE%:*}
  tag: ${BERTH_IMAGE##*:}
  pullPolicy: Never
operator:
  replicas: 2
  # Restart faster in tests than the production defaults.
  leaderElection:
    leaseDurationSeconds: 6
    renewSeconds: 2
  podDisruptionBudget:
    enabled: false
sharedVolume:
  create: false
  claimName: berth-shared
  managed: true
  storageClassName: berth-shared
redis:
  enabled: false
  url: "redis://${BERTH_REDIS_URL#*@}"
  auth:
    existingSecret: berth-dev-redis-auth
metrics:
  podAnnotations: true
grafanaDashboard:
  enabled: true
YAML
mv "$out.tmp" "$out"
log "wrote $out"
