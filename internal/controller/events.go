package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	execscheme "github.com/execplane/execplane/pkg/generated/clientset/versioned/scheme"
)

// Event reasons the controller records on an ExecutionEnvironment: a fixed vocabulary that
// operators can filter on (kubectl get events --field-selector reason=Fenced).
const (
	// EventAdopted: a pass found the claim or Pod an interrupted pass created (not of a
	// starting environment, whose objects are recorded when it is Ready: quiet.go).
	EventAdopted             = "Adopted"
	EventAdoptedFromPool     = "AdoptedFromPool"
	EventFenced              = "Fenced"
	EventStoppingExecutor    = "StoppingExecutor"
	EventTerminationRecorded = "TerminationRecorded"
	EventRetired             = "Retired"
	EventExecutorReplaced    = "ExecutorReplaced"
	EventDeletingWorkspace   = "DeletingWorkspace"
	EventWorkspaceDeleted    = "WorkspaceDeleted"
	EventEnvironmentDeleted  = "EnvironmentDeleted"
	EventDeletionBlocked     = "DeletionBlocked"
	EventOperationBlocked    = "OperationBlocked"
	EventOrphanReleased      = "OrphanReleased"
	EventSuspended           = "Suspended"
	EventResumed             = "Resumed"
	EventIdle                = "Idle"
	EventExpired             = "Expired"
	EventDeadlineRefused     = "DeadlineRefused"
)

// eventComponent is the events' source.
const eventComponent = "execplane-controller"

// event is one Event to record once the pass's status write has landed, so that an Event
// never announces a transition the ledger refused.
type event struct {
	warning bool
	reason  string
	message string
}

// newRecorder returns a recorder writing Events into the environments' namespace, and a
// function that stops it (flushing what is queued).
func newRecorder(ctx context.Context, kube kubernetes.Interface) (record.EventRecorder, func(), error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	if err := execscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return b.NewRecorder(scheme, corev1.EventSource{Component: eventComponent}), b.Shutdown, nil
}

func (p *pass) emit(env *executionv1alpha1.ExecutionEnvironment, e event) {
	kind := corev1.EventTypeNormal
	if e.warning {
		kind = corev1.EventTypeWarning
	}
	p.r.recorder.Event(env, kind, e.reason, e.message)
}
