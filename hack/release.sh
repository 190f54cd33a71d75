#!/usr/bin/env bash
# release.sh [VERSION] [OUT]: what a release of Berth publishes, built from this checkout into
# OUT (default dist/release/VERSION), with a SHA256SUMS file and the list of files and sizes:
#
#   berth-VERSION.oci.tar          the image berth:VERSION (OCI archive, gzip layers, OCI labels:
#                                  version, revision, created), its Python dependencies installed
#                                  from requirements.lock with their hashes checked
#   berth-VERSION.tgz              the Helm chart (`helm package`): version and appVersion VERSION,
#                                  so its default image is berth:VERSION
#   berth_operator-VERSION-*.whl   the Python distribution (operator, session runtime, worker,
#   berth_operator-VERSION.tar.gz  kubectl plugin) as wheel and sdist
#
# VERSION must be pyproject.toml's version (the one source of __version__ and, by a test, of the
# chart's appVersion); bump it there first. RELEASE_SKIP_IMAGE=1 leaves the image out (what the
# chart test of a release needs, in seconds instead of minutes). Idempotent.
source "$(dirname "$0")/lib.sh"
LOG_TAG=release
project=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/pyproject.toml" | head -1)
version=${1:-${VERSION:-$project}}
[[ $version == "$project" ]] || die "VERSION $version is not pyproject.toml's version $project: bump it there first"
out=${2:-$ROOT/dist/release/$version}
mkdir -p "$out"
out=$(cd "$out" && pwd)
start=$(date +%s)
[[ -x $HELM_BIN/helm ]] || bash "$ROOT/hack/build-binaries.sh" helm >/dev/null

if [[ ${RELEASE_SKIP_IMAGE:-0} != 1 ]]; then
  log "image berth:$version -> $out/berth-$version.oci.tar (cold ~3 min)"
  bash "$ROOT/hack/image.sh" release "$version" "$out/berth-$version.oci.tar" \
    --build-arg VERSION="$version" \
    --build-arg REVISION="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" \
    --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
fi

log "chart berth-$version.tgz"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$ROOT/charts/berth" "$tmp/berth"
sed -i "s/^version: .*/version: $version/; s/^appVersion: .*/appVersion: \"$version\"/" "$tmp/berth/Chart.yaml"
"$HELM_BIN/helm" lint "$tmp/berth" >/dev/null
"$HELM_BIN/helm" package "$tmp/berth" --destination "$out" >/dev/null

log "wheel and sdist"
rm -f "$out"/berth_operator-*
(cd "$ROOT" && "$ROOT/.venv/bin/uv" build --quiet --out-dir "$out" --sdist --wheel .)
rm -f "$out/.gitignore"

(cd "$out" && rm -f SHA256SUMS && sha256sum -- * > SHA256SUMS)
log "release $version in $out ($(( $(date +%s) - start ))s):"
(cd "$out" && for f in *; do printf '  %-44s %s\n' "$f" "$(du -h --apparent-size "$f" | cut -f1)"; done)
