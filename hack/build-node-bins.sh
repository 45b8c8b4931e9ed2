#!/usr/bin/env bash
# Builds the local cluster's real-node binaries — containerd, containerd-shim-runc-v2 and ctr
# (hack/containerd-tools), the kubelet and kube-proxy (hack/kubelet-tools, the control plane's
# pins plus the node's programs) — and prints the directory that holds them. runc, the CNI
# plugins and nft come from Debian (hack/install-node-packages.sh).
#
# Keyed like hack/build-cluster-bins.sh: by the two tools modules' go.mod/go.sum and the Go
# version, in CLUSTER_BIN_CACHE (default ~/.cache/execplane), with a '.complete' stamp written
# last. Loopback test fixtures, built with the machine's own Go (EXECPLANE_CLUSTER_GOTOOLCHAIN).
# Measured here (2 cores, GOCACHE warm from the control plane's build): containerd's three
# binaries 67 s, the kubelet 34 s, kube-proxy 18 s more.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/hack/fixture-go.sh"
CONTAINERD_VERSION=$(cd "$ROOT/hack/containerd-tools" && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
# The programs built are part of the key: a directory built for another list is another one.
PROGRAMS="containerd containerd-shim-runc-v2 ctr kubelet kube-proxy"
key=$( (cat "$ROOT"/hack/{containerd,kubelet}-tools/go.{mod,sum}; echo "$PROGRAMS") | sha256sum | cut -c1-12)
BIN=$CACHE/node-$K8S_VERSION-containerd-$CONTAINERD_VERSION-$(go env GOVERSION)-$key
if [ -f "$BIN/.complete" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$BIN"
start=$(date +%s)
echo "building the real node's binaries into $BIN" >&2
export GOFLAGS=-mod=readonly
# Pure Go (no cgroup or snapshotter C libraries): the snapshotters that need cgo are left out.
( cd "$ROOT/hack/containerd-tools" && CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" -o "$BIN/" \
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr )
LD="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"
( cd "$ROOT/hack/kubelet-tools" && go build -trimpath -ldflags "$LD" -o "$BIN/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy )
touch "$BIN/.complete"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
