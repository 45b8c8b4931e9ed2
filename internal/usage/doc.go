// Package usage keeps each environment's usage ledger (an ExecutionUsage object): CPU and
// memory of its executor containers read from the kubelets, ready, suspended and storage
// time from its lifecycle, commands and bytes from the gateways' reports — and answers what
// a tenant used over a window.
//
// Invariants:
//   - Only the controller's leader writes ledgers, at most once per environment per
//     checkpoint interval, and never for an idle suspended environment: time-based
//     counters accrue from the ledger's Accrual.Since and are added by readers.
//   - Every fold is idempotent: a ledger remembers the last counters folded of each Pod and
//     gateway series and adds only their increase, so a sample or report seen again (a
//     retry, a new leader, a restarted gateway's old series) never counts twice.
//   - What the workload can write is never read: the kubelet reads the container's cgroup,
//     the gateway counts the calls it served.
//   - The loss on a crash is bounded: a Pod's CPU after its last sample when it dies before
//     the next; a gateway's counts since its last accepted report when it crashes; a new
//     leader bridges the memory integral from the last written sample (docs/usage.md).
package usage
