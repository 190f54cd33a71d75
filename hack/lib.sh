# Shared helpers for the dev-cluster scripts (sourced, not run).
# Paths: the repo root, the dev state dir (.berth/dev, git-ignored) and the binary cache.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=versions.env
source "$ROOT/hack/versions.env"
CACHE=${BERTH_CACHE:-$HOME/.cache/berth}
DEV=${BERTH_DEV_DIR:-$ROOT/.berth/dev}
KUBE_BIN=$CACHE/bin/kubernetes-$KUBE_VERSION
ETCD_BIN=$CACHE/bin/etcd-$ETCD_VERSION
KWOK_BIN=$CACHE/bin/kwok-$KWOK_VERSION
HELM_BIN=$CACHE/bin/helm-$HELM_VERSION
CRICTL_BIN=$CACHE/bin/crictl-$CRICTL_VERSION
# The real nodes (hack/nodes.sh) and the address on lo where the control plane and the host
# services listen for pods (198.18.0.0/15 is the range set aside for network tests). node-a and
# node-b have Landlock and run everything; node-c gives its pods none (as an older kernel or
# gVisor would), is tainted berth.dev/no-landlock=true:NoSchedule and runs only the pods that
# tolerate that: the tests of what Berth does on such a node.
LANDLOCK_NODE_NAMES="node-a node-b"
NO_LANDLOCK_NODE_NAMES="node-c"
NODE_NAMES="$LANDLOCK_NODE_NAMES $NO_LANDLOCK_NODE_NAMES"
HOST_IP=198.19.0.1
CLUSTER_NAME=${BERTH_CLUSTER_NAME:-berth}
export KWOK_WORKDIR=$DEV/kwok
log() { printf '[%s %s] %s\n' "${LOG_TAG:-cluster}" "$(date +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*" >&2; exit 1; }

# free_port: print a free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# pid_alive FILE: true when FILE names a running process.
pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop_pidfile FILE [GRACE_SECONDS]: SIGTERM the process group, wait, then SIGKILL.
stop_pidfile() {
  local f=$1 grace=${2:-10} pid
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq $((grace * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# Checks read a command's whole output instead of piping it into `grep -q`: grep quits at the
# first match, the command then dies of SIGPIPE, and under pipefail the check fails (exit 141).
# has_line LINE CMD...: CMD's output (stderr dropped) has LINE as a whole line.
has_line() { local out; out=$("${@:2}" 2>/dev/null) || true; [[ $'\n'$out$'\n' == *$'\n'"$1"$'\n'* ]]; }
# has_address IP: loopback carries IP/32. ensure_address IP: add it unless it is there
# (tolerates a concurrent add of the same address).
has_address() { local out; out=$(ip -4 addr show dev lo); [[ $out == *" $1/32 "* ]]; }
ensure_address() { has_address "$1" || ip addr add "$1/32" dev lo 2>/dev/null || has_address "$1"; }
