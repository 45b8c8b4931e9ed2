// Package helper is the static binary baked into executor images: one process per request,
// started through pods/exec with a fixed argv, reading one framed request from stdin
// (proto/helper/v1) and writing heartbeats and one framed response to stdout. It never
// listens on a socket and holds no credentials.
//
// Invariants:
//   - Exactly one request is served per process; every outcome, refusals included, is a
//     typed response frame (never prose on stderr to be parsed).
//   - The workspace root comes from the invocation (--root or $EXECPLANE_WORKSPACE_ROOT,
//     default /workspace); an empty, relative or "/" root is refused.
//   - Limits come from the request (the profile's bounds, passed by the gateway) and are
//     refused, never silently lowered, when above the helper's own ceilings.
//   - File operations are confined by the kernel (fileops); commands are bounded and leave no
//     process behind (process). EOF on stdin while a command runs cancels it.
//   - The binary links no network stack (no gRPC, no net/http): start-up is cheap and there
//     is nothing to listen with.
package helper
