# Sourced by hack/build-cluster-bins.sh and hack/build-node-bins.sh: the Go and the cache
# the local cluster's binaries are built with.
#
# They are loopback-only test fixtures, not the product: they are built with the machine's
# own Go (the project's code uses the patched toolchain the Makefile names), so that a
# toolchain bump does not cost a 20-minute rebuild of the cache.
export GOTOOLCHAIN=${EXECPLANE_CLUSTER_GOTOOLCHAIN:-local}
# Run from `go test` under a switched toolchain (the Makefile's), go has put that toolchain
# first in PATH: drop it, so that "the machine's own Go" — and the cache key — is the same
# from a test as from make.
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v '/golang.org/toolchain@' | paste -sd: -)
# ... and its GOROOT, which go sets in a test's environment: the machine's go would compile
# with that toolchain's standard library and refuse the version mismatch.
unset GOROOT
K8S_VERSION=v1.37.2
CACHE=${CLUSTER_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/execplane}
