package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/executor"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// gen is the generation every case observes: each condition must carry it.
const gen = 7

var (
	boundPVC    = &corev1.PersistentVolumeClaim{Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	pendingPVC  = &corev1.PersistentVolumeClaim{Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}
	readyPod    = podWithReady(corev1.ConditionTrue)
	unready     = podWithReady(corev1.ConditionFalse)
	deletingPod = func() *corev1.Pod {
		p := podWithReady(corev1.ConditionTrue)
		p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		return p
	}()
)

func podWithReady(s corev1.ConditionStatus) *corev1.Pod {
	return &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: s},
	}}}
}

func op(kind executionv1alpha1.LifecycleKind, phase executionv1alpha1.LifecyclePhase) *executionv1alpha1.LifecycleOperation {
	return &executionv1alpha1.LifecycleOperation{Kind: kind, Phase: phase}
}

// healthy is an environment with a bound claim, a ready executor, a current profile and no
// operation: every condition is at its good value.
func healthy() observed {
	return observed{generation: gen, profileKnown: true, profileCurrent: true, pvc: boundPVC, pod: readyPod,
		fence: executionv1alpha1.FenceHealthy}
}

// with returns healthy() changed by edit.
func with(edit func(*observed)) observed {
	o := healthy()
	edit(&o)
	return o
}

func cond(t string, s metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: message, ObservedGeneration: gen}
}

// Every branch of every condition function, each asserting the whole condition.
func TestConditionFunctions(t *testing.T) {
	const (
		yes = metav1.ConditionTrue
		no  = metav1.ConditionFalse
	)
	cases := []struct {
		name string
		fn   func(observed) metav1.Condition
		o    observed
		want metav1.Condition
	}{
		{"workspace: no claim", workspaceBound, with(func(o *observed) { o.pvc = nil }),
			cond(executionv1alpha1.ConditionWorkspaceBound, no, reasonMissing, "the workspace claim does not exist")},
		{"workspace: claim pending", workspaceBound, with(func(o *observed) { o.pvc = pendingPVC }),
			cond(executionv1alpha1.ConditionWorkspaceBound, no, reasonPending, "the workspace claim is not bound yet")},
		{"workspace: claim bound", workspaceBound, healthy(),
			cond(executionv1alpha1.ConditionWorkspaceBound, yes, reasonBound, "the workspace claim is bound")},

		{"executor: operation in progress", executorReady, with(func(o *observed) {
			o.operation = op(executionv1alpha1.LifecycleReplace, executionv1alpha1.PhaseStoppingExecutor)
		}), cond(executionv1alpha1.ConditionExecutorReady, no, reasonOperation, "Replace in progress: StoppingExecutor")},
		{"executor: retired", executorReady, with(func(o *observed) {
			o.pod, o.retired, o.terminated = nil, true, true
			o.operation = op(executionv1alpha1.LifecycleRetire, executionv1alpha1.PhaseCompleted)
		}), cond(executionv1alpha1.ConditionExecutorReady, no, reasonRetired, "the executor was retired; the workspace is kept")},
		{"executor: terminated, none replaced it", executorReady, with(func(o *observed) { o.pod, o.terminated = nil, true }),
			cond(executionv1alpha1.ConditionExecutorReady, no, reasonTerminated, "the executor terminated; ReplaceExecutor starts a new one")},
		{"executor: no Pod", executorReady, with(func(o *observed) { o.pod = nil }),
			cond(executionv1alpha1.ConditionExecutorReady, no, reasonMissing, "no executor Pod")},
		{"executor: Pod ready", executorReady, healthy(),
			cond(executionv1alpha1.ConditionExecutorReady, yes, reasonRunning, "the executor Pod is ready")},
		{"executor: Pod ready after a completed operation", executorReady, with(func(o *observed) {
			o.operation = op(executionv1alpha1.LifecycleReplace, executionv1alpha1.PhaseCompleted)
		}), cond(executionv1alpha1.ConditionExecutorReady, yes, reasonRunning, "the executor Pod is ready")},
		{"executor: Pod not ready", executorReady, with(func(o *observed) { o.pod = unready }),
			cond(executionv1alpha1.ConditionExecutorReady, no, reasonNotRunning, "the executor Pod is not ready")},
		{"executor: image cannot be pulled", executorReady, with(func(o *observed) {
			o.pod = unready.DeepCopy()
			o.pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: executor.ContainerName,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}}
		}), cond(executionv1alpha1.ConditionExecutorReady, no, reasonNotRunning, "the executor Pod is not ready: ImagePullBackOff")},
		{"executor: on its way (not trouble)", executorReady, with(func(o *observed) {
			o.pod = unready.DeepCopy()
			o.pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: executor.ContainerName,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
		}), cond(executionv1alpha1.ConditionExecutorReady, no, reasonNotRunning, "the executor Pod is not ready")},
		{"executor: ready Pod being deleted", executorReady, with(func(o *observed) { o.pod = deletingPod }),
			cond(executionv1alpha1.ConditionExecutorReady, no, reasonNotRunning, "the executor Pod is not ready")},

		{"fenced: outcome unknown", fenced, with(func(o *observed) {
			o.fence, o.fenceReason = executionv1alpha1.FenceUnknown, fenceExecutorVanished
		}), cond(executionv1alpha1.ConditionFenced, yes, reasonFenceUnknown, fenceExecutorVanished)},
		{"fenced: healthy", fenced, healthy(),
			cond(executionv1alpha1.ConditionFenced, no, reasonHealthy, "every outcome is accounted for")},

		{"profile: removed", profileCurrent, with(func(o *observed) { o.profileKnown, o.profileCurrent = false, false }),
			cond(executionv1alpha1.ConditionProfileCurrent, no, reasonProfileRemoved, "the profile was removed: no new executor is created")},
		{"profile: changed since creation", profileCurrent, with(func(o *observed) { o.profileCurrent = false }),
			cond(executionv1alpha1.ConditionProfileCurrent, no, reasonProfileChanged, "the profile changed since creation: no new executor is created")},
		{"profile: current", profileCurrent, healthy(),
			cond(executionv1alpha1.ConditionProfileCurrent, yes, reasonProfileCurrent, "the profile is unchanged")},

		{"deletion: plain delete", deletionBlocked, with(func(o *observed) { o.deleting = true }),
			cond(executionv1alpha1.ConditionDeletionBlocked, yes, reasonDeletionBlocked, "deleting an environment needs DeleteRetiredEnvironment; the workspace is kept")},
		{"deletion: plain delete while DeleteRetired waits", deletionBlocked, with(func(o *observed) {
			o.deleting = true
			o.operation = op(executionv1alpha1.LifecycleDeleteRetired, executionv1alpha1.PhaseRequested)
		}), cond(executionv1alpha1.ConditionDeletionBlocked, yes, reasonDeletionBlocked, "deleting an environment needs DeleteRetiredEnvironment; the workspace is kept")},
		{"deletion: DeleteRetired deleting the workspace", deletionBlocked, with(func(o *observed) {
			o.deleting = true
			o.operation = op(executionv1alpha1.LifecycleDeleteRetired, executionv1alpha1.PhaseDeletingWorkspace)
		}), cond(executionv1alpha1.ConditionDeletionBlocked, no, reasonNotDeleting, "no deletion requested")},
		{"deletion: DeleteRetired deleting the environment", deletionBlocked, with(func(o *observed) {
			o.deleting = true
			o.operation = op(executionv1alpha1.LifecycleDeleteRetired, executionv1alpha1.PhaseDeletingEnvironment)
		}), cond(executionv1alpha1.ConditionDeletionBlocked, no, reasonNotDeleting, "no deletion requested")},
		{"deletion: none", deletionBlocked, healthy(),
			cond(executionv1alpha1.ConditionDeletionBlocked, no, reasonNotDeleting, "no deletion requested")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.fn(tc.o)); diff != "" {
				t.Errorf("condition (-want +got):\n%s", diff)
			}
		})
	}
}

