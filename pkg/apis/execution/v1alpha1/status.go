package v1alpha1

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
