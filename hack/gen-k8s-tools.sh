#!/usr/bin/env bash
# Regenerates hack/k8s-tools/go.mod: a tools module that requires k8s.io/kubernetes at
# $K8S_VERSION and replaces each of its ./staging modules with the published v0.x release.
# Run only when bumping the Kubernetes version; the result (go.mod + go.sum) is committed.
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=v0.${K8S_VERSION#v1.}
cd "$(dirname "$0")/k8s-tools"
export GOFLAGS=-mod=mod
go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
kgomod=$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION/go.mod
{
  echo "module github.com/execplane/execplane/hack/k8s-tools"
  echo
  echo "go 1.26.0"
  echo
  echo "godebug default=go1.26"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  echo "replace ("
  grep '=> ./staging' "$kgomod" | awk '{print $1}' \
    | grep -v -e sample-cli-plugin -e sample-controller \
    | while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$STAGING_VERSION"; done
  echo ")"
} > go.mod
rm -f go.sum
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
  "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" \
  "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION" \
  "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION"
go mod tidy

# hack/kubelet-tools: the same pins plus the kubelet, for the real node. A module of its own
# so that the control plane's binaries (keyed by hack/k8s-tools) are not rebuilt when the
# node's change.
mkdir -p ../kubelet-tools
sed 's#^module .*#module github.com/execplane/execplane/hack/kubelet-tools#' go.mod > ../kubelet-tools/go.mod
cp go.sum ../kubelet-tools/go.sum
cd ../kubelet-tools
go get -tool "k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION"
go mod tidy
