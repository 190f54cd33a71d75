#!/usr/bin/env bash
# agent-image.sh [build|load|tag] [DIR]: build an agent image (a Dockerfile FROM Berth's image,
# docs/agent-images.md) and load it into the dev cluster's nodes. DIR defaults to
# examples/agent-image; its Dockerfile takes Berth's image as the build argument BERTH_IMAGE.
#
#   build  build (or reuse) Berth's image (hack/image.sh build), then the agent image on it;
#          prints the agent image's reference last
#   load   build, then import it into every running node's containerd (default)
#   tag    print the reference for the current sources (no build; Berth's image must exist)
#
# The image is berth.dev.local/<basename of DIR>:<hash>, the hash covering Berth's image tag and
# every file of DIR, built with `buildah bud` as hack/image.sh builds Berth's (no registry is
# reachable here). Archives are cached under ${BERTH_CACHE:-~/.cache/berth}/images, keyed by that
# hash, and the newest BERTH_KEEP_AGENT_IMAGES (default 2) of each DIR are kept.
source "$(dirname "$0")/lib.sh"
LOG_TAG=agent-image
what=${1:-load}
dir=$(cd "${2:-$ROOT/examples/agent-image}" && pwd)
[[ -f $dir/Dockerfile ]] || die "$dir has no Dockerfile"
name=$(basename "$dir")
IMAGES=$CACHE/images
KEEP=${BERTH_KEEP_AGENT_IMAGES:-2}
mkdir -p "$IMAGES"

# berth_image: Berth's image reference, built (or reused) by hack/image.sh, present in buildah's
# store (its archive is re-imported when the store was pruned).
berth_image() {
  local ref
  ref=$(bash "$ROOT/hack/image.sh" "${1:-build}" | tail -1)
  if [[ ${1:-build} == build ]] && ! buildah inspect --type image "$ref" >/dev/null 2>&1; then
    buildah pull --quiet "docker-archive:$IMAGES/berth-${ref##*:}.tar" >/dev/null
  fi
  echo "$ref"
}

# agent_hash BERTH_REF: content hash of the agent image's inputs: Berth's image reference (itself
# a content hash of Berth's inputs) and DIR's files.
agent_hash() {
  {
    echo "base $1"
    (cd "$dir" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
  } | sha256sum | cut -c1-12
}

build() {
  local base hash t0
  base=$(berth_image build)
  hash=$(agent_hash "$base")
  AGENT_IMAGE=berth.dev.local/$name:$hash
  AGENT_ARCHIVE=$IMAGES/agent-$name-$hash.tar
  [[ -f $AGENT_ARCHIVE ]] && return
  log "agent image: buildah bud $dir on $base -> $AGENT_IMAGE"
  # apt inside the build trusts what this machine trusts (its CA bundle, read-only).
  local ca=/etc/ssl/certs/ca-certificates.crt
  t0=$(date +%s)
  buildah bud --quiet --layers --isolation chroot --network host \
    --build-arg BERTH_IMAGE="$base" --volume "$ca:$ca:ro" \
    -t "$AGENT_IMAGE" -f "$dir/Dockerfile" "$dir" >/dev/null
  buildah push --quiet "$AGENT_IMAGE" "docker-archive:$AGENT_ARCHIVE.tmp:$AGENT_IMAGE"
  mv "$AGENT_ARCHIVE.tmp" "$AGENT_ARCHIVE"
  log "agent image built in $(($(date +%s) - t0))s ($(du -h "$AGENT_ARCHIVE" | cut -f1))"
  local old
  while read -r old; do
    [[ -n $old ]] || continue
    rm -f "$old"
    old=${old##*/agent-"$name"-}
    buildah rmi "berth.dev.local/$name:${old%.tar}" >/dev/null 2>&1 || true
  done < <(ls -1t "$IMAGES/agent-$name"-*.tar 2>/dev/null | tail -n +$((KEEP + 1)))
}

# load_into SOCKET NODE: import the archive into one node's containerd unless it is there, then
# drop older builds of the same repository (as hack/image.sh does for Berth's image).
load_into() {
  local sock=$1 node=$2 other
  if ! has_line "$AGENT_IMAGE" ctr -a "$sock" -n k8s.io images ls -q; then
    log "loading $AGENT_IMAGE into $node"
    ctr -a "$sock" -n k8s.io images import --no-unpack=false "$AGENT_ARCHIVE" >/dev/null
  fi
  for other in $(ctr -a "$sock" -n k8s.io images ls -q 2>/dev/null |
    grep "^berth.dev.local/$name:" | grep -vxF "$AGENT_IMAGE"); do
    ctr -a "$sock" -n k8s.io images rm "$other" >/dev/null 2>&1 || true
  done
}

case $what in
  tag)
    echo "berth.dev.local/$name:$(agent_hash "$(berth_image tag)")" ;;
  build)
    build
    echo "$AGENT_IMAGE" ;;
  load)
    build
    for sock in "$DEV"/nodes/*/containerd.sock; do
      [[ -S $sock ]] || continue
      load_into "$sock" "$(basename "$(dirname "$sock")")"
    done
    log "agent image ready: $AGENT_IMAGE"
    echo "$AGENT_IMAGE" ;;
  *) echo "usage: $0 [build|load|tag] [DIR]" >&2; exit 2 ;;
esac