// Ready is true exactly when the workspace is bound, the executor ready and nothing fenced;
// each of the three alone makes it false. The other conditions do not enter it.
func TestReadyCondition(t *testing.T) {
	notReady := cond(executionv1alpha1.ConditionReady, metav1.ConditionFalse, reasonNotReady, "waiting for the workspace, the executor, or recovery")
	cases := []struct {
		name string
		o    observed
		want metav1.Condition
	}{
		{"everything in place", healthy(), cond(executionv1alpha1.ConditionReady, metav1.ConditionTrue, reasonReady, "data operations can be served")},
		{"profile changed: existing work goes on", with(func(o *observed) { o.profileCurrent = false }),
			cond(executionv1alpha1.ConditionReady, metav1.ConditionTrue, reasonReady, "data operations can be served")},
		{"workspace not bound", with(func(o *observed) { o.pvc = pendingPVC }), notReady},
		{"executor not ready", with(func(o *observed) { o.pod = unready }), notReady},
		{"fenced", with(func(o *observed) { o.fence = executionv1alpha1.FenceUnknown }), notReady},
	}
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var st executionv1alpha1.ExecutionEnvironmentStatus
			conditions(&st, tc.o, now)
			want := tc.want
			want.LastTransitionTime = now
			if diff := cmp.Diff(&want, meta.FindStatusCondition(st.Conditions, executionv1alpha1.ConditionReady)); diff != "" {
				t.Errorf("Ready (-want +got):\n%s", diff)
			}
		})
	}
}

