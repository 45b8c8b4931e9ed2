// Package controller is the leader-elected reconciler and the sole writer of
// ExecutionEnvironment status; the leader also serves the internal control.v1 API that
// gateways call (the store issue).
//
// Invariants (docs/controller.md):
//   - Only the Lease holder reconciles and publishes itself as the control API Service's only
//     endpoint (with --leader-service); a follower never writes. Every replica that can serve
//     or take over is ready, the follower too. A lost Lease makes the process exit. Every status
//     write is a compare-and-swap on the resourceVersion the pass read, and a pass writes at
//     most once, only when the computed status differs.
//   - A workspace claim or executor Pod is created only when none was ever recorded; an
//     unrecorded object of the environment is adopted, never duplicated; a recorded UID that
//     vanished without an expected cause fences the environment and is never recreated.
//     After the first executor, only Replace creates one.
//   - An executor Pod's finalizer is removed only after its termination proof is persisted.
//   - Lifecycle phases advance one per pass; each phase's side effect is idempotent and
//     deletes only with a UID precondition, so a crash repeats at most that side effect.
//   - Deleting the resource directly only reports DeletionBlocked; claims are never deleted
//     except by DeleteRetired.
package controller
