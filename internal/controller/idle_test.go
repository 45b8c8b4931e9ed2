package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/profile"
)

// The idle policy as a pure decision over one pass: when it suspends or retires, what it
// writes (the generation raised, the lapsed claim cleared, the exact executor named), and
// when it asks to be woken instead — nothing is written before the deadline.
func TestIdlePolicy(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	ptr := func(t metav1.Time) *metav1.Time { return &t }
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	readyAt := func(d time.Duration) []metav1.Condition {
		return []metav1.Condition{{Type: executionv1alpha1.ConditionReady, Status: metav1.ConditionTrue, LastTransitionTime: at(d)}}
	}
	running := func(mod func(*executionv1alpha1.ExecutionEnvironmentStatus)) executionv1alpha1.ExecutionEnvironmentStatus {
		st := executionv1alpha1.ExecutionEnvironmentStatus{FenceState: executionv1alpha1.FenceHealthy, Conditions: readyAt(0), GrantGeneration: 3,
			Pod: &executionv1alpha1.ObjectIdentity{Name: "x-x0", UID: types.UID("pod-1")}, PVC: &executionv1alpha1.ObjectIdentity{Name: "x", UID: types.UID("pvc-1")}}
		if mod != nil {
			mod(&st)
		}
		return st
	}
	suspended := func(completed time.Duration) executionv1alpha1.ExecutionEnvironmentStatus {
		return running(func(st *executionv1alpha1.ExecutionEnvironmentStatus) {
			st.Pod, st.Conditions = nil, nil
			st.LifecycleOperation = &executionv1alpha1.LifecycleOperation{Kind: executionv1alpha1.LifecycleSuspend, Phase: executionv1alpha1.PhaseCompleted, CompletedAt: ptr(at(completed))}
		})
	}
	cases := []struct {
		name            string
		suspend, retire *metav1.Duration
		status          executionv1alpha1.ExecutionEnvironmentStatus
		now             time.Duration
		wantKind        executionv1alpha1.LifecycleKind // "" : none started
		wantWake        time.Duration                   // 0: none
	}{
		{"no policy", nil, nil, running(nil), time.Hour, "", 0},
		{"ready, not idle long enough", dur(time.Hour), nil, running(nil), 20 * time.Minute, "", 40*time.Minute + wakeSlack},
		{"ready and idle since it became ready", dur(time.Hour), nil, running(nil), time.Hour, executionv1alpha1.LifecycleSuspend, 0},
		{"a release restarts the clock", dur(time.Hour), nil, running(func(st *executionv1alpha1.ExecutionEnvironmentStatus) {
			st.LastRunActivityAt = ptr(at(50 * time.Minute))
		}), time.Hour, "", 50*time.Minute + wakeSlack},
		{"an unexpired claim is not idle: woken when it lapses", dur(time.Hour), nil, running(func(st *executionv1alpha1.ExecutionEnvironmentStatus) {
			st.ActiveRun = &executionv1alpha1.RunClaim{ExpiresAt: at(3 * time.Hour)}
		}), 2 * time.Hour, "", time.Hour + wakeSlack},
		{"a lapsed claim counts from its expiry", dur(time.Hour), nil, running(func(st *executionv1alpha1.ExecutionEnvironmentStatus) {
			st.ActiveRun = &executionv1alpha1.RunClaim{ExpiresAt: at(time.Hour)}
		}), 2 * time.Hour, executionv1alpha1.LifecycleSuspend, 0},
		{"not ready", dur(time.Hour), nil, running(func(st *executionv1alpha1.ExecutionEnvironmentStatus) { st.Conditions = nil }), 5 * time.Hour, "", 0},
		{"fenced", dur(time.Hour), nil, running(func(st *executionv1alpha1.ExecutionEnvironmentStatus) { st.FenceState = executionv1alpha1.FenceUnknown }), 5 * time.Hour, "", 0},
		{"an operation in progress", dur(time.Hour), nil, running(func(st *executionv1alpha1.ExecutionEnvironmentStatus) {
			st.LifecycleOperation = &executionv1alpha1.LifecycleOperation{Kind: executionv1alpha1.LifecycleReplace, Phase: executionv1alpha1.PhaseCreatingExecutor}
		}), 5 * time.Hour, "", 0},
		{"suspended: suspend does not apply again", dur(time.Hour), nil, suspended(time.Hour), 10 * time.Hour, "", 0},
		{"suspended, retire not due: woken then", dur(time.Hour), dur(24 * time.Hour), suspended(2 * time.Hour), 10 * time.Hour, "", 16*time.Hour + wakeSlack},
		{"suspended, retire due", dur(time.Hour), dur(24 * time.Hour), suspended(2 * time.Hour), 26 * time.Hour, executionv1alpha1.LifecycleRetire, 0},
		{"ready, retire due before anything else", nil, dur(time.Hour), running(nil), 2 * time.Hour, executionv1alpha1.LifecycleRetire, 0},
		{"ready, both pending: the earlier deadline", dur(time.Hour), dur(3 * time.Hour), running(nil), 30 * time.Minute, "", 30*time.Minute + wakeSlack},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			persisted := c.status
			st := *persisted.DeepCopy()
			p := &pass{entry: profile.Entry{Spec: profile.ProfileSpec{SuspendAfterIdle: c.suspend, RetireAfterIdle: c.retire}},
				persisted: &persisted, status: &st, now: at(c.now)}
			p.applyIdlePolicy()
			op := p.status.LifecycleOperation
			started := op != nil && op.Phase == executionv1alpha1.PhaseRequested
			switch {
			case c.wantKind == "" && started:
				t.Fatalf("started %s", op.Kind)
			case c.wantKind != "" && (!started || op.Kind != c.wantKind):
				t.Fatalf("operation %+v, want %s started", op, c.wantKind)
			}
			if p.wake != c.wantWake {
				t.Errorf("wake after %s, want %s", p.wake, c.wantWake)
			}
			if !started {
				return
			}
			if c.status.Pod != nil && op.ExpectedPodUID != c.status.Pod.UID || op.ExpectedPVCUID != c.status.PVC.UID {
				t.Errorf("the operation names pod %q and claim %q", op.ExpectedPodUID, op.ExpectedPVCUID)
			}
			if p.status.ActiveRun != nil {
				t.Error("the lapsed claim was kept")
			}
			wantGen := c.status.GrantGeneration
			if c.wantKind == executionv1alpha1.LifecycleSuspend {
				wantGen++
			}
			if p.status.GrantGeneration != wantGen {
				t.Errorf("generation %d, want %d", p.status.GrantGeneration, wantGen)
			}
		})
	}
}
