#!/usr/bin/env bash
# Generates everything derived from pkg/apis: deepcopy functions and the CRD (controller-gen),
# and the typed clientset, listers and informers (k8s.io/code-generator). The generators are
# pinned by hack/tools/go.mod. OUT (default: the repository) lets verify generate elsewhere.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT}
cd "$ROOT"
TOOLS="go tool -modfile=$ROOT/hack/tools/go.mod"
MOD=github.com/execplane/execplane
API=$MOD/pkg/apis/execution/v1alpha1
HEADER=$ROOT/hack/boilerplate.go.txt

mkdir -p "$OUT/pkg/apis/execution/v1alpha1" "$OUT/deploy/helm/execplane/files/crds"
$TOOLS controller-gen object:headerFile="$HEADER" paths=./pkg/apis/... output:object:dir="$OUT/pkg/apis/execution/v1alpha1"
$TOOLS controller-gen crd:crdVersions=v1 paths=./pkg/apis/... output:crd:dir="$OUT/deploy/helm/execplane/files/crds"

rm -rf "$OUT/pkg/generated"
$TOOLS client-gen --go-header-file "$HEADER" --clientset-name versioned --input-base "" --input "$API" \
  --output-pkg "$MOD/pkg/generated/clientset" --output-dir "$OUT/pkg/generated/clientset"
$TOOLS lister-gen --go-header-file "$HEADER" --output-pkg "$MOD/pkg/generated/listers" \
  --output-dir "$OUT/pkg/generated/listers" "$API"
$TOOLS informer-gen --go-header-file "$HEADER" --versioned-clientset-package "$MOD/pkg/generated/clientset/versioned" \
  --listers-package "$MOD/pkg/generated/listers" --output-pkg "$MOD/pkg/generated/informers" \
  --output-dir "$OUT/pkg/generated/informers" "$API"
