#!/usr/bin/env bash
# Fails when `go mod tidy` would change any of the project's go.mod/go.sum files.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
status=0
for dir in . hack/tools hack/vulndb hack/kube-tools hack/csi-tools hack/containerd-tools hack/etcd-tools hack/kwok-tools hack/coredns-tools hack/cert-manager-tools; do
  if ! (cd "$ROOT/$dir" && go mod tidy -diff >/dev/null 2>&1); then
    echo "go.mod in $dir is not tidy: run (cd $dir && go mod tidy)" >&2
    (cd "$ROOT/$dir" && go mod tidy -diff | head -20) >&2 || true
    status=1
  fi
done
# The tools modules whose packages execplane's build shares (hack/align-tools.sh).
for dir in hack/kube-tools hack/etcd-tools hack/containerd-tools hack/csi-tools; do
  "$ROOT/hack/align-tools.sh" --check "$ROOT/$dir" || status=1
done
exit $status
