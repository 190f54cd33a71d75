#!/usr/bin/env bash
# nodes.sh up|down|kill NODE|start NODE|status: the dev cluster's real nodes.
#
# Each node is a kubelet with its own containerd (runc, overlayfs), its own bridge CNI network and
# its own address, all on this machine:
#
#   node      address (on lo)   pod subnet (bridge)        containerd socket
#   node-a    198.19.0.11/32    198.18.1.0/24 (berthbr-a)  $DEV/nodes/node-a/containerd.sock
#   node-b    198.19.0.12/32    198.18.2.0/24 (berthbr-b)  $DEV/nodes/node-b/containerd.sock
#   node-c    198.19.0.13/32    198.18.3.0/24 (berthbr-c)  $DEV/nodes/node-c/containerd.sock
#
# The control plane and the host services (Redis, Prometheus, scripted models) listen on
# 198.19.0.1, which pods reach through their bridge's gateway. One kube-proxy (iptables mode) makes
# Service IPs (198.19.128.0/17) work for pods and for the apiserver. These addresses come from
# 198.18.0.0/15, the range set aside for network tests: the project's own hosts, on this machine.
#
# Facts of this machine kind the set-up respects: cgroup v1 with the cgroupfs driver; no
# CAP_SYS_RESOURCE (containerd's restrict_oom_score_adj); no kernel modules to load (addresses on
# lo, no dummy links); no image registry (the sandbox image is built locally by hack/image.sh).
#
# Nodes in NO_LANDLOCK_NODES (node-c) give their pods no Landlock, as nodes with an older kernel
# or gVisor do. They register with the label berth.dev/dev-node=no-landlock (the others:
# berth.dev/dev-node=real) and the taint berth.dev/no-landlock=true:NoSchedule, so only pods that
# tolerate it land there. Their pods get no Landlock because their containerd runs runc through a wrapper (written below) that adds a seccomp rule
# answering landlock_create_ruleset/add_rule/restrict_self with ENOSYS to every container's
# profile (RuntimeDefault or none). containerd 1.6 has no setting for its default profile, and the
# pods' own RuntimeDefault would bypass a kubelet seccompDefault, so the runtime is where it goes.
#
#   up          start the nodes (idempotent) and wait until they are Ready
#   down        remove every pod, stop kubelets, containerds and kube-proxy, and remove what they
#               mounted, the bridges, node addresses and iptables rules (images stay cached;
#               hack/cluster-down.sh removes the host address after the services on it)
#   kill NODE   node loss: SIGKILL the node's kubelet, containerd and every container it ran
#   start NODE  bring a killed node back
source "$(dirname "$0")/lib.sh"
LOG_TAG=nodes
export KUBECONFIG=$DEV/kubeconfig
KUBECTL=$KUBE_BIN/kubectl
CRICTL=$CRICTL_BIN/crictl
PKI=$KWOK_WORKDIR/clusters/$CLUSTER_NAME/pki

node_index() { case $1 in node-a) echo 1 ;; node-b) echo 2 ;; node-c) echo 3 ;; *) die "unknown node $1 (nodes: $NODE_NAMES)" ;; esac; }
node_ip() { echo "198.19.0.$((10 + $(node_index "$1")))"; }
node_dir() { echo "$DEV/nodes/$1"; }
node_sock() { echo "$(node_dir "$1")/containerd.sock"; }
node_bridge() { echo "berthbr-${1#node-}"; }
NO_LANDLOCK_NODES=${BERTH_NO_LANDLOCK_NODES-$NO_LANDLOCK_NODE_NAMES}
no_landlock() { [[ " $NO_LANDLOCK_NODES " == *" $1 "* ]]; }
# This machine's first resolver (what pods used with dnsPolicy Default), else the host address.
host_resolver() { awk '/^nameserver/ {print $2; found=1; exit} END {if (!found) print "198.19.0.1"}' /etc/resolv.conf; }

