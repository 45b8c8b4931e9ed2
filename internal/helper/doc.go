// Package helper is the static binary baked into executor images, started through pods/exec
// with a fixed argv: one process per request, reading one framed request from stdin
// (proto/helper/v1) and writing heartbeats and one framed response to stdout; or, with
// --session, one process per session serving many framed requests (session.go,
// docs/sessions.md). It never listens on a socket and holds no credentials.
//
// Invariants:
//   - Without --session exactly one request is served per process; in a session every
//     command still runs in a child helper serving that one request (child.go), so the
//     per-request process guarantees hold for it. Every outcome, refusals included, is a
//     typed response frame (never prose on stderr to be parsed).
//   - The workspace root comes from the invocation (--root or $EXECPLANE_WORKSPACE_ROOT,
//     default /workspace); an empty, relative or "/" root is refused.
//   - Limits come from the request (the profile's bounds, passed by the gateway) and are
//     refused, never silently lowered, when above the helper's own ceilings.
//   - File operations are confined by the kernel (fileops); commands are bounded and leave no
//     process behind (process). EOF on stdin while a command runs cancels it; EOF on a
//     session's stdin kills everything the session started.
//   - The binary links no network stack (no gRPC, no net/http): start-up is cheap and there
//     is nothing to listen with.
package helper
