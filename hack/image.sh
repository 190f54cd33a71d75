#!/usr/bin/env bash
# image.sh [build|load|tag]: build Berth's image from the Dockerfile and load it into the dev
# cluster's nodes.
#
#   build  build (or reuse) the image; prints nothing but progress
#   load   build, then import it into every running node's containerd (default)
#   tag    print the image reference for the current sources (no build)
#   pause  build (or reuse) the pod sandbox image and print its reference
#   release VERSION ARCHIVE [BUILDAH ARGS...]  the image as berth:VERSION in an OCI archive
#          (hack/release.sh)
#
# No image registry is reachable here, so every image is made locally with buildah:
# - the base: Debian bookworm with python3 from Debian's packages (mmdebstrap), committed as
#   berth.dev.local/debian-python:bookworm and passed as PYTHON_IMAGE (the Dockerfile's default,
#   python:3.11-slim-bookworm, is what a machine with a registry uses);
# - the pod sandbox image: hack/pause/pause.c as a static binary in a one-layer image;
# - Berth: `buildah bud` of the Dockerfile, unchanged, tagged with a content hash of everything that
#   goes into it, so a rebuild happens only when an input changed, and then reuses the cached
#   dependency layer (seconds).
# Archives are cached under ${BERTH_CACHE:-~/.cache/berth}/images, keyed by that hash.
source "$(dirname "$0")/lib.sh"
LOG_TAG=image
what=${1:-load}
IMAGES=$CACHE/images
mkdir -p "$IMAGES"

# Content hash of the Berth image's inputs: the Dockerfile, .dockerignore, the copied files (tracked
# or new, as git sees them) and the base image's id.
berth_hash() {
  local base_id=${1:-}
  (
    cd "$ROOT"
    {
      echo "base $base_id"
      git ls-files -co --exclude-standard -- Dockerfile .dockerignore pyproject.toml README.md requirements.lock \
        operator session_runtime berth_contract berth_telemetry plugin/kubectl_berth | LC_ALL=C sort | while read -r f; do
        [[ -f $f ]] && printf '%s %s\n' "$(sha256sum < "$f" | cut -c1-64)" "$f"
      done
    } | sha256sum | cut -c1-12
  )
}

image_exists() { buildah inspect --type image "$1" >/dev/null 2>&1; }

ensure_base() {
  if image_exists "$BASE_IMAGE"; then return; fi
  local tar=$IMAGES/debian-python-bookworm.tar
  if [[ ! -f $tar ]]; then
    log "base image: mmdebstrap bookworm (python3 from Debian's packages; ~30 s)"
    mmdebstrap --quiet --variant=minbase \
      --include=python3,python3-venv,python-is-python3,ca-certificates bookworm "$tar.tmp"
    mv "$tar.tmp" "$tar"
  fi
  log "base image: committing $BASE_IMAGE"
  local c
  c=$(buildah from scratch)
  buildah add --quiet "$c" "$tar" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd '["python3"]' "$c"
  buildah commit --quiet --rm "$c" "$BASE_IMAGE" >/dev/null
}

ensure_pause() {
  local hash; hash=$(sha256sum < "$ROOT/hack/pause/pause.c" | cut -c1-12)
  PAUSE_IMAGE=berth.dev.local/pause:$hash
  PAUSE_ARCHIVE=$IMAGES/pause-$hash.tar
  [[ -f $PAUSE_ARCHIVE ]] && return
  log "pause image: gcc -static hack/pause/pause.c"
  local bin=$IMAGES/pause-$hash
  gcc -static -O2 -o "$bin" "$ROOT/hack/pause/pause.c"
  local c; c=$(buildah from scratch)
  buildah copy --quiet "$c" "$bin" /pause >/dev/null
  buildah config --entrypoint '["/pause"]' --user 65535:65535 "$c"
  buildah commit --quiet --rm "$c" "$PAUSE_IMAGE" >/dev/null
  buildah push --quiet "$PAUSE_IMAGE" "docker-archive:$PAUSE_ARCHIVE.tmp:$PAUSE_IMAGE"
  mv "$PAUSE_ARCHIVE.tmp" "$PAUSE_ARCHIVE"
}

ensure_berth() {
  ensure_base
  local base_id; base_id=$(buildah inspect --type image --format '{{.FromImageID}}' "$BASE_IMAGE")
  local hash; hash=$(berth_hash "$base_id")
  BERTH_IMAGE=berth.dev.local/berth:$hash
  BERTH_ARCHIVE=$IMAGES/berth-$hash.tar
  [[ -f $BERTH_ARCHIVE ]] && return
  log "berth image: buildah bud Dockerfile -> $BERTH_IMAGE (cold ~1 min; a source change: seconds)"
  local t0; t0=$(date +%s)
  bud "$BERTH_IMAGE"
  buildah push --quiet "$BERTH_IMAGE" "docker-archive:$BERTH_ARCHIVE.tmp:$BERTH_IMAGE"
  mv "$BERTH_ARCHIVE.tmp" "$BERTH_ARCHIVE"
  log "berth image built in $(( $(date +%s) - t0 ))s ($(du -h "$BERTH_ARCHIVE" | cut -f1))"
  prune_builds
}

