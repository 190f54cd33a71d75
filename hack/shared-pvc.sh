#!/usr/bin/env bash
# shared-pvc.sh NAMESPACE [CLAIM]: create a statically bound ReadWriteMany PV + PVC pair.
# The dev cluster has no storage provisioner. Its two nodes are on this machine, so a hostPath
# directory ($DEV/pvc/<ns>/<claim>) is shared by every pod that mounts the claim, as an NFS export
# would be. Like such an export, its root belongs to the pods' user (uid/gid 10001, setgid), so
# Berth's non-root pods can create their directories in it.
source "$(dirname "$0")/lib.sh"
ns=${1:?namespace}; claim=${2:-berth-shared}
export KUBECONFIG=${KUBECONFIG:-$DEV/kubeconfig}
KUBECTL=$KUBE_BIN/kubectl
dir=$DEV/pvc/$ns/$claim
mkdir -p "$dir"
chown 10001:10001 "$dir"
chmod 2775 "$dir"
# A PV left Released by an earlier claim of the same name keeps that claim's uid and would never
# bind again: drop the stale uid so the new claim can take it.
if [[ $("$KUBECTL" get pv "pv-$ns-$claim" -o jsonpath='{.status.phase}' 2>/dev/null) == Released ]]; then
  "$KUBECTL" patch pv "pv-$ns-$claim" --type json -p '[{"op":"remove","path":"/spec/claimRef/uid"}]' >/dev/null
fi
"$KUBECTL" apply -f - <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: "pv-$ns-$claim", labels: {berth.dev/dev-shared: "true"}}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: berth-shared
  hostPath: {path: "$dir", type: Directory}
  claimRef: {namespace: "$ns", name: "$claim"}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: "$claim", namespace: "$ns"}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: berth-shared
  resources: {requests: {storage: 10Gi}}
  volumeName: "pv-$ns-$claim"
YAML
for _ in $(seq 600); do  # up to 120 s: the PV binder runs slowly on a loaded machine
  [[ $("$KUBECTL" -n "$ns" get pvc "$claim" -o jsonpath='{.status.phase}') == Bound ]] && exit 0
  sleep 0.2
done
die "PVC $ns/$claim did not bind"