// conditions sets all six, and moves a condition's LastTransitionTime only when its status
// changes: a pass that observes the same world writes the same status.
func TestConditionsTransitionTime(t *testing.T) {
	first := metav1.NewTime(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC))
	later := metav1.NewTime(first.Add(time.Hour))
	var st executionv1alpha1.ExecutionEnvironmentStatus
	conditions(&st, healthy(), first)
	conditions(&st, with(func(o *observed) { o.pod = unready }), later)

	type transition struct {
		Status metav1.ConditionStatus
		At     metav1.Time
	}
	got := map[string]transition{}
	for _, c := range st.Conditions {
		got[c.Type] = transition{c.Status, c.LastTransitionTime}
	}
	want := map[string]transition{
		executionv1alpha1.ConditionWorkspaceBound:  {metav1.ConditionTrue, first},
		executionv1alpha1.ConditionExecutorReady:   {metav1.ConditionFalse, later},
		executionv1alpha1.ConditionFenced:          {metav1.ConditionFalse, first},
		executionv1alpha1.ConditionProfileCurrent:  {metav1.ConditionTrue, first},
		executionv1alpha1.ConditionDeletionBlocked: {metav1.ConditionFalse, first},
		executionv1alpha1.ConditionReady:           {metav1.ConditionFalse, later},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("conditions after the executor stopped being ready (-want +got):\n%s", diff)
	}
	if st.Phase != executionv1alpha1.PhaseProvisioning {
		t.Errorf("phase %s, want %s", st.Phase, executionv1alpha1.PhaseProvisioning)
	}
}

// Every branch of the printer column, in its order of precedence.
func TestPhase(t *testing.T) {
	cases := []struct {
		name  string
		o     observed
		ready bool
		want  executionv1alpha1.Phase
	}{
		{"fenced, even while deleting", with(func(o *observed) { o.fence, o.deleting = executionv1alpha1.FenceUnknown, true }), false, executionv1alpha1.PhaseFenced},
		{"plain delete", with(func(o *observed) { o.deleting = true }), true, executionv1alpha1.PhaseDeleting},
		{"DeleteRetired in progress", with(func(o *observed) {
			o.pod, o.operation = nil, op(executionv1alpha1.LifecycleDeleteRetired, executionv1alpha1.PhaseDeletingWorkspace)
		}), false, executionv1alpha1.PhaseDeleting},
		{"Delete in progress", with(func(o *observed) {
			o.operation = op(executionv1alpha1.LifecycleDelete, executionv1alpha1.PhaseStoppingExecutor)
		}), false, executionv1alpha1.PhaseDeleting},
		{"deleted, even fenced or with a delete pending", with(func(o *observed) {
			o.pod, o.pvc, o.deleted, o.deleting, o.fence = nil, nil, true, true, executionv1alpha1.FenceUnknown
			o.operation = op(executionv1alpha1.LifecycleDelete, executionv1alpha1.PhaseCompleted)
		}), false, executionv1alpha1.PhaseDeleted},
		{"Replace in progress", with(func(o *observed) {
			o.operation = op(executionv1alpha1.LifecycleReplace, executionv1alpha1.PhaseCreatingExecutor)
		}), false, executionv1alpha1.PhaseReplacing},
		{"Retire in progress", with(func(o *observed) {
			o.operation = op(executionv1alpha1.LifecycleRetire, executionv1alpha1.PhaseAwaitingTermination)
		}), false, executionv1alpha1.PhaseRetiring},
		{"retired", with(func(o *observed) {
			o.pod, o.retired, o.terminated = nil, true, true
			o.operation = op(executionv1alpha1.LifecycleRetire, executionv1alpha1.PhaseCompleted)
		}), false, executionv1alpha1.PhaseRetired},
		{"ready", healthy(), true, executionv1alpha1.PhaseReady},
		{"ready with a changed profile", with(func(o *observed) { o.profileCurrent = false }), true, executionv1alpha1.PhaseReady},
		{"profile removed", with(func(o *observed) { o.profileKnown, o.profileCurrent, o.pod, o.pvc = false, false, nil, nil }), false, executionv1alpha1.PhaseDegraded},
		{"profile changed, not ready", with(func(o *observed) { o.profileCurrent, o.pod = false, unready }), false, executionv1alpha1.PhaseDegraded},
		{"executor terminated, none replaced it", with(func(o *observed) { o.pod, o.terminated = nil, true }), false, executionv1alpha1.PhaseDegraded},
		{"provisioning", with(func(o *observed) { o.pod, o.pvc = nil, pendingPVC }), false, executionv1alpha1.PhaseProvisioning},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := phase(tc.o, tc.ready); got != tc.want {
				t.Errorf("phase %s, want %s", got, tc.want)
			}
		})
	}
}
