# Sourced by the hack/build-*-bins.sh scripts: the Go and the cache the local cluster's binaries
# are built with.
#
# The project's own toolchain (the Makefile's GOTOOLCHAIN): with it, and with the tools
# modules' requirements raised to the main module's (hack/align-tools.sh), the packages the
# cluster's Kubernetes and etcd share with execplane's binaries — client-go, k8s.io/api, gRPC,
# protobuf, golang.org/x, the standard library — are compiled once, not twice (minutes of a
# cold first run; docs/quickstart.md). A toolchain bump rebuilds the cache (its key holds the
# Go version). EXECPLANE_CLUSTER_GOTOOLCHAIN overrides it.
_fixture_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export GOTOOLCHAIN=${EXECPLANE_CLUSTER_GOTOOLCHAIN:-$(sed -n 's/^export GOTOOLCHAIN := *//p' "$_fixture_root/Makefile")}
# Run from `go test` under a switched toolchain, go has put that toolchain first in PATH and
# set GOROOT to it: drop both, so that the go found is the machine's, which switches to
# GOTOOLCHAIN itself — the same Go, and cache key, from a test as from make.
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v '/golang.org/toolchain@' | paste -sd: -)
unset GOROOT
# No DWARF from the compiler, as the Makefile's builds (GCFLAGS): the binaries are linked with
# -w, which drops it, and compiling without it is ~7 % faster.
GCFLAGS=all=-dwarf=false
K8S_VERSION=v1.37.2
CACHE=${CLUSTER_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/execplane}
