#!/usr/bin/env bash
# pv-pool.sh [N]: keep N unclaimed ReadWriteMany PersistentVolumes of class berth-shared ready,
# so that a claim the operator creates in any namespace (sharedVolume.managed, storage class
# berth-shared in the dev values) binds at once, as it would with an RWX provisioner. The dev
# cluster has no provisioner; each PV is a hostPath directory $DEV/pvc/pool/<i> shared by every
# pod that mounts it (both nodes are on this machine), owned by the pods' user (uid/gid 10001,
# setgid) like an NFS export. A pool volume left Released by a deleted claim (its namespace is
# gone) is wiped and offered again, so no store leaks into another namespace. Idempotent; run by
# hack/cluster-up.sh. Default N=20.
source "$(dirname "$0")/lib.sh"
n=${1:-20}
export KUBECONFIG=${KUBECONFIG:-$DEV/kubeconfig}
KUBECTL=$KUBE_BIN/kubectl
docs=""
for i in $(seq 1 "$n"); do
  dir=$DEV/pvc/pool/$i
  mkdir -p "$dir"
  chown 10001:10001 "$dir"
  chmod 2775 "$dir"
  docs+="---
apiVersion: v1
kind: PersistentVolume
metadata: {name: \"pv-pool-$i\", labels: {berth.dev/dev-shared: \"true\", berth.dev/dev-pool: \"true\"}}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: berth-shared
  hostPath: {path: \"$dir\", type: Directory}
"
done
printf '%s' "$docs" | "$KUBECTL" apply -f - >/dev/null
released=$("$KUBECTL" get pv -l berth.dev/dev-pool=true \
  -o jsonpath='{range .items[?(@.status.phase=="Released")]}{.metadata.name}{"\n"}{end}')
for pv in $released; do
  i=${pv#pv-pool-}
  find "$DEV/pvc/pool/$i" -mindepth 1 -delete
  "$KUBECTL" patch pv "$pv" --type json -p '[{"op":"remove","path":"/spec/claimRef"}]' >/dev/null
done
