#!/usr/bin/env bash
# Runs govulncheck (pinned in hack/tools/go.mod) over the main module against a vulnerability
# database built offline from the golang.org/x/vulndb module pinned in hack/vulndb/go.mod.
#
# Preparation may use the Go module proxy, like any build of a pinned dependency: the vulndb
# module zip (checked against hack/vulndb/go.sum), the modules of upstream's cmd/indexdb,
# govulncheck's and the main module's. The database is built once per vulndb version into
# .cache/vulndb/<version>/ (the v1 layout that `-db file://` reads: index/{db,modules,vulns}.json
# and ID/GO-*.json); a '.complete' stamp is written before the directory is moved into place,
# so an interrupted build is never used. The scan itself runs with GOPROXY=off: it reads only
# the module cache and that directory, never the network.
#
# Exit status is govulncheck's: 3 when the module calls vulnerable code (a symbol-level
# finding), 0 when it only imports or requires a vulnerable package or module without reaching
# the vulnerable symbols (reported in the summary, not a failure), anything else on an error.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
VULNDB_MODULE=golang.org/x/vulndb
GOVULNCHECK=(go tool -modfile="$ROOT/hack/tools/go.mod" govulncheck)

version=$(go -C hack/vulndb list -m -f '{{.Version}}' "$VULNDB_MODULE")
DB=$ROOT/.cache/vulndb/$version
if [ ! -f "$DB/.complete" ]; then
  start=$(date +%s)
  echo "vuln: building the vulnerability database for $VULNDB_MODULE@$version into $DB" >&2
  go -C hack/vulndb mod download "$VULNDB_MODULE"
  src=$(go -C hack/vulndb list -m -f '{{.Dir}}' "$VULNDB_MODULE")
  mkdir -p "$ROOT/.cache/vulndb"
  tmp=$(mktemp -d "$ROOT/.cache/vulndb/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  go -C hack/vulndb tool indexdb -vulns "$src/data/osv" -out "$tmp"
  echo "$VULNDB_MODULE@$version" >"$tmp/.complete"
  if [ ! -f "$DB/.complete" ]; then # else a concurrent run finished first
    rm -rf "$DB"                    # what an interrupted build left
    mv -T "$tmp" "$DB"
  fi
  echo "vuln: built $(find "$DB/ID" -name 'GO-*.json' | wc -l) entries in $(( $(date +%s) - start )) s" >&2
fi

# Everything the offline scan reads: govulncheck's build and the main module's dependencies.
"${GOVULNCHECK[@]}" -version >/dev/null
go mod download

echo "vuln: govulncheck over ./... with $VULNDB_MODULE@$version (offline)" >&2
status=0
GOPROXY=off "${GOVULNCHECK[@]}" -db "file://$DB" ./... || status=$?
if [ "$status" -eq 3 ]; then
  echo "vuln: FAILED: the module calls vulnerable code; move to a version in 'Fixed in' (a module: go get; the standard library: the Go toolchain)" >&2
fi
exit "$status"
