// Package gateway is the public execution.v1 API server: it authenticates every RPC,
// applies client policy and limits, issues and verifies grants, forwards control operations
// to the controller leader and serves file and command operations itself through pods/exec
// (over helper sessions, one exec stream per executor Pod, or one exec per operation).
//
// Invariants:
//   - No handler runs without the edge interceptor's admission: an authenticated identity in
//     the current policy, within its limits. The Handler refuses a context without a client.
//   - Every outcome is translated once, by pkg/apierror, in the edge interceptor.
//   - Grants are verified against the informer view of the environment, never trusted for
//     what they claim; a view older than a grant is waited for (bounded), never guessed.
//   - "Not yours" and "absent" answer identically.
//   - The data path writes nothing to the API server; everything the executor answers is
//     size-capped and strictly decoded, and its text is sanitised before it reaches a caller.
//   - A helper session (podexec.Pool) is bound to the executor Pod and the epoch and grant
//     generation it was opened under, and closes when the view shows any of them move; it
//     carries only requests the handler admitted.
//   - Tokens, keys and file contents are never logged.
//
// docs/gateway.md explains the choices.
package gateway
