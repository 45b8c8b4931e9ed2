// Package store is the ledger of ExecutionEnvironments: every state transition a client or an
// administrator can ask for, run by the controller leader as the single writer of their
// status (the reconciler writes the rest of it).
//
// Invariants:
//   - Every mutation is an operation with an id: a replay with the same arguments returns the
//     first outcome and writes nothing; the same id with other arguments is apierror.ErrOperationIDReused.
//     Receipts live in the environment's status (a ring of v1alpha1.MaxReceipts).
//   - Every mutation reads the object live and writes it back with a resourceVersion
//     compare-and-swap; on a conflict it re-reads and re-evaluates every precondition, the
//     caller's authorisation included. Mutations of one environment are serialised in this
//     process, so conflicts come only from the reconciler or a deposed leader.
//   - A refusal writes nothing: the object is left byte-for-byte unchanged.
//   - An environment of another client or owner, or outside an administrator's scope,
//     answers apierror.ErrNotFound exactly like an absent one.
//   - Epoch and grant generation only grow.
package store
