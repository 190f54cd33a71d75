#!/usr/bin/env bash
# Build the dev control plane from the Go module proxy into a versioned cache outside the repo.
#
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
#   kubelet, kube-proxy                                               (k8s.io/kubernetes)
#   etcd                                                              (go.etcd.io/etcd/server/v3)
#   kwok, kwokctl                                                     (sigs.k8s.io/kwok)
#   helm                                                              (helm.sh/helm/v3)
#   crictl (to inspect and tear down the dev nodes' pods)             (sigs.k8s.io/cri-tools)
#   kube-router (NetworkPolicy enforcement only, hack/netpol.sh)      (github.com/cloudnativelabs/kube-router/v2)
#   agent-sandbox-controller + its CRDs (a peer for bench/peers.py)   (sigs.k8s.io/agent-sandbox)
#   jaeger (v2, the dev cluster's trace backend, in-memory store)     (github.com/jaegertracing/jaeger)
#
# k8s.io/kubernetes and etcd 3.5 point their sibling modules at local directories with `replace`
# directives, so `go install mod@version` refuses them. We build them from a small wrapper module
# that requires the published module and re-points every such replace to the published version.
#
# Cache: ${BERTH_CACHE:-~/.cache/berth}/bin/<component>-<version>/ ; a finished build is marked by a
# `.done` stamp, so a second run only checks stamps. Prints progress; exits non-zero on any failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
cache=${BERTH_CACHE:-$HOME/.cache/berth}
export GOFLAGS=-buildvcs=false
export CGO_ENABLED=0
step() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# The go.mod of module@version, resolved by the Go tool itself (it honours GOPROXY and GOFLAGS).
gomod_file() {
  local tmp; tmp=$(mktemp -d)
  (cd "$tmp" && go mod download -json "$1@$2") | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p'
  rm -rf "$tmp"
}

