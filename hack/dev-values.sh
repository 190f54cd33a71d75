#!/usr/bin/env bash
# dev-values.sh [OUT]: write the Helm values that run Berth in the dev cluster, so that
#   helm install berth charts/berth -f .berth/dev/values.yaml
# works there (docs/architecture.md §9). Reads .berth/dev/env (written by cluster-up.sh); writes
# OUT (default .berth/dev/values.yaml) atomically. Idempotent; called by hack/cluster-up.sh.
#
# What differs from the chart defaults, and why:
# - the image is the one hack/image.sh built and loaded into the nodes (BERTH_IMAGE): there is no
#   registry to pull from, so pullPolicy Never (a missing image fails loudly, never pulls);
# - operator pods on the real nodes (the kwok nodes are tainted, so no selector is needed);
# - Redis is the dev cluster's redis-server (on the host address pods reach, TLS with the dev CA
#   as redis.tls.caCert), not a bundled one;
#   it has the chart's ACL users, whose passwords (hack/cluster-up.sh made them) are written here
#   as redis.auth.passwords: the chart puts them into the release's Secret, so the install needs
#   nothing made beforehand in its namespace (the file is readable by its owner only);
# - NetworkPolicies (enforced by hack/netpol.sh) name the dev cluster's addresses: the apiserver
#   and Redis listen on the host address; the LLM is any address but the pods' (scripted models
#   on the host address, a real endpoint for `make demo`), on any port (tests pick free ones);
#   DNS is this machine's resolver (as the nodes' clusterDNS, hack/nodes.sh);
# - the operator creates each namespace's claim berth-shared with class berth-shared, served by
#   the dev cluster's RWX provisioner (hack/provisioner.sh), and sets its root-owned root up;
# - traces go to the dev cluster's Jaeger (BERTH_OTLP_ENDPOINT, hack/jaeger.sh) when it runs.
source "$(dirname "$0")/lib.sh"
LOG_TAG=dev-values
env_file=${BERTH_DEV_ENV:-$DEV/env}
out=${1:-$DEV/values.yaml}
[[ -f $env_file ]] || die "$env_file not found: run hack/cluster-up.sh first"
# shellcheck disable=SC1090
source "$env_file"
[[ -n ${BERTH_REDIS_URL:-} ]] || die "BERTH_REDIS_URL missing in $env_file"
[[ -n ${BERTH_IMAGE:-} ]] || die "BERTH_IMAGE missing in $env_file"
secrets=$DEV/redis-secrets
for role in session worker operator; do
  [[ -s $secrets/$role-password ]] || die "no $role password in $secrets: run hack/cluster-up.sh first"
done
# The dev Redis serves TLS only (hack/redis.sh): the chart mounts its CA into the operator at
# the path the URL names, and the operator hands it on to the pods it gives role URLs.
where=${BERTH_REDIS_URL#*@}; where=${where%%\?*}
redis_tls=""
if [[ $BERTH_REDIS_URL == rediss://* ]]; then
  [[ -s ${BERTH_REDIS_CA:-} ]] || die "BERTH_REDIS_CA (the dev Redis's CA) missing in $env_file"
  redis_url="rediss://$where?ssl_ca_certs=/var/run/berth/redis-tls/ca.crt"
  redis_tls=$(printf '  tls:\n    caCert: |\n'; sed 's/^/      /' "$BERTH_REDIS_CA")
else
  redis_url="redis://$where"
fi
redis_port=${where##*:}; redis_port=${redis_port%%/*}
# The apiserver's own port (the kubernetes Service's endpoint, which the policies see after
# kube-proxy's translation): from the kubeconfig's server URL, 6443 when there is none.
api_port=$(sed -n 's#^ *server: *https\?://[^:]*:\([0-9]*\).*#\1#p' "${KUBECONFIG:-$DEV/kubeconfig}" 2>/dev/null | head -1 || true)
api_port=${api_port:-6443}
resolver=$(awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf)
mkdir -p "$(dirname "$out")"
(umask 077; : > "$out.tmp")
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
  url: "$redis_url"
  auth:
    passwords:
      session: "$(cat "$secrets/session-password")"
      worker: "$(cat "$secrets/worker-password")"
      operator: "$(cat "$secrets/operator-password")"
$redis_tls
networkPolicy:
  apiServer:
    cidrs: [$HOST_IP/32]
    ports: [443, 6443, $api_port]
  externalRedis:
    cidrs: [$HOST_IP/32]
    ports: [$redis_port]
  llmEgress:
    cidrs: [0.0.0.0/0]
    except: [198.18.0.0/16]
    ports: []
  dns:
    cidrs: [${resolver:-$HOST_IP}/32]
metrics:
  podAnnotations: true
grafanaDashboard:
  enabled: true
YAML
# Traces to the dev cluster's Jaeger (hack/jaeger.sh) when it runs.
if [[ -n ${BERTH_OTLP_ENDPOINT:-} ]]; then
  printf 'observability:\n  tracing:\n    otlpEndpoint: "%s"\n' "$BERTH_OTLP_ENDPOINT" >> "$out.tmp"
fi
mv "$out.tmp" "$out"
log "wrote $out"
