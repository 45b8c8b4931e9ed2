// Package controller is the leader-elected reconciler and the sole writer of
// ExecutionEnvironment status; the leader also serves the internal control.v1 API that
// gateways call.
//
// This package currently holds the controller's configuration and entry point; the
// reconciler is delivered by the controller issue (docs/architecture.md).
package controller
