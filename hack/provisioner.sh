#!/usr/bin/env bash
# provisioner.sh: run a real ReadWriteMany provisioner in the dev cluster, as a managed cluster
# has one: rancher's local-path-provisioner in its shared-filesystem mode, serving the
# StorageClass berth-shared (the class the dev values name). Idempotent; run by hack/cluster-up.sh
# after the nodes are up.
#
# - Built from its Go module (github.com/rancher/local-path-provisioner, $LPP_VERSION) with
#   `go build` into ${BERTH_CACHE:-~/.cache/berth}/bin/local-path-provisioner-<version>, once.
# - Its image is made locally with buildah (no registry): the binary on the Debian base image
#   hack/image.sh builds (the helper pods it starts need sh, mkdir and rm), tagged with a hash of
#   the binary and the base, archived in the image cache and imported into each node's containerd.
# - sharedFileSystemPath $DEV/pvc/shared: both nodes are on this machine, so a directory there is
#   one filesystem seen by every node, as an NFS export or a cloud file share is; volumes carry
#   no node affinity and bind at once (volumeBindingMode Immediate).
# - Each volume's root is made by the provisioner's helper pod as root, mode 0755, as real
#   provisioners make them: Berth's pods (uid 10001) cannot write it until the operator's
#   volume set-up Job has run (docs/install.md). A deleted claim's volume is removed
#   (reclaimPolicy Delete), so namespaces a test deletes leave nothing behind.
source "$(dirname "$0")/lib.sh"
LOG_TAG=provisioner
LPP_VERSION=v0.0.30
NS=berth-storage
export KUBECONFIG=${KUBECONFIG:-$DEV/kubeconfig}
KUBECTL=$KUBE_BIN/kubectl
BIN=$CACHE/bin/local-path-provisioner-$LPP_VERSION
SHARED=$DEV/pvc/shared
BASE_IMAGE=berth.dev.local/debian-python:bookworm

