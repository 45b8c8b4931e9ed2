// Package controller is the leader-elected reconciler and the sole writer of
// ExecutionEnvironment status; the leader also serves the internal control.v1 API that
// gateways call.
//
// Today it campaigns for the leader Lease (released on a clean stop; a lost Lease makes the
// process exit so it never acts on stale authority), and the leader runs the reconciler:
// informers on environments and on the Pods and claims it manages, a rate-limited queue,
// and one pass per environment — the claim, then the Pod (both adopted when an interrupted
// pass created them, never recreated when a recorded UID vanished: that fences the
// environment), conditions from pure functions, and one status compare-and-swap only when
// something changed. Lifecycle phases (Retire, Replace, DeleteRetired) and the control API
// are delivered by the controller and store issues (docs/architecture.md).
package controller
