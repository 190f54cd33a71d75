#!/usr/bin/env bash
# pv-pool.sh [N]: keep N unclaimed ReadWriteMany PersistentVolumes of class berth-shared ready,
# so that a claim the operator creates in any namespace (sharedVolume.managed, storage class
# berth-shared in the dev values) binds at once, as it would with an RWX provisioner. The dev
# cluster has no provisioner; each PV is a hostPath directory $DEV/pvc/pool/<i> shared by every
# pod that mounts it (both nodes are on this machine), owned by the pods' user (uid/gid 10001,
# setgid) like an NFS export. Idempotent; run by hack/cluster-up.sh. Default N=8.
source "$(dirname "$0")/lib.sh"
n=${1:-8}
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
