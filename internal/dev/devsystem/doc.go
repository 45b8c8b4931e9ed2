// Package devsystem runs execplane's own processes — a controller and gateways — against a
// local cluster, as they are deployed: real binaries with flags, a generated development
// security bundle, a profiles file and the high-water ConfigMap. The end-to-end tests, the
// gateway benchmarks and `make demo` start systems through it.
//
// Invariants:
//   - Start returns only once every process reports ready on /readyz, or stops what it
//     started and returns the error.
//   - Stop sends SIGTERM, waits for the drain, then kills; it is safe to call more than once.
//   - The bundle's private keys stay in the system's directory (mode 0600), never in logs.
package devsystem
