#!/usr/bin/env bash
# Builds cert-manager's controller (hack/cert-manager-tools: the pinned module, the
# controllers docs/deployment.md's recipe uses) and copies cert-manager's CRDs beside it, and
# prints the directory that holds them. Only test/deploy uses it (a real renewal of the
# release's certificates): not make demo, not make deploy.
#
# Keyed like hack/build-dns-bins.sh: by the tools module's go.mod/go.sum and main.go and the
# Go version, in CLUSTER_BIN_CACHE (default ~/.cache/execplane), with a '.complete' stamp
# written last. Measured here (2 cores): about 5 min cold with the module downloads.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/hack/fixture-go.sh"
cd "$ROOT/hack/cert-manager-tools"
VERSION=$(go list -m -f '{{.Version}}' github.com/cert-manager/cert-manager)
key=$(cat go.mod go.sum main.go | sha256sum | cut -c1-12)
BIN=$CACHE/cert-manager-$VERSION-$(go env GOVERSION)-$key
if [ -f "$BIN/.complete" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$BIN/crds"
start=$(date +%s)
echo "building cert-manager's controller ($VERSION) into $BIN" >&2
CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -gcflags "$GCFLAGS" -ldflags "-s -w" -o "$BIN/cert-manager-controller" .
# The CRDs the controllers watch, from the module (the Helm chart's source of them).
DIR=$(GOFLAGS=-mod=readonly go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
for crd in certificates certificaterequests issuers clusterissuers; do
  cp "$DIR/deploy/crds/cert-manager.io_$crd.yaml" "$BIN/crds/"
done
for crd in orders challenges; do
  cp "$DIR/deploy/crds/acme.cert-manager.io_$crd.yaml" "$BIN/crds/"
done
chmod -R u+w "$BIN/crds"
touch "$BIN/.complete"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
