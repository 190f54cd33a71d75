#!/usr/bin/env bash
# netpol.sh up|down|status: NetworkPolicy enforcement for the dev cluster's real nodes.
#
# kube-router's network-policy controller alone (--run-firewall, no routing, no service proxy),
# built from its Go module by hack/build-binaries.sh into the binary cache. It is a TEST COMPONENT
# of the dev cluster: it runs only here, on the test addresses of hack/nodes.sh, and is never part
# of Berth's image or chart. The version served here (KUBE_ROUTER_VERSION in versions.env) has
# security advisories reported against it; that is acceptable for a process that only filters
# packets between the dev cluster's own pods on this machine, and would not be for a real cluster.
#
# Why two instances, and why one on iptables-legacy and one on iptables-nft:
#   kube-router enforces policies for the pods it takes as local: pods whose status.hostIP equals
#   its node's first InternalIP (--hostname-override names the node). node-a (198.19.0.11) and
#   node-b (198.19.0.12) have different addresses, so one instance covers one node's pods only.
#   But both nodes live in this machine's single network namespace, and every sync of an
#   instance rewrites the whole filter table from iptables-save and deletes every KUBE-POD-FW-*
#   and KUBE-NWPLCY-* chain it did not create in that sync: two instances on one iptables would
#   each delete the other's pod chains, and pods of one node or the other would go unfiltered.
#   The kernel has two independent rule sets that both see every packet: the legacy xtables
#   tables and nf_tables. node-a's instance runs with iptables-legacy, node-b's with iptables-nft
#   (beside kube-proxy's rules, as in an ordinary kube-router + kube-proxy cluster). Each sees
#   and cleans only its own rule set; a packet must be accepted by both (a DROP/REJECT in either
#   ends it), which is exactly "the source pod's egress policy AND the destination pod's ingress
#   policy". The marks kube-router uses inside a pod chain (0x10000) are reset at the chain's
#   end, so one instance's verdict never skips the other's checks. Each instance picks its
#   iptables through PATH (a directory of symlinks per node): go-iptables and kube-router's
#   save/restore run `iptables`, `iptables-save`, `iptables-restore` from PATH.
#   ipsets are kernel-wide and shared: both instances compute the same sets (every policy's
#   sets, whatever the node), and their `ipset` calls are serialized by a wrapper holding a lock
#   (they use the same temporary set names while swapping). When a policy goes, both delete its
#   sets; the second logs "Failed to cleanup stale ipsets ... does not exist", which is harmless.
#
# Only node-a and node-b get an instance (the kernel has two rule sets, so two instances): pods on
# node-c, the node without Landlock that runs only the tests about that (hack/lib.sh), are not
# filtered.
#
# Like any NetworkPolicy implementation (and the Kubernetes documentation's rule), traffic from
# the pod's own node is always allowed. Here every host process (the apiserver on 198.19.0.1,
# kubelets, an operator run on the host by the tests) is "the node" for every pod, so packets
# cannot show whether a policy admits the apiserver: on a managed cluster the apiserver is not
# on the node, and the policy's apiServer rule is what lets its pod proxy in.
#
#   up      start both instances (idempotent) and wait until their chains are in place
#   down    stop them and remove their chains and sets
#   status  which instances run
source "$(dirname "$0")/lib.sh"
LOG_TAG=netpol
export KUBECONFIG=$DEV/kubeconfig
KR=$CACHE/bin/kube-router-$KUBE_ROUTER_VERSION/kube-router
SERVICE_RANGE=198.19.128.0/17

backend() { case $1 in node-a) echo legacy ;; node-b) echo nft ;; *) die "unknown node $1" ;; esac; }
dir() { echo "$DEV/nodes/$1/netpol"; }

