// Package startup is what the gateway and the controller do alike from their flags to their
// stop: the flags both take (Config), the process they open (logger, Kubernetes clients,
// profiles, security material, metrics, the mTLS listener: Open) and the way they serve and
// stop (diagnostics, the security manager and one gRPC server, drained within a grace:
// Process.Serve). Each server's package keeps only what is its own.
//
// Invariants:
//   - A configuration is validated whole before anything is opened; every problem is
//     reported at once (cli.Problems).
//   - The listener bounds every TLS handshake (security.HandshakeDeadlineListener) before a
//     byte of it is read.
//   - The first part to fail stops the others; the stop drains in-flight calls for at most
//     the server's grace, then cuts what is left, and the servers outlive the server's own
//     work (the controller's election), so that on shutdown what it holds is given back
//     before the probes and the API go away.
package startup
