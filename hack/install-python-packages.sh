#!/usr/bin/env bash
# Installs, idempotently, the Debian packages of the Python SDK: its runtime (python3-grpcio,
# python3-protobuf), its tests (python3-pytest) and its code generator (protoc with the
# well-known types, and grpc_python_plugin) — the versions Debian pairs with each other.
# Only what is missing is installed; nothing is upgraded.
set -euo pipefail
packages=(python3 python3-grpcio python3-protobuf python3-pytest protobuf-compiler protobuf-compiler-grpc libprotobuf-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "install-python-packages: need root to install: ${missing[*]}" >&2
  exit 1
fi
echo "install-python-packages: installing ${missing[*]}" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
