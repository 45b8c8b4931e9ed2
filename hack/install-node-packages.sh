#!/usr/bin/env bash
# Installs, idempotently, the Debian packages the local cluster's real node needs: runc (the
# OCI runtime), the CNI plugins (bridge, host-local, loopback), a static busybox (the example
# executor image's userland, internal/dev/devimage). Not iptables: the kubelet runs without
# it on its PATH, so it creates no firewall tables here (internal/dev/devcluster/node.go).
# And tmux: the terminal test drives `execctl exec -it` in a real terminal
# (test/integration/tty_test.go).
# Only what is missing is installed; nothing is upgraded.
set -euo pipefail
packages=(runc containernetworking-plugins busybox-static tmux)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "install-node-packages: need root to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-node-packages: installing ${missing[*]}" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
