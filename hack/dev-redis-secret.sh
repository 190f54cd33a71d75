#!/usr/bin/env bash
# dev-redis-secret.sh NAMESPACE [NAME]: create (or update) the Secret holding the dev Redis's
# role passwords (session-password, worker-password, operator-password) in NAMESPACE, for a Helm
# release whose values name it as redis.auth.existingSecret (hack/dev-values.sh does). The
# passwords are the ones hack/cluster-up.sh gave the dev Redis's ACL users.
source "$(dirname "$0")/lib.sh"
ns=${1:?namespace}; name=${2:-berth-dev-redis-auth}
export KUBECONFIG=${KUBECONFIG:-$DEV/kubeconfig}
dir=$DEV/redis-secrets
[[ -s $dir/session-password ]] || die "no dev Redis passwords in $dir: run hack/cluster-up.sh first"
"$KUBE_BIN/kubectl" -n "$ns" create secret generic "$name" \
  --from-file=session-password="$dir/session-password" \
  --from-file=worker-password="$dir/worker-password" \
  --from-file=operator-password="$dir/operator-password" \
  --dry-run=client -o yaml | "$KUBE_BIN/kubectl" apply -f - >/dev/null
