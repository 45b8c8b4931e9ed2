#!/usr/bin/env bash
# Builds the local cluster's binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok) from the Go module proxy at the versions pinned by the
# committed tools modules under hack/, and prints the directory that holds them.
#
# The directory is keyed by a hash of the three tools modules' go.mod/go.sum and the Go
# version, so a version bump rebuilds and anything else reuses the cache. It lives outside
# the work tree by default (CLUSTER_BIN_CACHE, default ~/.cache/execplane) so that fresh
# clones on the same machine (CI) share it. A '.complete' stamp is written last: an
# interrupted build is never mistaken for a finished one.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# The cluster's binaries are loopback-only test fixtures, not the product: they are built
# with the machine's own Go (the project's code uses the patched toolchain the Makefile
# names), so that a toolchain bump does not cost a 20-minute rebuild of the cache.
export GOTOOLCHAIN=${EXECPLANE_CLUSTER_GOTOOLCHAIN:-local}
# Run from `go test` under a switched toolchain (the Makefile's), go has put that toolchain
# first in PATH: drop it, so that "the machine's own Go" — and the cache key — is the same
# from a test as from make.
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v '/golang.org/toolchain@' | paste -sd: -)
K8S_VERSION=v1.37.2
key=$(cat "$ROOT"/hack/{k8s,etcd,kwok}-tools/go.{mod,sum} | sha256sum | cut -c1-12)
CACHE=${CLUSTER_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/execplane}
BIN=$CACHE/cluster-$K8S_VERSION-$(go env GOVERSION)-$key
if [ -f "$BIN/.complete" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$BIN"
start=$(date +%s)
echo "building local cluster binaries into $BIN (cold: ~7 min on 2 cores)" >&2
export GOFLAGS=-mod=readonly
LD="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  echo "  $c" >&2
  ( cd "$ROOT/hack/k8s-tools" && go build -trimpath -ldflags "$LD" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c" )
done
echo "  etcd" >&2
( cd "$ROOT/hack/etcd-tools" && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3 )
echo "  kwok" >&2
( cd "$ROOT/hack/kwok-tools" && go build -trimpath -ldflags "-s -w" -o "$BIN/kwok" sigs.k8s.io/kwok/cmd/kwok )
# kwok's stage definitions ship inside its module; copy the ones the cluster uses.
KWOK_DIR=$(cd "$ROOT/hack/kwok-tools" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
mkdir -p "$BIN/kwok-stages"
for s in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
         pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
  cp "$KWOK_DIR/kustomize/stage/$s.yaml" "$BIN/kwok-stages/$(basename "$s").yaml"
done
for s in pvc-provision pv-bind pvc-delete pv-delete; do
  cp "$KWOK_DIR/kustomize/stage/volume/fast/$s.yaml" "$BIN/kwok-stages/$s.yaml"
done
chmod -R u+w "$BIN/kwok-stages"
echo "built in $(( $(date +%s) - start )) s" >&2
touch "$BIN/.complete"
echo "$BIN"
