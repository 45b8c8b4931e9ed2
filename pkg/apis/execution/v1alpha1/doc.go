// Package v1alpha1 is the ExecutionEnvironment API (execution.mecatl.dev/v1alpha1): the only
// durable state of execplane.
//
// Invariants:
//   - spec is written once, at creation, and is immutable (CEL self == oldSelf on the CRD).
//   - status is the ledger and is written only by the controller, always as a
//     resourceVersion compare-and-swap.
//   - The workspace PVC never carries an owner reference to an environment; deleting an
//     ExecutionEnvironment can never garbage-collect a workspace.
//   - Every list is bounded (references 64, receipts 32, conditions 16) so that an object
//     cannot grow without bound under churn.
//   - Types only: behaviour lives in pkg/store and internal/controller. The CRD YAML, deepcopy
//     functions, typed clientset, listers and informers are generated from these types
//     (make generate) and committed.
//
// +k8s:deepcopy-gen=package
// +groupName=execution.mecatl.dev
package v1alpha1