build_kubernetes() {
  local out=$cache/bin/kubernetes-$KUBE_VERSION
  if [[ -f $out/.done && -x $out/kubelet && -x $out/kube-proxy ]]; then step "kubernetes $KUBE_VERSION: cached in $out"; return; fi
  local mod=$cache/src/kubernetes-$KUBE_VERSION
  mkdir -p "$mod" "$out"
  local staging=v0.${KUBE_VERSION#v1.}
  step "kubernetes $KUBE_VERSION: writing wrapper module (staging modules -> $staging)"
  {
    echo "module berth.dev/kubebuild"
    echo
    echo "go 1.24.0"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    sed -n 's#^\s*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*#replace \1 => \1 '"$staging"'#p' "$(gomod_file k8s.io/kubernetes "$KUBE_VERSION")"
  } > "$mod/go.mod"
  step "kubernetes: resolving modules (go mod download; cold: a few minutes)"
  (cd "$mod" && go get "k8s.io/kubernetes@$KUBE_VERSION" >/dev/null 2>&1 || true)
  local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  local date; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local ld=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do
    [[ -x $out/$cmd && -f $out/.done ]] && continue  # a cached set that lacks a newer member
    step "kubernetes: go build $cmd (cold: 5-15 min each on 2 cores)"
    (cd "$mod" && go build -mod=mod -trimpath -ldflags "-s -w $ld" -o "$out/$cmd" "k8s.io/kubernetes/cmd/$cmd")
  done
  "$out/kube-apiserver" --version
  touch "$out/.done"
}

build_etcd() {
  local out=$cache/bin/etcd-$ETCD_VERSION
  if [[ -f $out/.done ]]; then step "etcd $ETCD_VERSION: cached in $out"; return; fi
  local mod=$cache/src/etcd-$ETCD_VERSION
  mkdir -p "$mod" "$out"
  step "etcd $ETCD_VERSION: writing wrapper module"
  cat > "$mod/go.mod" <<MOD
module berth.dev/etcdbuild

go 1.23

require go.etcd.io/etcd/server/v3 $ETCD_VERSION

replace (
	go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/v2 => go.etcd.io/etcd/client/v2 v2.305.${ETCD_VERSION#v3.5.}
	go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 $ETCD_VERSION
	go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/raft/v3 => go.etcd.io/etcd/raft/v3 $ETCD_VERSION
)
MOD
  step "etcd: go build"
  (cd "$mod" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1 || true)
  (cd "$mod" && go build -mod=mod -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
  "$out/etcd" --version | sed -n 1p
  touch "$out/.done"
}

build_go_install() { # name version out-subdir package ldflags
  local name=$1 version=$2 pkg=$3 ld=$4
  local out=$cache/bin/$name-$version
  # The stamp records the build flags: changing them rebuilds, an unchanged build is reused.
  if [[ -f $out/.done && $(cat "$out/.done") == "$ld" ]]; then
    step "$name $version: cached in $out"; return
  fi
  mkdir -p "$out"
  step "$name $version: go install $pkg"
  GOBIN=$out go install -trimpath -ldflags "-s -w $ld" "$pkg@$version"
  printf '%s' "$ld" > "$out/.done"
}

# Helm's Makefile sets the Kubernetes version it assumes (helm template, lint) from its client
# modules; `go install` does not, leaving v1.20. Set it to the dev cluster's version.
helm_kube_ld() {
  local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  local p
  for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    printf ' -X %s.k8sVersionMajor=1 -X %s.k8sVersionMinor=%s' "$p" "$p" "$minor"
  done
}

build_kwok() {
  local out=$cache/bin/kwok-$KWOK_VERSION
  if [[ -f $out/.done ]]; then step "kwok $KWOK_VERSION: cached in $out"; return; fi
  mkdir -p "$out"
  local ld="-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=$KUBE_VERSION"
  for c in kwok kwokctl; do
    step "kwok: go install sigs.k8s.io/kwok/cmd/$c@$KWOK_VERSION"
    GOBIN=$out go install -trimpath -ldflags "-s -w $ld" "sigs.k8s.io/kwok/cmd/$c@$KWOK_VERSION"
  done
  touch "$out/.done"
}

# kube-router: a test component of the dev cluster only (never shipped in Berth's image or chart).
build_kube_router() {
  build_go_install kube-router "$KUBE_ROUTER_VERSION" github.com/cloudnativelabs/kube-router/v2/cmd/kube-router \
    "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION"
}

# agent-sandbox: a peer measured by bench/peers.py, run as a local process against the dev cluster
# (never shipped). Its CRDs are copied from the module's k8s/crds next to the binary.
build_agent_sandbox() {
  local out=$cache/bin/agent-sandbox-$AGENT_SANDBOX_VERSION
  if [[ -f $out/.done && -x $out/agent-sandbox-controller ]]; then
    step "agent-sandbox $AGENT_SANDBOX_VERSION: cached in $out"; return
  fi
  mkdir -p "$out/crds"
  step "agent-sandbox $AGENT_SANDBOX_VERSION: go install (cold: about two minutes)"
  GOBIN=$out go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller@$AGENT_SANDBOX_VERSION"
  local dir
  dir=$(cd "$(mktemp -d)" && go mod download -json "sigs.k8s.io/agent-sandbox@$AGENT_SANDBOX_VERSION" \
    | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')
  cp "$dir"/k8s/crds/*.yaml "$out/crds/"
  chmod u+w "$out"/crds/*.yaml
  touch "$out/.done"
}

# Jaeger v2: the dev cluster's trace backend (OTLP in, query API and UI out; never shipped). Its
# go.mod has a replace directive, so `go install mod@version` refuses it: a wrapper module requires
# it and repeats its module-to-module replaces.
build_jaeger() {
  local out=$cache/bin/jaeger-$JAEGER_VERSION
  if [[ -f $out/.done && -x $out/jaeger ]]; then step "jaeger $JAEGER_VERSION: cached in $out"; return; fi
  local mod=$cache/src/jaeger-$JAEGER_VERSION
  mkdir -p "$mod" "$out"
  {
    echo "module berth.dev/jaegerbuild"
    echo
    echo "go 1.24.6"
    echo
    echo "require github.com/jaegertracing/jaeger $JAEGER_VERSION"
    echo
    grep -E '^replace [^ ]+ => [^ .][^ ]* v' "$(gomod_file github.com/jaegertracing/jaeger "$JAEGER_VERSION")" || true
  } > "$mod/go.mod"
  step "jaeger $JAEGER_VERSION: resolving modules (cold: several minutes)"
  (cd "$mod" && go get "github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_VERSION")
  step "jaeger $JAEGER_VERSION: go build (cold: ten minutes or more on two cores)"
  (cd "$mod" && go build -trimpath -ldflags "-s -w" -o "$out/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger)
  touch "$out/.done"
}

mkdir -p "$cache/bin"
what=${1:-all}
case $what in
  all) build_etcd; build_kwok
       build_go_install helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
         "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean $(helm_kube_ld)"
       build_go_install crictl "$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl \
         "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION"
       build_kube_router
       build_kubernetes ;;
  kube-router) build_kube_router ;;
  agent-sandbox) build_agent_sandbox ;;
  jaeger) build_jaeger ;;
  kubernetes) build_kubernetes ;;
  etcd) build_etcd ;;
  kwok) build_kwok ;;
  *) echo "usage: $0 [all|kubernetes|etcd|kwok|kube-router|agent-sandbox|jaeger]" >&2; exit 2 ;;
esac
step "binaries ready under $cache/bin ($(du -sh "$cache/bin" | cut -f1))"
