// Package protocol is the gateway ↔ helper protocol (proto/helper/v1), used by both ends:
// the framing, the session handshake, chunks and the fair frame writer (session.go,
// writer.go), the validation of requests (limits, paths, command specs), the per-operation
// response caps and the matching of a result to its operation's kind. The
// gateway validates with it before it execs into an executor, so a malformed request is
// refused with no side effect; the helper validates again with the same code, because it
// trusts nobody.
//
// Invariants:
//   - One description per file-operation kind (File): its paths, its response cap and the
//     kind of result it must get back. Everything that differs by kind reads it.
//   - Nothing here links gRPC: the helper is a small static binary (cmd/helper's tests
//     check what it links). Refusals carry a helper ErrorCode (Error); the gateway
//     translates the codes into the API's vocabulary.
//   - A frame's length is checked against its cap before any allocation; decoding is strict
//     (the fast path for chunks accepts nothing the strict decoder would refuse).
package protocol
