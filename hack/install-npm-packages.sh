#!/usr/bin/env bash
# Installs, idempotently, the npm packages of the project's JavaScript/TypeScript parts from
# their committed lockfiles (npm ci: exact versions, integrity-checked), and node itself
# from Debian when the machine has none. A directory whose installed tree already matches
# its lockfile (a stamp of the lockfile's digest in node_modules) is left alone, so a warm
# run costs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
dirs=(test/mcp test/e2b sdk/typescript)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  hack/apt-install.sh install-npm-packages nodejs npm
fi
for d in "${dirs[@]}"; do
  want=$(sha256sum "$d/package-lock.json" | cut -d' ' -f1)
  stamp="$d/node_modules/.execplane-lock-sha256"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    continue
  fi
  echo "install-npm-packages: npm ci in $d" >&2
  (cd "$d" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$want" >"$stamp"
done
