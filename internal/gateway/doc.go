// Package gateway is the public execution.v1 API server: it authenticates every RPC,
// applies client policy and limits, issues and verifies grants, forwards control operations
// to the controller leader and serves file and command operations itself through pods/exec.
//
// This package currently holds the gateway's configuration and entry point; the server is
// delivered by the gateway issue (docs/architecture.md).
package gateway
