#!/usr/bin/env bash
# Installs, idempotently, the Debian packages the local cluster's real node needs: runc (the
# OCI runtime), the CNI plugins (bridge, host-local, loopback), a static busybox (the example
# executor image's userland, internal/dev/devimage), nft (kube-proxy's nftables mode). Not
# iptables: the kubelet and kube-proxy run without it on their PATH, so they create no
# iptables tables here (internal/dev/devcluster/node.go).
# And tmux: the terminal test drives `execctl exec -it` in a real terminal
# (test/integration/tty_test.go).
# Only what is missing is installed; nothing is upgraded (hack/apt-install.sh).
set -euo pipefail
exec "$(dirname "$0")/apt-install.sh" install-node-packages runc containernetworking-plugins busybox-static nftables tmux
