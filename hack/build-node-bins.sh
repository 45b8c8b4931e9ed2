#!/usr/bin/env bash
# Builds the local cluster's real-node binaries — containerd, containerd-shim-runc-v2 and ctr
# (hack/containerd-tools) — beside the kubelet and kube-proxy, hard links of the cluster's
# one Kubernetes binary (hack/build-cluster-bins.sh core), and prints the directory that holds
# them. runc, the CNI plugins and nft come from Debian (hack/install-node-packages.sh). The
# node's programs have a directory of their own: its stop finds them by their paths.
#
# Keyed like hack/build-cluster-bins.sh: by containerd-tools' and kube-tools' files and the Go
# version, in CLUSTER_BIN_CACHE (default ~/.cache/execplane), with a '.complete' stamp
# written last, builders taking turns (flock).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/hack/fixture-go.sh"
CONTAINERD_VERSION=$(cd "$ROOT/hack/containerd-tools" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
# The programs built are part of the key: a directory built for another list is another one.
PROGRAMS="containerd containerd-shim-runc-v2 ctr kubelet kube-proxy"
# containerd's plugins left out: the snapshotters that need C libraries, the tracing exporters.
TAGS="no_btrfs no_devmapper no_zfs no_tracing"
key=$( (cat "$ROOT"/hack/containerd-tools/go.{mod,sum} "$ROOT"/hack/kube-tools/{go.mod,go.sum,main.go}; echo "$PROGRAMS"; echo "$TAGS") | sha256sum | cut -c1-12)
BIN=$CACHE/node-$K8S_VERSION-containerd-$CONTAINERD_VERSION-$(go env GOVERSION)-$key
if [ -f "$BIN/.complete" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$BIN"
exec 9>"$BIN.lock"
flock 9
if [ -f "$BIN/.complete" ]; then echo "$BIN"; exit 0; fi
CLUSTER=$("$ROOT/hack/build-cluster-bins.sh" core)
start=$(date +%s)
echo "building the real node's binaries into $BIN" >&2
export GOFLAGS=-mod=readonly
V=()
[ "${EXECPLANE_BUILD_VERBOSE:-}" != 1 ] || V=(-v)
# Built as the cluster's Kubernetes and execplane's binaries are (cgo as the toolchain defaults,
# the module's requirements raised to the main module's: hack/align-tools.sh), so that the
# packages they share — gRPC, protobuf, client-go, golang.org/x — are compiled once.
( cd "$ROOT/hack/containerd-tools" && go build "${V[@]}" -trimpath -gcflags "$GCFLAGS" -tags "$TAGS" \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" -o "$BIN/" \
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr )
for n in kubelet kube-proxy; do ln -f "$CLUSTER/kube" "$BIN/$n" 2>/dev/null || cp "$CLUSTER/kube" "$BIN/$n"; done
touch "$BIN/.complete"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
