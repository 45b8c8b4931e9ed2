package store

import (
	"time"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/ident"
)

// Caller is the authenticated client and the capabilities the controller resolved for it
// from its own security material (never from what a gateway says the policy is).
type Caller struct {
	// Client is the client's canonical identity (the URI SAN of its certificate).
	Client string
	// Capabilities are what the client's policy allows.
	Capabilities Capabilities
}

// Capabilities are the decisions of a client's policy that the store makes.
type Capabilities struct {
	// MayAttestOwner: the client may act for the owners it names (Ensure, references).
	MayAttestOwner bool
	// Administrator: the client may run administrative operations, on environments created
	// by the clients of AdministratorFor (canonical identities), or by any when it is empty.
	Administrator    bool
	AdministratorFor []string
}

// Owner is the end user a client acts for.
type Owner struct {
	Issuer  string
	Subject string
}

// EnsureInput asks for the binding's environment, created from Profile when absent.
type EnsureInput struct {
	Caller                Caller
	OperationID           string
	Owner                 Owner
	BindingID             string
	Profile               string
	ExpectedProfileDigest string
	// Metadata is the caller's metadata for a new environment (ident's bounds); part of
	// the request, like the profile.
	Metadata map[string]string
	// Deadline, when set, is the new environment's deadline, set with the binding's
	// reference; not part of the request.
	Deadline *DeadlineInput
	// FromSnapshot, when set, is the caller's name of one of the owner's snapshots (Ready)
	// that a new environment's workspace starts as; part of the request.
	FromSnapshot string
}

// DeadlineInput asks for Action After from now.
type DeadlineInput struct {
	After  time.Duration
	Action executionv1alpha1.DeadlineAction
}

// SetDeadlineInput sets (Deadline) or clears (nil) the owner's deadline of an environment.
type SetDeadlineInput struct {
	ReferenceInput
	Deadline *DeadlineInput
}

// ListEnvironmentsInput pages through the environments the caller created for an owner.
type ListEnvironmentsInput struct {
	Caller Caller
	Owner  Owner
	// BindingID, when set, keeps only that binding's environment.
	BindingID string
	// Metadata keeps only environments whose metadata has each entry.
	Metadata map[string]string
	// Match, when set, keeps only the environments it accepts (the caller's view of
	// states the store does not name).
	Match     func(*executionv1alpha1.ExecutionEnvironment) bool
	PageSize  int
	PageToken string
}

// EnvironmentPage is one page of ListEnvironments: copies the caller may keep.
type EnvironmentPage struct {
	Environments  []*executionv1alpha1.ExecutionEnvironment
	NextPageToken string
}

// AttachInput asks for an environment the binding holds a reference on (read-only).
type AttachInput struct {
	Caller      Caller
	Owner       Owner
	BindingID   string
	Environment ident.EnvironmentRef
	// WaitReady, when positive, holds the answer until the environment is ready or cannot
	// become so without another call, at most this long (MaxAttachWait).
	WaitReady time.Duration
}

// ReferenceInput names one binding's reference on one environment, for an owner.
type ReferenceInput struct {
	Caller      Caller
	OperationID string
	Owner       Owner
	Environment ident.EnvironmentRef
	BindingID   string
}

// ReserveSuccessorInput reserves a reference for a successor of a published binding.
type ReserveSuccessorInput struct {
	Caller             Caller
	OperationID        string
	Owner              Owner
	Environment        ident.EnvironmentRef
	SourceBindingID    string
	SuccessorBindingID string
}

// ListIntentsInput pages through the caller's non-published references, optionally for one
// owner.
type ListIntentsInput struct {
	Caller    Caller
	Owner     *Owner
	PageSize  int
	PageToken string
}

// AcquireRunInput claims execution authority under an environment grant.
type AcquireRunInput struct {
	Caller      Caller
	OperationID string
	Grant       authority.GrantClaims
	Environment ident.EnvironmentRef
	RunID       string
	// TTL is 0 (DefaultRunTTL) or within [MinRunTTL, MaxRunTTL].
	TTL time.Duration
	// Join answers the binding's live claim of RunID (this client's, this generation's)
	// instead of replacing it.
	Join bool
}

// RenewRunInput extends the run claim a run grant names.
type RenewRunInput struct {
	Caller      Caller
	OperationID string
	Grant       authority.GrantClaims
	Environment ident.EnvironmentRef
	TTL         time.Duration
}

// ReleaseRunInput ends the run claim a run grant names.
type ReleaseRunInput struct {
	Caller      Caller
	OperationID string
	Grant       authority.GrantClaims
	Environment ident.EnvironmentRef
}

// Preconditions are an administrator's exact expectations; a nil field is not checked.
type Preconditions struct {
	Epoch           *uint64
	PodUID          *string // "" asserts there is no executor
	PVCUID          *string
	GrantGeneration *uint64
}

// AdminInput is the common input of administrative operations.
type AdminInput struct {
	Caller        Caller
	OperationID   string
	Environment   ident.EnvironmentRef
	Preconditions Preconditions
	// Reason is for Events and audit: printable text, at most 256 bytes.
	Reason string
}

// MigrateInput upgrades an environment's record to TargetSchemaVersion.
type MigrateInput struct {
	AdminInput
	TargetSchemaVersion int32
}

// Result is the outcome of a call on one environment.
type Result struct {
	// Environment is the object after the call (a copy the caller may keep).
	Environment *executionv1alpha1.ExecutionEnvironment
	// Reference is the reference the call acted on, when there is one and it still exists.
	Reference *executionv1alpha1.Reference
	// Changed is true when Ensure created the environment or Migrate migrated it.
	Changed bool
	// Run is the claim AcquireRun or RenewRun produced.
	Run *executionv1alpha1.RunClaim
}

// Intent is a non-published reference with its environment.
type Intent struct {
	Environment ident.EnvironmentRef
	Reference   executionv1alpha1.Reference
}

// IntentPage is one page of intents.
type IntentPage struct {
	Intents       []Intent
	NextPageToken string
}
