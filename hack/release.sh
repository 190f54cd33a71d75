#!/usr/bin/env bash
# release.sh [VERSION] [OUT]: what a release of Berth publishes, built from this checkout into
# OUT (default dist/release/VERSION), with a SHA256SUMS file and the list of files and sizes:
#
#   berth-VERSION.oci.tar          the image berth:VERSION (OCI archive, gzip layers, OCI labels:
#                                  version, revision (-dirty for uncommitted changes), created,
#                                  source), its Python dependencies installed from
#                                  requirements.lock with their hashes checked
#   berth-VERSION.tgz              the Helm chart (`helm package` of a copy): version, appVersion
#                                  and image.tag VERSION, so its default image is berth:VERSION
#   berth_operator-VERSION-*.whl   the Python distribution (operator, session runtime, worker,
#   berth_operator-VERSION.tar.gz  kubectl plugin) as wheel and sdist
#   kubectl_berth-VERSION-*.whl    the kubectl plugin alone, without the operator's dependencies
#   kubectl_berth-VERSION.tar.gz   (plugin/pyproject.toml, plugin/kubectl_berth and the shared
#                                  berth_operator modules in SHARED_MODULES)
#
# VERSION must be pyproject.toml's version (the one source of __version__ and, by a test, of the
# chart's appVersion); bump it there first. RELEASE_SKIP_IMAGE=1 leaves the image out (what the
# chart test of a release needs, in seconds instead of minutes); RELEASE_PARTS picks parts
# (default "image chart python plugin"). Python packages are built by `uv build` (the sdist, then
# the wheel from it: nothing but what the sdist holds) with requirements.lock's setuptools and
# wheel. Idempotent.
source "$(dirname "$0")/lib.sh"
LOG_TAG=release
project=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/pyproject.toml" | head -1)
version=${1:-${VERSION:-$project}}
[[ $version == "$project" ]] || die "VERSION $version is not pyproject.toml's version $project: bump it there first"
parts=${RELEASE_PARTS:-image chart python plugin}
[[ ${RELEASE_SKIP_IMAGE:-0} != 1 ]] || parts=${parts//image/}
out=${2:-$ROOT/dist/release/$version}
mkdir -p "$out"
out=$(cd "$out" && pwd)
start=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The berth_operator modules the plugin (plugin/kubectl_berth) shares with the operator: the API
# vocabulary, the errors, the API paths and their error translation, nothing that needs the
# operator's dependencies (an import contract in pyproject.toml keeps kubectl_berth to them);
# tests/unit/release/test_plugin_distribution.py fails when one is missing.
SHARED_MODULES=(
  __init__.py py.typed errors.py
  api/__init__.py api/agentsession.py api/common.py api/constants.py api/laneworker.py
  api/retention.py
  k8s/__init__.py k8s/calls.py k8s/paths.py
)

# python_build SRC NAME: wheel and sdist of the project in SRC (distribution file prefix NAME)
# into OUT, built with requirements.lock's setuptools and wheel.
python_build() {
  grep -E '^(setuptools|wheel)==' "$ROOT/requirements.lock" | cut -d' ' -f1 > "$tmp/build-constraints.txt"
  rm -f "$out/$2"-*
  (cd "$1" && "$ROOT/.venv/bin/uv" build --quiet --build-constraint "$tmp/build-constraints.txt" \
    --out-dir "$out" .)
  rm -f "$out/.gitignore"
}

build_image() {
  local source revision
  source=$(sed -n 's/^home: *//p' "$ROOT/charts/berth/Chart.yaml")
  revision=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
  [[ -z $(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null) ]] || revision+=-dirty
  log "image berth:$version -> $out/berth-$version.oci.tar (cold ~3 min)"
  bash "$ROOT/hack/image.sh" release "$version" "$out/berth-$version.oci.tar" \
    --build-arg VERSION="$version" \
    --build-arg REVISION="$revision" \
    --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --build-arg SOURCE="$source"
}

build_chart() {
  log "chart berth-$version.tgz (version, appVersion and image.tag $version)"
  [[ -x $HELM_BIN/helm ]] || bash "$ROOT/hack/build-binaries.sh" helm >/dev/null
  cp -r "$ROOT/charts/berth" "$tmp/berth"
  sed -i "s/^version: .*/version: $version/; s/^appVersion: .*/appVersion: \"$version\"/" "$tmp/berth/Chart.yaml"
  # image.tag is the first two-space-indented `tag: ""` of values.yaml (the image block's).
  sed -i "0,/^  tag: \"\"\$/s//  tag: \"$version\"/" "$tmp/berth/values.yaml"
  grep -qx "  tag: \"$version\"" "$tmp/berth/values.yaml" || die "values.yaml: no image.tag to set"
  "$HELM_BIN/helm" lint "$tmp/berth" >/dev/null
  "$HELM_BIN/helm" package "$tmp/berth" --destination "$out" >/dev/null
}

build_plugin() {
  log "kubectl-berth wheel and sdist (kubectl_berth and ${#SHARED_MODULES[@]} berth_operator modules)"
  local stage=$tmp/plugin m
  mkdir -p "$stage"
  cp "$ROOT/plugin/pyproject.toml" "$ROOT/plugin/README.md" "$ROOT/LICENSE" "$stage/"
  echo "$version" > "$stage/VERSION"
  (cd "$ROOT/plugin" && git ls-files -co --exclude-standard -- kubectl_berth) | while read -r m; do
    [[ $m == *.pyc ]] || install -D -m 644 "$ROOT/plugin/$m" "$stage/$m"
  done
  for m in "${SHARED_MODULES[@]}"; do
    mkdir -p "$stage/berth_operator/$(dirname "$m")"
    cp "$ROOT/operator/berth_operator/$m" "$stage/berth_operator/$m"
  done
  cp -r "$ROOT/berth_contract" "$stage/berth_contract"
  find "$stage/berth_contract" -name __pycache__ -prune -exec rm -rf {} +
  python_build "$stage" kubectl_berth
}

for part in $parts; do
  case $part in
    image) build_image ;;
    chart) build_chart ;;
    python) log "berth-operator wheel and sdist"; python_build "$ROOT" berth_operator ;;
    plugin) build_plugin ;;
    *) die "unknown part $part (image, chart, python, plugin)" ;;
  esac
done

(cd "$out" && rm -f SHA256SUMS && sha256sum -- * > SHA256SUMS)
log "release $version in $out ($(( $(date +%s) - start ))s):"
(cd "$out" && for f in *; do printf '  %-44s %s\n' "$f" "$(du -h --apparent-size "$f" | cut -f1)"; done)
