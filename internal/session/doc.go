// Package session is the gateway's end of a helper session (protocol version 2,
// docs/sessions.md): many framed requests over one exec stream to a helper started with
// --session.
//
// Invariants:
//   - Everything the helper sends is untrusted: every frame is bounded before allocation and
//     strictly decoded; an answer for an id not in flight, a second answer, chunks over the
//     request's cap or a frame of the wrong kind is a protocol violation that closes the
//     session. Only the requests in flight on it fail.
//   - A request is "sent" from just before its last frame is written: before that the helper
//     cannot have acted on it (it acts only on whole requests), so a failure then is
//     ErrNotSent (nothing ran); after it, ErrLost (the outcome is unknown).
//   - At most MaxInFlight requests are in flight; a request whose caller gave up keeps its
//     slot until answered, and a session that leaves one unanswered past the grace, or falls
//     silent (no heartbeat), is closed.
//   - Closing ends the helper's stdin: the helper then kills everything it started.
//   - The package authorises nothing: the gateway has admitted every request before Do.
package session
