// Package controller is the leader-elected reconciler and the sole writer of
// ExecutionEnvironment status; the leader also serves the internal control.v1 API that
// gateways call.
//
// Today it campaigns for the leader Lease (released on a clean stop; a lost Lease makes the
// process exit so it never acts on stale authority), reports ready only while it leads, and
// serves /livez, /readyz and /metrics; the reconciler and the control API are delivered by
// the controller and store issues (docs/architecture.md).
package controller
