#!/usr/bin/env bash
# Builds the local cluster's DNS server — CoreDNS with the plugins its Corefile uses
# (hack/coredns-tools) — and prints the directory that holds it. Only the clusters that ask
# for cluster DNS build it (the chart's tests, make deploy): not make demo.
#
# Keyed like hack/build-node-bins.sh: by the tools module's go.mod/go.sum and main.go and the
# Go version, in CLUSTER_BIN_CACHE (default ~/.cache/execplane), with a '.complete' stamp
# written last. Measured here (2 cores): 4 min cold with the module downloads.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/hack/fixture-go.sh"
COREDNS_VERSION=$(cd "$ROOT/hack/coredns-tools" && go list -m -f '{{.Version}}' github.com/coredns/coredns)
key=$(cat "$ROOT"/hack/coredns-tools/{go.mod,go.sum,main.go} | sha256sum | cut -c1-12)
BIN=$CACHE/dns-coredns-$COREDNS_VERSION-$(go env GOVERSION)-$key
if [ -f "$BIN/.complete" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$BIN"
start=$(date +%s)
echo "building the local cluster's DNS server (CoreDNS $COREDNS_VERSION) into $BIN" >&2
# Static: it runs in an image with nothing else in it.
( cd "$ROOT/hack/coredns-tools" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -gcflags "$GCFLAGS" \
    -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" -o "$BIN/coredns" . )
touch "$BIN/.complete"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