# kill_tree PID...: SIGKILL processes and all their descendants.
kill_tree() {
  local pids=("$@") all=() p
  while ((${#pids[@]})); do
    all+=("${pids[@]}")
    local next=()
    for p in "${pids[@]}"; do
      mapfile -t -O "${#next[@]}" next < <(pgrep -P "$p" || true)
    done
    pids=("${next[@]}")
  done
  ((${#all[@]})) && kill -KILL "${all[@]}" 2>/dev/null || true
}

# The shims of a node's containerd (and through them its containers).
node_shims() { pgrep -f "containerd-shim-runc-v2 .*-address $(node_sock "$1")( |$)" || true; }

# write_runc_without_landlock NODE: the runc wrapper of a node without Landlock (see the header);
# prints the runtime options line of containerd.toml naming it, nothing for other nodes.
write_runc_without_landlock() {
  local n=$1 wrapper; wrapper="$(node_dir "$n")/runc-without-landlock"
  no_landlock "$n" || { rm -f "$wrapper"; return 0; }
  cat > "$wrapper.tmp" <<'SH'
#!/bin/bash
# Written by hack/nodes.sh: runc, with the landlock_* syscalls answered ENOSYS (errno 38) by every
# container's seccomp profile. Only "create" and "run" take --bundle; other commands pass through.
set -euo pipefail
bundle="" prev=""
for arg in "$@"; do
  case $prev in --bundle|-b) bundle=$arg ;; esac
  case $arg in --bundle=*) bundle=${arg#--bundle=} ;; esac
  prev=$arg
done
if [[ -n $bundle && -f $bundle/config.json ]]; then
  jq '["landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"] as $ll
      | .linux.seccomp |= (. // {defaultAction: "SCMP_ACT_ALLOW"})
      | .linux.seccomp.syscalls |= ([(. // [])[] | .names -= $ll | select(.names | length > 0)]
          + [{names: $ll, action: "SCMP_ACT_ERRNO", errnoRet: 38}])' \
    "$bundle/config.json" > "$bundle/config.json.landlock"
  mv "$bundle/config.json.landlock" "$bundle/config.json"
fi
exec runc "$@"
SH
  chmod 0755 "$wrapper.tmp"; mv "$wrapper.tmp" "$wrapper"
  echo "BinaryName = \"$wrapper\""
}

# restart_containerd_if_changed NODE OLD_SUM: a running containerd whose config changed (a node
# that lost or got Landlock) is restarted; its containers run on (their shims are their own).
restart_containerd_if_changed() {
  local n=$1 old=$2 dir; dir=$(node_dir "$n")
  [[ $old == "$(md5sum < "$dir/containerd.toml")" ]] && return 0
  pid_alive "$dir/containerd.pid" || return 0
  log "containerd config of $n changed: restarting its containerd"
  kill -TERM "$(cat "$dir/containerd.pid")" 2>/dev/null || true
  for _ in $(seq 100); do pid_alive "$dir/containerd.pid" || break; sleep 0.1; done
  rm -f "$dir/containerd.pid"
}

write_node_config() {
  local n=$1 ip dir idx pause old_sum runc_binary
  ip=$(node_ip "$n"); dir=$(node_dir "$n"); idx=$(node_index "$n")
  pause=$(bash "$ROOT/hack/image.sh" pause | tail -1)
  mkdir -p "$dir"/{containerd/root,containerd/state,containerd/opt,cni/net.d,cni/ipam,kubelet,pod-logs,pki}
  old_sum=$({ md5sum < "$dir/containerd.toml"; } 2>/dev/null || true)
  runc_binary=$(write_runc_without_landlock "$n")
  cat > "$dir/containerd.toml" <<TOML
# Written by hack/nodes.sh for $n.
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
[grpc]
  address = "$(node_sock "$n")"
[ttrpc]
  address = "$(node_sock "$n").ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  # This VM lacks CAP_SYS_RESOURCE: lowering a container's oom_score_adj would fail.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "$ip"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$dir/containerd/state/runc"
        $runc_binary
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
TOML
  cat > "$dir/cni/net.d/10-berth.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "berth-$n",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$(node_bridge "$n")",
      "isGateway": true,
      "isDefaultGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/ipam",
        "ranges": [[{"subnet": "198.18.$idx.0/24", "gateway": "198.18.$idx.1"}]]
      }
    }
  ]
}
JSON
  # The node's client certificate (CN system:node:<name>, O system:nodes), signed by the cluster CA,
  # so the apiserver's Node authorizer treats the kubelet as that node.
  if [[ ! -f $dir/pki/kubelet-client.crt ]]; then
    openssl req -new -newkey rsa:2048 -nodes -keyout "$dir/pki/kubelet-client.key" \
      -subj "/O=system:nodes/CN=system:node:$n" -out "$dir/pki/kubelet-client.csr" 2>/dev/null
    openssl x509 -req -in "$dir/pki/kubelet-client.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
      -CAcreateserial -days 365 -out "$dir/pki/kubelet-client.crt" 2>/dev/null
  fi
  local server; server=$("$KUBECTL" config view -o jsonpath='{.clusters[0].cluster.server}')
  cat > "$dir/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: dev
  cluster: {server: "$server", certificate-authority: "$PKI/ca.crt"}
users:
- name: $n
  user: {client-certificate: "$dir/pki/kubelet-client.crt", client-key: "$dir/pki/kubelet-client.key"}
contexts:
- name: $n
  context: {cluster: dev, user: $n}
current-context: $n
KC
  restart_containerd_if_changed "$n" "$old_sum"
  cat > "$dir/kubelet.yaml" <<YAML
# Written by hack/nodes.sh for $n.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "$ip"
port: 10250
readOnlyPort: 0
healthzBindAddress: "$ip"
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$PKI/ca.crt"}
authorization: {mode: Webhook}
containerRuntimeEndpoint: "unix://$(node_sock "$n")"
imageServiceEndpoint: "unix://$(node_sock "$n")"
# cgroup v1 with the cgroupfs driver; two kubelets share this machine, so neither manages QoS
# cgroups or node-allocatable enforcement.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
# Images cannot be pulled again here: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
podLogsDir: "$dir/pod-logs"
volumePluginDir: "$dir/kubelet/volume-plugins"
resolvConf: /etc/resolv.conf
# A cluster DNS address, as a real cluster's kubelets have: without one the kubelet posts two
# MissingClusterDNS Warning Events (on the pod and on the node) at every sync of a pod with the
# default dnsPolicy (ClusterFirst), hundreds of apiserver writes a minute under a bench. No
# server answers cluster names here: the address is this machine's own resolver, so names
# resolve in pods as they did with the fallback (dnsPolicy Default).
clusterDNS: ["$(host_resolver)"]
clusterDomain: cluster.local
maxPods: 110
serializeImagePulls: false
syncFrequency: 10s
nodeStatusUpdateFrequency: 4s
shutdownGracePeriod: 0s
kubeAPIQPS: 50
kubeAPIBurst: 100
YAML
}

start_containerd() {
  local n=$1 dir; dir=$(node_dir "$n")
  if pid_alive "$dir/containerd.pid" && [[ -S $(node_sock "$n") ]]; then return; fi
  setsid containerd --config "$dir/containerd.toml" >> "$dir/containerd.log" 2>&1 < /dev/null &
  echo $! > "$dir/containerd.pid"
  for _ in $(seq 100); do
    ctr -a "$(node_sock "$n")" version >/dev/null 2>&1 && return
    pid_alive "$dir/containerd.pid" || break
    sleep 0.1
  done
  die "containerd of $n did not start; see $dir/containerd.log"
}

start_kubelet() {
  local n=$1 dir kind=(--node-labels berth.dev/dev-node=real); dir=$(node_dir "$n")
  pid_alive "$dir/kubelet.pid" && return
  no_landlock "$n" && kind=(--node-labels berth.dev/dev-node=no-landlock
    --register-with-taints berth.dev/no-landlock=true:NoSchedule)
  setsid "$KUBE_BIN/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubeconfig" \
    --root-dir "$dir/kubelet" --cert-dir "$dir/pki" --hostname-override "$n" \
    --node-ip "$(node_ip "$n")" "${kind[@]}" \
    >> "$dir/kubelet.log" 2>&1 < /dev/null &
  echo $! > "$dir/kubelet.pid"
}

start_kube_proxy() {
  local dir=$DEV/nodes
  pid_alive "$dir/kube-proxy.pid" && return
  cat > "$dir/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$KUBECONFIG"}
hostnameOverride: node-a
bindAddress: 198.19.0.1
healthzBindAddress: 198.19.0.1:10256
metricsBindAddress: 198.19.0.1:10249
mode: iptables
clusterCIDR: 198.18.0.0/16
nodePortAddresses: [198.19.0.0/24]
# Leave the machine's conntrack limits alone.
conntrack: {maxPerCore: 0, min: 0}
YAML
  setsid "$KUBE_BIN/kube-proxy" --config "$dir/kube-proxy.yaml" >> "$dir/kube-proxy.log" 2>&1 < /dev/null &
  echo $! > "$dir/kube-proxy.pid"
}

node_ready() {
  [[ $("$KUBECTL" get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

up() {
  [[ -f $PKI/ca.key ]] || die "no cluster CA under $PKI: start the control plane first (hack/cluster-up.sh)"
  mkdir -p "$DEV/nodes"
  ensure_address 198.19.0.1
  # Pods route through their node's bridge; Service traffic between pods of one bridge must pass
  # iptables so kube-proxy's DNAT is undone on the way back.
  sysctl -qw net.ipv4.ip_forward=1
  [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] && sysctl -qw net.bridge.bridge-nf-call-iptables=1
  # Pods may reach beyond this machine (a real LLM endpoint) through the host's address.
  iptables -t nat -C POSTROUTING -s 198.18.0.0/16 ! -d 198.18.0.0/15 -j MASQUERADE -m comment --comment berth-dev 2>/dev/null \
    || iptables -t nat -A POSTROUTING -s 198.18.0.0/16 ! -d 198.18.0.0/15 -j MASQUERADE -m comment --comment berth-dev
  local n
  for n in $NODE_NAMES; do
    ensure_address "$(node_ip "$n")"
    write_node_config "$n"
    start_containerd "$n"
    start_kubelet "$n"
  done
  start_kube_proxy
  for n in $NODE_NAMES; do
    for _ in $(seq 240); do
      node_ready "$n" && break
      pid_alive "$(node_dir "$n")/kubelet.pid" || die "kubelet of $n exited; see $(node_dir "$n")/kubelet.log"
      sleep 0.5
    done
    node_ready "$n" || die "node $n not Ready after 120s; see $(node_dir "$n")/kubelet.log"
  done
  log "nodes Ready: $NODE_NAMES (containerd $(containerd --version | awk '{print $3}'), runc, bridge CNI; no Landlock on: ${NO_LANDLOCK_NODES:-none})"
}

# Remove a node's pods through the CRI (so CNI releases their addresses), then stop everything.
stop_node() {
  local n=$1 dir; dir=$(node_dir "$n")
  stop_pidfile "$dir/kubelet.pid" 5
  if pid_alive "$dir/containerd.pid" && [[ -x $CRICTL ]]; then
    timeout 60 "$CRICTL" -r "unix://$(node_sock "$n")" rmp -af >/dev/null 2>&1 || true
  fi
  kill_node "$n"
}

kill_node() {
  local n=$1 dir pids; dir=$(node_dir "$n")
  for f in kubelet containerd; do
    if pid_alive "$dir/$f.pid"; then kill -KILL "$(cat "$dir/$f.pid")" 2>/dev/null || true; fi
    rm -f "$dir/$f.pid"
  done
  mapfile -t pids < <(node_shims "$n")
  ((${#pids[@]})) && kill_tree "${pids[@]}"
  rm -f "$(node_sock "$n")" "$(node_sock "$n").ttrpc"
}

unmount_under() { # unmount every mount point below $1, deepest first
  local m
  { findmnt -rn -o TARGET | grep -F "$1/" || true; } | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
}

down() {
  local n
  for n in $NODE_NAMES; do
    [[ -d $(node_dir "$n") ]] || continue
    stop_node "$n"
  done
  if [[ -f $DEV/nodes/kube-proxy.pid ]]; then
    stop_pidfile "$DEV/nodes/kube-proxy.pid" 5
    "$KUBE_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  fi
  unmount_under "$DEV/nodes"
  # Network namespaces of pods whose sandbox could not be removed through the CRI.
  for ns in /var/run/netns/cni-*; do
    [[ -e $ns ]] || continue
    if [[ -z $(ip netns pids "$(basename "$ns")" 2>/dev/null) ]]; then
      umount "$ns" 2>/dev/null || true; rm -f "$ns"
    fi
  done
  for n in $NODE_NAMES; do
    ip link show "$(node_bridge "$n")" >/dev/null 2>&1 && ip link del "$(node_bridge "$n")"
    ip addr del "$(node_ip "$n")/32" dev lo 2>/dev/null || true
    # Everything but the cached images.
    local dir; dir=$(node_dir "$n")
    [[ -d $dir ]] && find "$dir" -mindepth 1 -maxdepth 1 ! -name containerd -exec rm -rf --one-file-system {} + 2>/dev/null
    [[ -d $dir/containerd ]] && rm -rf "$dir/containerd/state" "$dir/containerd/opt"
  done
  while iptables -t nat -D POSTROUTING -s 198.18.0.0/16 ! -d 198.18.0.0/15 -j MASQUERADE -m comment --comment berth-dev 2>/dev/null; do :; done
  rm -f "$DEV/nodes/kube-proxy.yaml" "$DEV/nodes/kube-proxy.log"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  kill) node_index "${2:?node}" >/dev/null; kill_node "$2"; log "node $2 lost (kubelet, containerd and its containers killed)" ;;
  start) node_index "${2:?node}" >/dev/null; start_containerd "$2"; start_kubelet "$2"; log "node $2 started" ;;
  status)
    for n in $NODE_NAMES; do
      printf '%s kubelet=%s containerd=%s ready=%s\n' "$n" \
        "$(pid_alive "$(node_dir "$n")/kubelet.pid" && echo up || echo down)" \
        "$(pid_alive "$(node_dir "$n")/containerd.pid" && echo up || echo down)" \
        "$(node_ready "$n" && echo yes || echo no)"
    done ;;
  *) echo "usage: $0 up|down|kill NODE|start NODE|status" >&2; exit 2 ;;
esac
