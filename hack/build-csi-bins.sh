#!/usr/bin/env bash
# Builds the upstream CSI sidecars the real node's host-path CSI driver (internal/dev/csidriver)
# runs with — csi-provisioner, csi-snapshotter, snapshot-controller — and csi-sanity, from the
# Go module proxy at the versions pinned by hack/csi-tools, copies the VolumeSnapshot CRDs
# from the pinned client module beside them, and prints the directory that holds them.
#
# The sidecars' own go.mod files carry replace directives, so `go install pkg@version`
# refuses them; built as requirements of hack/csi-tools instead, one build shares the
# Kubernetes client packages between them (their replaces do not apply: hack/csi-tools
# pins k8s.io/* to the cluster's version). Only the tests that exercise CSI snapshots need
# them; `make demo` never builds them.
#
# Keyed like hack/build-node-bins.sh: by hack/csi-tools' go.mod/go.sum, the programs and the
# Go version, in CLUSTER_BIN_CACHE (default ~/.cache/execplane), '.complete' written last.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/hack/fixture-go.sh"
PROGRAMS="github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner
github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter
github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller
github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity"
# The snapshot CRDs, the group snapshots' included: snapshot-controller waits 30 s for those
# before it starts when they are absent.
CRDS="volumesnapshotclasses volumesnapshotcontents volumesnapshots
volumegroupsnapshotclasses volumegroupsnapshotcontents volumegroupsnapshots"
key=$( (cat "$ROOT"/hack/csi-tools/go.{mod,sum}; echo "$PROGRAMS"; echo "$CRDS") | sha256sum | cut -c1-12)
BIN=$CACHE/csi-$(go env GOVERSION)-$key
if [ -f "$BIN/.complete" ]; then echo "$BIN"; exit 0; fi
# Test tiers run in parallel and may ask at once: one builds, the others wait for it.
mkdir -p "$CACHE"
exec 9>"$BIN.lock"
flock 9
if [ -f "$BIN/.complete" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$BIN/crd"
start=$(date +%s)
echo "building the CSI sidecars into $BIN (cold: ~8 min on 2 cores)" >&2
export GOFLAGS=-mod=readonly
# shellcheck disable=SC2086 # one package per line
( cd "$ROOT/hack/csi-tools" && go build -trimpath -gcflags "$GCFLAGS" -ldflags "-s -w" -o "$BIN/" $PROGRAMS )
CLIENT_DIR=$(cd "$ROOT/hack/csi-tools" && go mod download -json github.com/kubernetes-csi/external-snapshotter/client/v8 | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
for c in $CRDS; do
  group=snapshot.storage.k8s.io
  case $c in volumegroup*) group=groupsnapshot.storage.k8s.io ;; esac
  cp "$CLIENT_DIR/config/crd/${group}_$c.yaml" "$BIN/crd/"
done
chmod -R u+w "$BIN/crd"
touch "$BIN/.complete"
echo "built in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
