#!/usr/bin/env bash
# release.sh VERSION [PART...]: what a release of Berth publishes, built from this tree into
# ${RELEASE_DIR:-dist/release/VERSION} (git-ignored). `make release VERSION=x.y.z` runs it.
#
# PARTs (default: all of them, in this order):
#   image   berth-VERSION.oci.tar: the image as berth:VERSION, an OCI archive with gzip layers and
#           the OCI labels (version, revision, created, source); dependencies from
#           requirements.lock, hashes checked (Dockerfile; hack/image.sh release)
#   chart   berth-VERSION.tgz: `helm package` of a copy of charts/berth whose version, appVersion
#           and image.tag are VERSION (the source chart is not edited)
#   python  berth_operator-VERSION wheel and sdist (operator, session runtime and plugin)
#   plugin  kubectl_berth-VERSION wheel and sdist: the kubectl plugin alone (plugin/pyproject.toml)
#   sums    SHA256SUMS of every file in the output
#
# VERSION must be pyproject.toml's version: the operator's default session image tag and the
# plugin's `version` are read from the installed distribution's version, so a release of another
# version would run images and report versions that are not its own. Python packages are built with
# `python -m build` (the sdist, then the wheel from it) in an isolated environment whose setuptools
# and wheel are requirements.lock's.
source "$(dirname "$0")/lib.sh"
LOG_TAG=release
[[ $# -ge 1 ]] || { echo "usage: $0 VERSION [image|chart|python|plugin|sums]..." >&2; exit 2; }
VERSION=$1
shift
PARTS=("$@")
[[ ${#PARTS[@]} -gt 0 ]] || PARTS=(image chart python plugin sums)
PY=${PY:-$ROOT/.venv/bin/python}
OUT=${RELEASE_DIR:-$ROOT/dist/release/$VERSION}

# The berth_operator modules the plugin imports (and nothing that needs the operator's
# dependencies); the plugin distribution's test fails when one is missing.
PLUGIN_MODULES=(
  __init__.py py.typed errors.py plugin.py
  api/__init__.py api/agentsession.py api/common.py api/constants.py api/laneworker.py
  api/options.py
  k8s/__init__.py k8s/calls.py k8s/paths.py k8s/plugin_client.py k8s/sync_rest.py
)

project_version() {
  "$PY" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
    "$ROOT/pyproject.toml"
}

# python_build SRC: wheel and sdist of the project in SRC into OUT.
python_build() {
  local constraints; constraints=$(mktemp)
  grep -E '^(setuptools|wheel)==' "$ROOT/requirements.lock" | cut -d' ' -f1 > "$constraints"
  local logf; logf=$(mktemp)
  PIP_CONSTRAINT=$constraints "$PY" -m build --outdir "$OUT" "$1" >"$logf" 2>&1 \
    || { cat "$logf" >&2; die "python -m build $1 failed"; }
  rm -f "$constraints" "$logf"
}

build_image() {
  local source revision
  source=$(sed -n 's/^home: *//p' "$ROOT/charts/berth/Chart.yaml")
  # The commit, marked -dirty when the tree has changes it does not hold.
  revision=$(git -C "$ROOT" rev-parse HEAD)
  [[ -z $(git -C "$ROOT" status --porcelain --untracked-files=no) ]] || revision+=-dirty
  log "image: berth:$VERSION -> berth-$VERSION.oci.tar (hack/image.sh release)"
  bash "$ROOT/hack/image.sh" release "$VERSION" "$OUT/berth-$VERSION.oci.tar" \
    --build-arg VERSION="$VERSION" \
    --build-arg REVISION="$revision" \
    --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    --build-arg SOURCE="$source"
}

build_chart() {
  log "chart: helm package (version, appVersion and image.tag $VERSION)"
  local stage; stage=$(mktemp -d)
  cp -r "$ROOT/charts/berth" "$stage/berth"
  # image.tag is the first two-space-indented `tag: ""` of values.yaml (the image block's).
  sed -i "0,/^  tag: \"\"\$/s//  tag: \"$VERSION\"/" "$stage/berth/values.yaml"
  grep -qx "  tag: \"$VERSION\"" "$stage/berth/values.yaml" || die "values.yaml: no image.tag to set"
  "$HELM_BIN/helm" lint --quiet "$stage/berth" >/dev/null
  "$HELM_BIN/helm" package --version "$VERSION" --app-version "$VERSION" -d "$OUT" \
    "$stage/berth" >/dev/null
  rm -rf "$stage"
}

build_python() {
  log "python: berth-operator wheel and sdist"
  python_build "$ROOT"
}

build_plugin() {
  log "plugin: kubectl-berth wheel and sdist (${#PLUGIN_MODULES[@]} berth_operator modules)"
  local stage m
  stage=$(mktemp -d)
  cp "$ROOT/plugin/pyproject.toml" "$ROOT/plugin/README.md" "$ROOT/LICENSE" "$stage/"
  echo "$VERSION" > "$stage/VERSION"
  for m in "${PLUGIN_MODULES[@]}"; do
    mkdir -p "$stage/berth_operator/$(dirname "$m")"
    cp "$ROOT/operator/berth_operator/$m" "$stage/berth_operator/$m"
  done
  python_build "$stage"
  rm -rf "$stage"
}

write_sums() {
  log "SHA256SUMS"
  (cd "$OUT" && rm -f SHA256SUMS && sha256sum -- * > SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS)
}

[[ $VERSION == "$(project_version)" ]] \
  || die "VERSION $VERSION is not pyproject.toml's version $(project_version): set it there first"
mkdir -p "$OUT"
t0=$(date +%s)
for part in "${PARTS[@]}"; do
  case $part in
    image) build_image ;;
    chart) build_chart ;;
    python) build_python ;;
    plugin) build_plugin ;;
    sums) write_sums ;;
    *) die "unknown part $part (image, chart, python, plugin, sums)" ;;
  esac
done
log "release $VERSION in $OUT ($(( $(date +%s) - t0 ))s):"
(cd "$OUT" && for f in *; do printf '  %8s  %s\n' "$(du -h --apparent-size -- "$f" | cut -f1)" "$f"; done)
