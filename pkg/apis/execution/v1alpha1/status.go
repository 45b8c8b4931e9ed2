package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Predicates over the status that both the reconciler and the store decide on; one
// definition, so that they can never disagree about what state an environment is in.

// InProgress reports an operation that has not completed (nil is none).
func (op *LifecycleOperation) InProgress() bool {
	return op != nil && op.Phase != PhaseCompleted
}

// NeverHadExecutor is true until the first executor Pod is recorded. Afterwards only a
// Replace creates one, so an executor that went away is never recreated silently, and no
// administrative operation may race the first records.
func (s *ExecutionEnvironmentStatus) NeverHadExecutor() bool {
	return s.Pod == nil && s.TerminationProof == nil && s.LastReplacement == nil && s.LifecycleOperation == nil
}

// Retired reports a completed Retire with no executor since.
func (s *ExecutionEnvironmentStatus) Retired() bool {
	op := s.LifecycleOperation
	return op != nil && op.Kind == LifecycleRetire && op.Phase == PhaseCompleted && s.Pod == nil
}

// Suspended reports a completed Suspend with no executor since: only a Resume (or Ensure,
// Attach or AcquireRun, which start one) gives it an executor again.
func (s *ExecutionEnvironmentStatus) Suspended() bool {
	op := s.LifecycleOperation
	return op != nil && op.Kind == LifecycleSuspend && op.Phase == PhaseCompleted && s.Pod == nil
}

// Deleted reports a completed Delete: the executor and the workspace are gone and the
// resource is a tombstone, kept only to answer a repeated delete.
func (s *ExecutionEnvironmentStatus) Deleted() bool {
	op := s.LifecycleOperation
	return op != nil && op.Kind == LifecycleDelete && op.Phase == PhaseCompleted && s.PVC == nil && s.Pod == nil
}

// Retained reports the owner's request to keep the workspace past the profile's time limits.
func (s *ExecutionEnvironmentStatus) Retained() bool {
	return s.Retention != nil && s.Retention.Retain
}

// RaiseEpoch fences every run grant issued so far (AcquireRun, a completed replacement,
// RecoverEnvironment) and records when, for the gateways' observation-delay metric.
func (s *ExecutionEnvironmentStatus) RaiseEpoch(now time.Time) {
	s.Epoch++
	s.AuthorityChangedAt = ptrMicro(now)
}

// RaiseGrantGeneration revokes every grant issued so far (RevokeEnvironment) and records
// when.
func (s *ExecutionEnvironmentStatus) RaiseGrantGeneration(now time.Time) {
	s.GrantGeneration++
	s.AuthorityChangedAt = ptrMicro(now)
}

func ptrMicro(t time.Time) *metav1.MicroTime {
	m := metav1.NewMicroTime(t)
	return &m
}