# --- binary ----------------------------------------------------------------------------------
if [[ ! -f $BIN/.done ]]; then
  log "go build github.com/rancher/local-path-provisioner@$LPP_VERSION (cold: a few minutes)"
  mod=$CACHE/src/local-path-provisioner-$LPP_VERSION
  mkdir -p "$mod" "$BIN"
  [[ -f $mod/go.mod ]] || printf 'module berth.dev/lppbuild\n\ngo 1.24.0\n' > "$mod/go.mod"
  (cd "$mod" && GOFLAGS=-buildvcs=false CGO_ENABLED=0 go get "github.com/rancher/local-path-provisioner@$LPP_VERSION" >/dev/null 2>&1 \
    && GOFLAGS=-buildvcs=false CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w" \
      -o "$BIN/local-path-provisioner" github.com/rancher/local-path-provisioner)
  touch "$BIN/.done"
fi

# --- image -------------------------------------------------------------------------------------
buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1 || bash "$ROOT/hack/image.sh" build >/dev/null
base_id=$(buildah inspect --type image --format '{{.FromImageID}}' "$BASE_IMAGE")
hash=$(printf '%s %s\n' "$(sha256sum < "$BIN/local-path-provisioner" | cut -c1-64)" "$base_id" | sha256sum | cut -c1-12)
IMAGE=berth.dev.local/local-path-provisioner:$hash
ARCHIVE=$CACHE/images/local-path-provisioner-$hash.tar
if [[ ! -f $ARCHIVE ]]; then
  log "image $IMAGE (buildah: the binary on $BASE_IMAGE)"
  mkdir -p "$CACHE/images"
  c=$(buildah from "$BASE_IMAGE")
  buildah copy --quiet "$c" "$BIN/local-path-provisioner" /usr/local/bin/local-path-provisioner >/dev/null
  buildah config --entrypoint '["/usr/local/bin/local-path-provisioner"]' --cmd '[]' "$c"
  buildah commit --quiet --rm "$c" "$IMAGE" >/dev/null
  buildah push --quiet "$IMAGE" "docker-archive:$ARCHIVE.tmp:$IMAGE"
  mv "$ARCHIVE.tmp" "$ARCHIVE"
fi
for sock in "$DEV"/nodes/*/containerd.sock; do
  [[ -S $sock ]] || continue
  has_line "$IMAGE" ctr -a "$sock" -n k8s.io images ls -q && continue
  log "loading $IMAGE into $(basename "$(dirname "$sock")")"
  ctr -a "$sock" -n k8s.io images import --no-unpack=false "$ARCHIVE" >/dev/null
done

# --- the provisioner, its StorageClass -------------------------------------------------------
mkdir -p "$SHARED"
chmod 0755 "$SHARED"
# Volumes of the pre-made pool that earlier dev clusters kept (hack/pv-pool.sh, now gone) would
# bind new claims before the provisioner sees them: remove those no claim holds.
for pv in $("$KUBECTL" get pv -l berth.dev/dev-pool=true \
  -o jsonpath='{range .items[?(@.status.phase!="Bound")]}{.metadata.name}{"\n"}{end}'); do
  "$KUBECTL" delete pv "$pv" --wait=false >/dev/null
done
"$KUBECTL" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: $NS}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: local-path-provisioner, namespace: $NS}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: local-path-provisioner, namespace: $NS}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, update, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: local-path-provisioner, namespace: $NS}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: local-path-provisioner}
subjects: [{kind: ServiceAccount, name: local-path-provisioner, namespace: $NS}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: berth-dev-local-path-provisioner}
rules:
- apiGroups: [""]
  resources: [nodes, persistentvolumeclaims, configmaps, pods, pods/log]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [persistentvolumes]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [storage.k8s.io]
  resources: [storageclasses]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: berth-dev-local-path-provisioner}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: berth-dev-local-path-provisioner}
subjects: [{kind: ServiceAccount, name: local-path-provisioner, namespace: $NS}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: local-path-config, namespace: $NS}
data:
  config.json: |-
    {"sharedFileSystemPath": "$SHARED"}
  setup: |-
    #!/bin/sh
    set -eu
    mkdir -m 0755 -p "\$VOL_DIR"
    chown 0:0 "\$VOL_DIR"
  teardown: |-
    #!/bin/sh
    set -eu
    rm -rf "\$VOL_DIR"
  helperPod.yaml: |-
    apiVersion: v1
    kind: Pod
    metadata: {name: helper-pod}
    spec:
      nodeSelector: {berth.dev/dev-node: real}
      containers:
      - name: helper-pod
        image: $IMAGE
        imagePullPolicy: Never
        command: [sh]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: local-path-provisioner, namespace: $NS}
spec:
  replicas: 1
  selector: {matchLabels: {app: local-path-provisioner}}
  template:
    metadata: {labels: {app: local-path-provisioner}}
    spec:
      serviceAccountName: local-path-provisioner
      nodeSelector: {berth.dev/dev-node: real}
      containers:
      - name: local-path-provisioner
        image: $IMAGE
        imagePullPolicy: Never
        args: [start, --config, /etc/config/config.json, --provisioner-name, rancher.io/local-path,
          --configmap-name, local-path-config, --service-account-name, local-path-provisioner,
          --helper-image, $IMAGE]
        env:
        - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
        - {name: CONFIG_MOUNT_PATH, value: /etc/config/}
        volumeMounts: [{name: config, mountPath: /etc/config/}]
      volumes: [{name: config, configMap: {name: local-path-config}}]
YAML
# A StorageClass's provisioner and binding mode cannot change: an older berth-shared class
# (or none: the pool's PVs named a class no object defined) is replaced.
if [[ $("$KUBECTL" get storageclass berth-shared -o jsonpath='{.provisioner}' 2>/dev/null) != rancher.io/local-path ]]; then
  "$KUBECTL" delete storageclass berth-shared --ignore-not-found >/dev/null
fi
"$KUBECTL" apply -f - >/dev/null <<YAML
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: berth-shared}
provisioner: rancher.io/local-path
volumeBindingMode: Immediate
reclaimPolicy: Delete
YAML
"$KUBECTL" -n "$NS" rollout status deployment/local-path-provisioner --timeout=180s >/dev/null \
  || die "local-path-provisioner did not become ready; see kubectl -n $NS logs deploy/local-path-provisioner"
log "local-path-provisioner $LPP_VERSION ready: StorageClass berth-shared (RWX, volumes under $SHARED, roots root-owned 0755)"