# bin_dir NODE: the PATH directory that points kube-router at NODE's iptables backend.
bin_dir() {
  local n=$1 d b
  d=$(dir "$n")/bin; b=$(backend "$n")
  mkdir -p "$d"
  local t
  for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    ln -sfn "$(command -v "${t%%-*}-$b${t#"${t%%-*}"}")" "$d/$t"
  done
  # Serialized, and retried a few times: right after both instances start, an \`ipset save\`
  # has been seen to fail without a message (kube-router then exits).
  cat > "$d/ipset" <<SH
#!/bin/sh
t=\$(mktemp -d); cat > "\$t/in"
for i in 1 2 3 4 5; do
  if flock "$DEV/nodes/netpol-ipset.lock" "$(command -v ipset)" "\$@" < "\$t/in" > "\$t/out" 2> "\$t/err"; then
    cat "\$t/out"; rm -rf "\$t"; exit 0
  fi
  sleep 0.3
done
cat "\$t/out"; cat "\$t/err" >&2; rm -rf "\$t"; exit 1
SH
  chmod +x "$d/ipset"
  echo "$d"
}

chains_present() { # NODE: its instance's top-level chain is hooked into FORWARD
  local out; out=$("$(bin_dir "$1")/iptables" -S FORWARD 2>/dev/null) || return 1
  [[ $out == *"-j KUBE-ROUTER-FORWARD"* ]]
}

start() {
  local n=$1 d; d=$(dir "$n")
  pid_alive "$d/kube-router.pid" && return
  mkdir -p "$d"
  PATH="$(bin_dir "$n"):$PATH" setsid "$KR" --kubeconfig "$KUBECONFIG" --hostname-override "$n" \
    --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false \
    --enable-ipv4=true --enable-ipv6=false --service-cluster-ip-range "$SERVICE_RANGE" \
    --health-port 0 --metrics-port 0 --iptables-sync-period 1m \
    >> "$d/kube-router.log" 2>&1 < /dev/null &
  echo $! > "$d/kube-router.pid"
}

# cleanup NODE: stop its instance and remove its chains from its iptables backend. Not
# `kube-router --cleanup-config`: that also runs the service proxy's and router's clean-up (IPVS,
# routes, links), which this machine's other users own.
cleanup() {
  local n=$1 d ipt c; d=$(dir "$n")
  stop_pidfile "$d/kube-router.pid" 10
  ipt=$(bin_dir "$n")/iptables
  for c in INPUT FORWARD OUTPUT; do
    # The jump's comment ("kube-router netpol - <hash>"): delete each such rule as listed.
    "$ipt" -S "$c" 2>/dev/null | { grep -- "-j KUBE-ROUTER-$c" || true; } | sed 's/^-A /-D /' \
      | while read -r rule; do eval "\"$ipt\" $rule" || true; done
  done
  local chains; chains=$("$ipt" -S 2>/dev/null | awk '/^-N KUBE-(ROUTER-|POD-FW-|NWPLCY-)/ {print $2}')
  for c in $chains; do "$ipt" -F "$c" 2>/dev/null || true; done
  for c in $chains; do "$ipt" -X "$c" 2>/dev/null || true; done
}

destroy_sets() { # after both instances' rules are gone, no set is referenced
  local s
  for s in $(ipset list -n 2>/dev/null | grep -E '^KUBE-(SRC|DST)-' || true); do ipset destroy "$s" 2>/dev/null || true; done
}

case ${1:-} in
  up)
    [[ -x $KR ]] || bash "$ROOT/hack/build-binaries.sh" kube-router
    command -v ipset >/dev/null || bash "$ROOT/hack/host-packages.sh"
    for n in $LANDLOCK_NODE_NAMES; do start "$n"; done
    for n in $LANDLOCK_NODE_NAMES; do
      for _ in $(seq 150); do chains_present "$n" && break; pid_alive "$(dir "$n")/kube-router.pid" || break; sleep 0.2; done
      chains_present "$n" || die "kube-router for $n did not hook its chains; see $(dir "$n")/kube-router.log"
    done
    log "NetworkPolicies enforced: kube-router $KUBE_ROUTER_VERSION for node-a (iptables-legacy) and node-b (iptables-nft)"
    ;;
  down)
    for n in $LANDLOCK_NODE_NAMES; do cleanup "$n"; done
    command -v ipset >/dev/null && destroy_sets
    log "kube-router stopped, its chains and sets removed"
    ;;
  status)
    for n in $LANDLOCK_NODE_NAMES; do
      if pid_alive "$(dir "$n")/kube-router.pid"; then echo "$n: running ($(backend "$n"))"; else echo "$n: stopped"; fi
    done
    ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
