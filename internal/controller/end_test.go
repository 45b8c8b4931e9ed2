package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/profile"
)

// The profiles' time limits as a pure decision over one pass: which limit starts a Delete
// and what it writes (the generation raised, the claim cleared, the exact objects named, the
// limit counted), or when the pass asks to be woken — and that retention, a fence, an
// operation in progress or a limit of 0 start nothing.
func TestTimeLimits(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	ptr := func(t metav1.Time) *metav1.Time { return &t }
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	status := func(kind executionv1alpha1.LifecycleKind, completed time.Duration, mod func(*executionv1alpha1.ExecutionEnvironmentStatus)) executionv1alpha1.ExecutionEnvironmentStatus {
		st := executionv1alpha1.ExecutionEnvironmentStatus{FenceState: executionv1alpha1.FenceHealthy, GrantGeneration: 3,
			Pod: &executionv1alpha1.ObjectIdentity{Name: "x-x0", UID: types.UID("pod-1")}, PVC: &executionv1alpha1.ObjectIdentity{Name: "x", UID: types.UID("pvc-1")}}
		if kind != "" {
			st.Pod = nil
			st.LifecycleOperation = &executionv1alpha1.LifecycleOperation{Kind: kind, Phase: executionv1alpha1.PhaseCompleted, CompletedAt: ptr(at(completed))}
		}
		if mod != nil {
			mod(&st)
		}
		return st
	}
	spec := func(retired, suspended, lifetime *metav1.Duration) profile.ProfileSpec {
		return profile.ProfileSpec{RetiredTTL: retired, SuspendedTTL: suspended, MaxLifetime: lifetime}
	}
	retained := func(st *executionv1alpha1.ExecutionEnvironmentStatus) {
		st.Retention = &executionv1alpha1.Retention{Retain: true}
	}
	cases := []struct {
		name      string
		spec      profile.ProfileSpec
		status    executionv1alpha1.ExecutionEnvironmentStatus
		now       time.Duration // since creation (t0)
		wantLimit string        // "": none started
		wantWake  time.Duration // 0: none
	}{
		{"no limits", spec(nil, nil, nil), status(executionv1alpha1.LifecycleSuspend, time.Hour, nil), 100 * time.Hour, "", 0},
		{"limits of 0 are none", spec(dur(0), dur(0), dur(0)), status(executionv1alpha1.LifecycleSuspend, time.Hour, nil), 100 * time.Hour, "", 0},
		{"suspended, not yet", spec(nil, dur(time.Hour), nil), status(executionv1alpha1.LifecycleSuspend, time.Hour, nil), 90 * time.Minute, "", 30*time.Minute + wakeSlack},
		{"suspended past its TTL", spec(nil, dur(time.Hour), nil), status(executionv1alpha1.LifecycleSuspend, time.Hour, nil), 2 * time.Hour, limitSuspendedTTL, 0},
		{"retired past its TTL", spec(dur(time.Hour), nil, nil), status(executionv1alpha1.LifecycleRetire, time.Hour, nil), 2 * time.Hour, limitRetiredTTL, 0},
		{"suspendedTTL does not apply to a retired one", spec(nil, dur(time.Hour), nil), status(executionv1alpha1.LifecycleRetire, time.Hour, nil), 5 * time.Hour, "", 0},
		{"ready past its lifetime", spec(nil, nil, dur(24*time.Hour)), status("", 0, nil), 25 * time.Hour, limitMaxLifetime, 0},
		{"ready, lifetime pending", spec(nil, nil, dur(24*time.Hour)), status("", 0, nil), 20 * time.Hour, "", 4*time.Hour + wakeSlack},
		{"the earlier deadline wakes", spec(nil, dur(time.Hour), dur(24*time.Hour)), status(executionv1alpha1.LifecycleSuspend, 22*time.Hour+30*time.Minute, nil), 23 * time.Hour, "", 30*time.Minute + wakeSlack},
		{"retained", spec(dur(time.Hour), dur(time.Hour), dur(time.Hour)), status(executionv1alpha1.LifecycleSuspend, time.Hour, retained), 100 * time.Hour, "", 0},
		{"fenced", spec(nil, dur(time.Hour), nil), status(executionv1alpha1.LifecycleSuspend, time.Hour, func(st *executionv1alpha1.ExecutionEnvironmentStatus) {
			st.FenceState = executionv1alpha1.FenceUnknown
		}), 100 * time.Hour, "", 0},
		{"an operation in progress", spec(nil, nil, dur(time.Hour)), status("", 0, func(st *executionv1alpha1.ExecutionEnvironmentStatus) {
			st.LifecycleOperation = &executionv1alpha1.LifecycleOperation{Kind: executionv1alpha1.LifecycleReplace, Phase: executionv1alpha1.PhaseCreatingExecutor}
		}), 100 * time.Hour, "", 0},
		{"a claim held does not hold off the lifetime", spec(nil, nil, dur(time.Hour)), status("", 0, func(st *executionv1alpha1.ExecutionEnvironmentStatus) {
			st.ActiveRun = &executionv1alpha1.RunClaim{ExpiresAt: at(200 * time.Hour)}
		}), 2 * time.Hour, limitMaxLifetime, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			persisted := c.status
			st := *persisted.DeepCopy()
			env := &executionv1alpha1.ExecutionEnvironment{ObjectMeta: metav1.ObjectMeta{Name: "x", CreationTimestamp: at(0)}}
			p := &pass{env: env, entry: profile.Entry{Spec: c.spec}, persisted: &persisted, status: &st, now: at(c.now)}
			p.applyTimeLimits()
			op := p.status.LifecycleOperation
			started := op != nil && op.Phase == executionv1alpha1.PhaseRequested && op.Kind == executionv1alpha1.LifecycleDelete
			switch {
			case c.wantLimit == "" && (started || p.expired != ""):
				t.Fatalf("started %+v (limit %q)", op, p.expired)
			case c.wantLimit != "" && (!started || p.expired != c.wantLimit || op.OperationID != "expired-"+c.wantLimit):
				t.Fatalf("operation %+v, limit %q; want %s", op, p.expired, c.wantLimit)
			}
			if p.wake != c.wantWake {
				t.Errorf("wake after %s, want %s", p.wake, c.wantWake)
			}
			if !started {
				return
			}
			if (c.status.Pod != nil && op.ExpectedPodUID != c.status.Pod.UID) || op.ExpectedPVCUID != c.status.PVC.UID {
				t.Errorf("the operation names pod %q and claim %q", op.ExpectedPodUID, op.ExpectedPVCUID)
			}
			if p.status.ActiveRun != nil || p.status.GrantGeneration != c.status.GrantGeneration+1 {
				t.Errorf("claim %v, generation %d: every grant must die", p.status.ActiveRun, p.status.GrantGeneration)
			}
			if len(p.events) != 1 || p.events[0].reason != EventExpired {
				t.Errorf("events %+v, want one %s", p.events, EventExpired)
			}
		})
	}
}
