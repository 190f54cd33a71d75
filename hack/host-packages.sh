#!/usr/bin/env bash
# host-packages.sh: install the Debian packages the dev cluster and the image build need, when
# missing (a fresh machine has none of them). Idempotent; prints one progress line when it installs.
#
#   redis-server, prometheus          host services of the dev cluster
#   containerd, runc                  the real nodes' container runtime
#   containernetworking-plugins       bridge, host-local and loopback CNI plugins
#   iptables, iproute2                pod networking, kube-proxy
#   buildah, mmdebstrap               build Berth's image (and its Debian base) without a registry
#   openssl                           node and webhook certificates
#   ipset                             kube-router's NetworkPolicy sets (hack/netpol.sh)
#   chromium, chromium-driver         the browser tests of `kubectl berth ui` (tests/e2e/test_ui_*)
set -euo pipefail
declare -A probe=(
  [redis-server]=redis-server
  [prometheus]=prometheus
  [containerd]=containerd
  [runc]=runc
  [containernetworking-plugins]=/usr/lib/cni/bridge
  [iptables]=iptables
  [iproute2]=ip
  [buildah]=buildah
  [mmdebstrap]=mmdebstrap
  [openssl]=openssl
  [ipset]=ipset
  [chromium]=/usr/bin/chromium
  [chromium-driver]=/usr/bin/chromedriver
)
need=()
for pkg in "${!probe[@]}"; do
  [[ -e ${probe[$pkg]} ]] || command -v "${probe[$pkg]}" >/dev/null || need+=("$pkg")
done
((${#need[@]})) || exit 0
[[ $(id -u) == 0 ]] || { echo "[host-packages] missing Debian packages: ${need[*]} (run as root to install them)" >&2; exit 1; }
echo "[host-packages $(date +%H:%M:%S)] installing Debian packages: ${need[*]} (~1-2 min)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${need[@]}" >/dev/null
