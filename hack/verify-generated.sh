#!/usr/bin/env bash
# Regenerates everything generated into a scratch directory and fails when it differs from
# what is committed, so a change to a .proto or an API type (or a generator bump) cannot
# land without its generated code.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
go tool -modfile=hack/tools/go.mod buf generate --output "$scratch"
OUT=$scratch hack/update-codegen.sh >/dev/null
OUT=$scratch hack/gen-python.sh >/dev/null
(cd sdk/typescript && node_modules/.bin/buf generate ../.. --template buf.gen.yaml --path ../../proto/execution --output "$scratch/sdk/typescript")
status=0
# Every generated file must match the committed one...
while IFS= read -r -d '' f; do
  rel=${f#"$scratch"/}
  if ! cmp -s "$f" "$rel"; then
    echo "stale generated file: $rel (run 'make generate')" >&2
    diff -u "$rel" "$f" 2>/dev/null | head -20 >&2 || true
    status=1
  fi
done < <(find "$scratch" -type f -print0)
# ...and every committed generated file must still be generated.
while IFS= read -r f; do
  [ -f "$scratch/$f" ] || { echo "orphaned generated file: $f" >&2; status=1; }
done < <(find proto -name '*.pb.go' -o -name '*.connect.go'; find pkg/generated -type f 2>/dev/null; ls pkg/apis/*/*/zz_generated.*.go deploy/helm/execplane/files/crds/*.yaml 2>/dev/null
  find sdk/python/execplane/_proto -type f -not -path '*/__pycache__/*' 2>/dev/null; find sdk/typescript/src/gen -type f 2>/dev/null)
exit $status
