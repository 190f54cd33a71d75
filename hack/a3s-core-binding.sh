#!/usr/bin/env bash
# Build Berth's PyO3 binding over a3s-code-core (a3s_core_binding/) with maturin, cache the wheel,
# and install it into .venv.
#
# The Rust toolchain and the crates come from their registries through cargo; a3s-code-core is
# pinned exactly in Cargo.toml. No Cargo.lock is committed (it would spell out the registry's
# address, which stays out of the repository): cargo resolves the rest at the first build, and
# the wheel is cached from then on. Nothing is vendored. Cache:
#   ${BERTH_CACHE:-~/.cache/berth}/a3s-core-binding/<core version>-<content hash>/*.whl (+ .done)
# keyed by the a3s-code-core version and a hash of the binding's source, manifest and rustc
# version; the cargo build directory (…/a3s-core-binding/target) is shared between keys so a
# source change rebuilds only the binding. A cold debug build takes about 7 minutes on 2 cores;
# a cached run only checks stamps. Prints progress; exits non-zero on any failure.
#
# Usage: hack/a3s-core-binding.sh [python]   (default .venv/bin/python)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
src=$repo/a3s_core_binding
py=${1:-$repo/.venv/bin/python}
cache=${BERTH_CACHE:-$HOME/.cache/berth}/a3s-core-binding
step() { printf '[a3s-core %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

core=$(sed -n 's/^a3s-code-core = { version = "=\([0-9.]*\)".*/\1/p' "$src/Cargo.toml")
[[ -n $core ]] || { echo "a3s_core_binding/Cargo.toml pins no a3s-code-core version" >&2; exit 1; }
command -v cargo >/dev/null || { echo "cargo is not on PATH (the Rust toolchain is needed)" >&2; exit 1; }
hash=$( (cd "$src" && cat Cargo.toml pyproject.toml src/*.rs; rustc --version) \
  | sha256sum | cut -c1-16)
key=$core-$hash
out=$cache/$key
stamp=$(dirname "$py")/../.a3s-core-binding

if [[ -f $out/.done ]]; then
  step "a3s-code-core $core binding: cached in $out"
else
  if ! "$py" -m maturin --version >/dev/null 2>&1; then
    step "installing maturin into $(dirname "$py")"
    "$py" -m pip install -q 'maturin==1.16.0'
  fi
  step "a3s-code-core $core binding: building with maturin (cold: ~7 min on 2 cores)"
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  start=$(date +%s)
  # The target directory is shared by every checkout on this machine, and cargo judges a path
  # crate fresh by comparing its sources' mtimes with the last build's: another checkout's newer
  # build of other sources would be taken as this one's. Touching them makes cargo rebuild the
  # binding crate (its dependencies stay cached).
  touch "$src"/src/*.rs "$src/Cargo.toml"
  CARGO_TARGET_DIR=$cache/target nice -n 10 "$py" -m maturin build --strip \
    --manifest-path "$src/Cargo.toml" --interpreter "$py" --out "$out.tmp" --quiet
  step "built in $(( $(date +%s) - start )) s: $(ls "$out.tmp")"
  touch "$out.tmp/.done"
  rm -rf "$out" && mv "$out.tmp" "$out"
fi

if [[ -f $stamp && $(cat "$stamp") == "$key" ]] && "$py" -c 'import berth_a3s_core' 2>/dev/null; then
  step "installed in $(dirname "$py")/.. ($key)"
else
  step "installing $(basename "$out"/*.whl) into $(dirname "$py")/.."
  "$py" -m pip install -q --force-reinstall --no-deps "$out"/*.whl
  echo "$key" > "$stamp"
fi
