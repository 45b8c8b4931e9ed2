// Package podexec is the gateway's reach into executor Pods: the helper run through
// pods/exec, one exec per operation (Exec) or many requests over one session per Pod (Pool),
// a terminal on an exec of its own (Terminal), and the translation of what the helper
// answers into the API's error vocabulary (HelperError, Refused).
//
// It authorises nothing: every call it carries was admitted by the gateway's handlers,
// which hand it a Target — the Pod and the view of the environment the call was admitted
// under. It imports nothing of the handlers' package.
//
// Invariants:
//   - A call goes only to the Pod its Target names: the Pod's UID is checked before an
//     exec, so a Pod re-created under the same name never receives a predecessor's request.
//   - A session is bound to the environment, Pod UID, epoch and grant generation it was
//     opened under, and closes when the view shows any of them move; a call admitted under
//     an older view than its session's is refused, never carried.
//   - Everything the executor sends back is untrusted: frames are size-capped and strictly
//     decoded, a violation closes the stream and fails only its calls, and the helper's
//     text is cut and reduced to printable ASCII before it reaches a caller.
//   - A request is retried only where it cannot act twice: one the stream surely did not
//     take, or a read whose answer was lost before any of it reached the caller. An outcome
//     that cannot be known is reported as such (ErrOutcomeUnknown), never guessed.
//   - The helper is started with a fixed argv; no file content is ever logged.
//
// docs/sessions.md and docs/gateway.md explain the choices.
package podexec
