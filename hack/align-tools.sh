#!/usr/bin/env bash
# Raises the requirements of a tools module under hack/ to the main module's versions where the
# main module's are newer, then tidies it:
#
#   hack/align-tools.sh hack/kube-tools
#   hack/align-tools.sh --check hack/kube-tools    (exit 1, naming them, when any would rise)
#
# A package built for both at the same version (with the same Go and flags) is compiled once:
# the local cluster's Kubernetes, etcd and containerd share client-go, k8s.io/api, gRPC,
# protobuf and golang.org/x with execplane's own binaries, much of a cold first run (docs/
# quickstart.md); make test's CSI sidecars share them too. Run it after bumping the main module's requirements or a tool's version;
# hack/verify-tidy.sh fails while the two disagree. Never lowers a version.
set -euo pipefail
# sort and join must agree on the order: bytes, not the locale's collation.
export LC_ALL=C
ROOT=$(cd "$(dirname "$0")/.." && pwd)
check=
if [ "${1:-}" = --check ]; then check=1; shift; fi
dir=$(cd "$1" && pwd)
# The modules of the packages each builds (not the whole module graphs: tidy prunes what no
# package needs).
case $(basename "$dir") in
  kube-tools) pkgs=(. k8s.io/kubernetes/cmd/kubectl) ;;
  etcd-tools) pkgs=(go.etcd.io/etcd/server/v3) ;;
  csi-tools) pkgs=(github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity) ;;
  containerd-tools) pkgs=(github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr) ;;
  *) echo "align-tools.sh: which packages does $dir build?" >&2; exit 2 ;;
esac
modules() { go list -deps -f '{{with .Module}}{{if not .Replace}}{{.Path}} {{.Version}}{{end}}{{end}}' "$@" | sort -u; }
main=$(cd "$ROOT" && modules ./cmd/...)
tool=$(cd "$dir" && modules "${pkgs[@]}")
args=()
while read -r path mine theirs; do
  [ "$mine" != "$theirs" ] || continue
  # The higher of the two: semver order as sort -V sees it, but a release above its own
  # pre-releases (v1.2.3 > v1.2.3-0.2026…).
  case $theirs in "$mine"-*) args+=("$path@$mine"); continue ;; esac
  case $mine in "$theirs"-*) continue ;; esac
  if [ "$(printf '%s\n%s\n' "$mine" "$theirs" | sort -V | tail -1)" = "$mine" ]; then
    args+=("$path@$mine")
  fi
done < <(join <(printf '%s\n' "$main") <(printf '%s\n' "$tool"))
if [ -n "$check" ]; then
  if [ ${#args[@]} -gt 0 ]; then
    echo "$1 lags the main module: ${args[*]} (run hack/align-tools.sh $1)" >&2
    exit 1
  fi
  exit 0
fi
if [ ${#args[@]} -gt 0 ]; then
  ( cd "$dir" && GOFLAGS=-mod=mod go get "${args[@]}" && GOFLAGS=-mod=mod go mod tidy )
fi
