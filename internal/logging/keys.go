package logging

// The fixed key vocabulary. New keys are added here, never inline, so that dashboards and
// alerts can rely on them.
const (
	KeyComponent   = "component"
	KeyRPC         = "rpc"
	KeyRequestID   = "request_id"
	KeyClient      = "client"
	KeyEnvironment = "environment"
	KeyRevision    = "revision"
	KeyBinding     = "binding"
	KeyOperationID = "operation_id"
	KeyRunID       = "run_id"
	KeyEpoch       = "epoch"
	KeyGeneration  = "generation"
	KeyPod         = "pod"
	KeyPVC         = "pvc"
	KeyProfile     = "profile"
	KeyNamespace   = "namespace"
	KeyExecutors   = "executor_namespace"
	KeyPhase       = "phase"
	KeyReason      = "reason"
	KeyCode        = "code"
	KeyDuration    = "duration"
	KeyAddress     = "address"
	KeyKeyID       = "kid"
	KeyVersion     = "version"
	KeyLeader      = "leader"
	KeyReplica     = "replica"
	KeyError       = "error"
	KeyCount       = "count"
	KeyPath        = "path"
	KeyNode        = "node"
	KeyName        = "name"
	// KeySandbox is an E2B sandbox id; KeyTenant the id of the API key that acts.
	KeySandbox = "sandbox"
	KeyTenant  = "tenant"
)

// Keys lists the vocabulary, for tests that check a log line uses only known keys.
var Keys = []string{
	KeyComponent, KeyRPC, KeyRequestID, KeyClient, KeyEnvironment, KeyRevision, KeyBinding,
	KeyOperationID, KeyRunID, KeyEpoch, KeyGeneration, KeyPod, KeyPVC, KeyProfile, KeyNamespace,
	KeyPhase, KeyReason, KeyCode, KeyDuration, KeyAddress, KeyKeyID, KeyVersion, KeyLeader, KeyReplica,
	KeyError, KeyCount, KeyPath, KeyNode, KeyName, KeySandbox, KeyTenant,
}
