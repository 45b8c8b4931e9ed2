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
. "$ROOT/hack/fixture-go.sh"
key=$(cat "$ROOT"/hack/{k8s,etcd,kwok}-tools/go.{mod,sum} | sha256sum | cut -c1-12)
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
