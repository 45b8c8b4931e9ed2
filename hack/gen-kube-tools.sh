#!/usr/bin/env bash
# Regenerates hack/kube-tools/go.mod: the module of the local cluster's one Kubernetes binary
# (hack/kube-tools/main.go) and kubectl, requiring k8s.io/kubernetes at $K8S_VERSION with each
# of its ./staging modules replaced by the published v0.x release, then raised to the main
# module's versions where those are newer (hack/align-tools.sh: the packages both build are
# compiled once). Run only when bumping the Kubernetes version; go.mod and go.sum are
# committed.
set -euo pipefail
K8S_VERSION=${K8S_VERSION:-v1.37.2}
STAGING_VERSION=v0.${K8S_VERSION#v1.}
cd "$(dirname "$0")/kube-tools"
export GOFLAGS=-mod=mod
go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
kgomod=$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION/go.mod
{
  echo "module github.com/execplane/execplane/hack/kube-tools"
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
go get -tool "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION"
go mod tidy
../align-tools.sh .
