#!/usr/bin/env bash
# Installs, idempotently, the Debian packages of the Python SDK: its runtime (python3-grpcio,
# python3-protobuf), its tests (python3-pytest) and its code generator (protoc with the
# well-known types, and grpc_python_plugin) — the versions Debian pairs with each other.
# Only what is missing is installed; nothing is upgraded (hack/apt-install.sh).
set -euo pipefail
exec "$(dirname "$0")/apt-install.sh" install-python-packages python3 python3-grpcio python3-protobuf python3-pytest \
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