# bud TAG [BUILDAH ARGS...]: `buildah bud` of the Dockerfile, tagged TAG, on the local base image.
bud() {
  # pip and apt inside the build trust what this machine trusts (its CA bundle, read-only).
  local tag=$1 ca=/etc/ssl/certs/ca-certificates.crt pipconf=$IMAGES/pip.conf
  shift
  printf '[global]\ncert = %s\n' "$ca" > "$pipconf"
  buildah bud --quiet --layers --isolation chroot --network host \
    --build-arg PYTHON_IMAGE="$BASE_IMAGE" "$@" \
    --volume "$ca:$ca:ro" --volume "$pipconf:/etc/pip.conf:ro" \
    -t "$tag" -f "$ROOT/Dockerfile" "$ROOT" >/dev/null
}

# release_archive VERSION ARCHIVE [BUILDAH ARGS...]: the image tagged berth:VERSION (the dev
# build's cached layers and the build args given, e.g. the OCI label values), written to ARCHIVE
# as an OCI archive with gzip-compressed layers and the reference name berth:VERSION.
release_archive() {
  local version=$1 archive=$2
  shift 2
  ensure_berth
  bud "berth:$version" "$@"
  rm -f "$archive"
  buildah push --quiet --format oci --compression-format gzip \
    "berth:$version" "oci-archive:$archive:berth:$version"
}

# prune_builds: every source change makes a ~600 MB image; keep the archives (and buildah images)
# of the KEEP_IMAGES newest builds only, so the disk does not fill up (a full disk makes the
# kubelets taint their nodes with disk-pressure and garbage-collect images, the pause image too).
KEEP_IMAGES=${BERTH_KEEP_IMAGES:-3}
prune_builds() {
  local old tag
  while read -r old; do
    [[ -n $old ]] || continue
    tag=${old##*/berth-}; tag=${tag%.tar}
    rm -f "$old"
    buildah rmi "berth.dev.local/berth:$tag" >/dev/null 2>&1 || true
  done < <(ls -1t "$IMAGES"/berth-*.tar 2>/dev/null | tail -n +$((KEEP_IMAGES + 1)))
  buildah rmi --prune >/dev/null 2>&1 || true
}

# load_into SOCKET NAME ARCHIVE IMAGE: import ARCHIVE into one node's containerd unless present.
load_into() {
  local sock=$1 node=$2 archive=$3 image=$4
  if has_line "$image" ctr -a "$sock" -n k8s.io images ls -q; then return; fi
  log "loading $image into $node"
  ctr -a "$sock" -n k8s.io images import --no-unpack=false "$archive" >/dev/null
  # Older builds of the same repository are not needed by this cluster any more.
  local repo=${image%:*} other
  for other in $(ctr -a "$sock" -n k8s.io images ls -q 2>/dev/null | grep "^$repo:" | grep -vxF "$image"); do
    ctr -a "$sock" -n k8s.io images rm "$other" >/dev/null 2>&1 || true
  done
}

BASE_IMAGE=berth.dev.local/debian-python:bookworm
case $what in
  tag)
    base_id=$(buildah inspect --type image --format '{{.FromImageID}}' "$BASE_IMAGE" 2>/dev/null || true)
    echo "berth.dev.local/berth:$(berth_hash "$base_id")" ;;
  pause)
    ensure_pause
    echo "$PAUSE_IMAGE" ;;
  build)
    ensure_pause; ensure_berth
    echo "$BERTH_IMAGE" ;;
  load)
    ensure_pause; ensure_berth
    for sock in "$DEV"/nodes/*/containerd.sock; do
      [[ -S $sock ]] || continue
      node=$(basename "$(dirname "$sock")")
      load_into "$sock" "$node" "$PAUSE_ARCHIVE" "$PAUSE_IMAGE"
      load_into "$sock" "$node" "$BERTH_ARCHIVE" "$BERTH_IMAGE"
    done
    echo "$BERTH_IMAGE" > "$DEV/image"
    log "image ready: $BERTH_IMAGE" ;;
  release)
    [[ $# -ge 3 ]] || { echo "usage: $0 release VERSION ARCHIVE [BUILDAH ARGS...]" >&2; exit 2; }
    ensure_base
    release_archive "${@:2}" ;;
  *) echo "usage: $0 [build|load|tag|pause|release]" >&2; exit 2 ;;
esac
