// Package security holds the parts of execplane's security that need no Kubernetes: client
// identity, client policy, the security manifest and its strict loader, TLS configurations,
// gRPC server credentials, and the RPC limiter. docs/security.md describes the manifest,
// the digest, the identity rules, the TLS policy and the limiter; the SecurityManager
// (reload, high-water mark) is built on LoadBundle and CheckTransition.
//
// Invariants:
//   - Identities are exact. A client's identity is the single URI SAN of its certificate,
//     read byte for byte from the certificate and refused unless canonical
//     (ParseClientIdentity); nothing is normalised, so policy matching is byte equality.
//   - Fail closed. Without a valid bundle every handshake fails and every RPC answers
//     UNAVAILABLE; no handler runs for a peer without a TLS 1.3 client certificate that
//     chains to the current CA bundle (at its handshake) and whose identity is in the
//     current policy (at every RPC). Session tickets are off: every connection does a full
//     handshake.
//   - Bounded work. Peer certificates are counted, sized and their keys checked before any
//     chain is built; every file is read within a cap, checked before decoding; every bound
//     is a named constant (limits.go) with its reason.
//   - All or nothing. LoadBundle returns a bundle only if the manifest and every file it
//     names validate together, every file matching its pin — but for a server certificate
//     the manifest makes renewable, which instead must chain to its pinned issuers and
//     carry exactly the manifest's names — and reports every problem at once. A Bundle is
//     immutable; a reload builds a new one.
//   - Never older. A generation never goes down, the same generation never changes its
//     pinned content, and a renewable server certificate is only ever replaced by a newer
//     one (a later notBefore), within a generation and across generations — or, at a
//     higher generation only, by another one issued in the same second (CheckTransition;
//     the high-water mark records it for restarted replicas). A certificate counts only once
//     valid (its notBefore passed, no allowance for skew), so the recorded notBefore is
//     never ahead of the clock of the controller that recorded it.
//   - Authenticate before reserving. The RPC limiter never reserves capacity for an
//     unauthenticated caller, never waits, and keeps per-client state only for identities
//     with calls in flight.
//   - No secrets in errors or logs. The package logs nothing; its errors name rules and
//     fields, never certificates, keys, grants or identities; a Bundle prints as its
//     generation and digest.
//   - No goroutines. Nothing here starts one; servers and their lifecycles belong to the
//     callers.
package security
