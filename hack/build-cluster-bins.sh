#!/usr/bin/env bash
# Builds the local cluster's binaries from the Go module proxy at the versions pinned by the
# committed tools modules under hack/, and prints the directory that holds them.
#
#   hack/build-cluster-bins.sh [PART ...]     (no PART: all of them)
#
# PARTs, each built once and stamped '.complete-PART' when whole:
#   core     etcd (hack/etcd-tools) and Kubernetes in one binary, kube (hack/kube-tools:
#            kube-apiserver, kube-controller-manager, kube-scheduler, the kubelet and
#            kube-proxy, hard links of kube named so) — what make demo runs
#   kubectl  kubectl (hack/kube-tools), for people and make deploy
#   kwok     KWOK and the stage definitions the fake nodes use (hack/kwok-tools)
#
# The directory is keyed by a hash of the tools modules and the Go version, so a version bump
# rebuilds and anything else reuses the cache. It lives outside the work tree by default
# (CLUSTER_BIN_CACHE, default ~/.cache/execplane) so that fresh clones on the same machine (CI)
# share it. Builders of the same directory take turns (flock): test tiers run in parallel.
# EXECPLANE_BUILD_VERBOSE=1 lists each package as it is compiled (hack/build-demo.sh counts
# them).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/hack/fixture-go.sh"
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(core kubectl kwok)
key=$(cat "$ROOT"/hack/{kube,etcd,kwok}-tools/go.{mod,sum} "$ROOT"/hack/kube-tools/main.go | sha256sum | cut -c1-12)
BIN=$CACHE/cluster-$K8S_VERSION-$(go env GOVERSION)-$key
whole() {
  local p
  for p in "${parts[@]}"; do [ -f "$BIN/.complete-$p" ] || return 1; done
}
if whole; then echo "$BIN"; exit 0; fi
mkdir -p "$BIN"
exec 9>"$BIN.lock"
flock 9
export GOFLAGS=-mod=readonly
V=()
[ "${EXECPLANE_BUILD_VERBOSE:-}" != 1 ] || V=(-v)
LD="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"
# The programs kube is run as (hack/kube-tools/main.go).
KUBE_NAMES="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy"

build_core() {
  echo "  etcd" >&2
  ( cd "$ROOT/hack/etcd-tools" && go build "${V[@]}" -trimpath -gcflags "$GCFLAGS" -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3 )
  echo "  kube ($KUBE_NAMES)" >&2
  ( cd "$ROOT/hack/kube-tools" && go build "${V[@]}" -trimpath -gcflags "$GCFLAGS" -ldflags "$LD" -o "$BIN/kube" . )
  local n
  for n in $KUBE_NAMES; do ln -f "$BIN/kube" "$BIN/$n"; done
}

build_kubectl() {
  echo "  kubectl" >&2
  ( cd "$ROOT/hack/kube-tools" && go build "${V[@]}" -trimpath -gcflags "$GCFLAGS" -ldflags "$LD" -o "$BIN/kubectl" k8s.io/kubernetes/cmd/kubectl )
}

build_kwok() {
  echo "  kwok" >&2
  ( cd "$ROOT/hack/kwok-tools" && go build "${V[@]}" -trimpath -gcflags "$GCFLAGS" -ldflags "-s -w" -o "$BIN/kwok" sigs.k8s.io/kwok/cmd/kwok )
  # kwok's stage definitions ship inside its module; copy the ones the cluster uses.
  local dir s
  dir=$(cd "$ROOT/hack/kwok-tools" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  mkdir -p "$BIN/kwok-stages"
  for s in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
           pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    cp "$dir/kustomize/stage/$s.yaml" "$BIN/kwok-stages/$(basename "$s").yaml"
  done
  for s in pvc-provision pv-bind pvc-delete pv-delete; do
    cp "$dir/kustomize/stage/volume/fast/$s.yaml" "$BIN/kwok-stages/$s.yaml"
  done
  chmod -R u+w "$BIN/kwok-stages"
}

for p in "${parts[@]}"; do
  case $p in
    core|kubectl|kwok) ;;
    *) echo "build-cluster-bins.sh: no part $p (core, kubectl, kwok)" >&2; exit 2 ;;
  esac
  [ ! -f "$BIN/.complete-$p" ] || continue
  start=$(date +%s)
  echo "building the local cluster's $p into $BIN" >&2
  "build_$p"
  touch "$BIN/.complete-$p"
  echo "built $p in $(( $(date +%s) - start )) s" >&2
done
echo "$BIN"
