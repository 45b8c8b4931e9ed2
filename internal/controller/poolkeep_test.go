package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pooled claim's Pod waits while the claim's volume is being provisioned, not once it is
// bound or scheduled for a consumer, and a claim nothing has annotated waits out its grace.
func TestPooledPodAwaitsTheBinding(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	pl := &pools{r: &Reconciler{cfg: ReconcilerConfig{Now: func() time.Time { return now }}}}
	claim := func(age time.Duration, phase corev1.PersistentVolumeClaimPhase, annotations ...string) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-age)), Annotations: map[string]string{}},
			Status: corev1.PersistentVolumeClaimStatus{Phase: phase}}
		for _, a := range annotations {
			c.Annotations[a] = "x"
		}
		return c
	}
	for name, tc := range map[string]struct {
		c    *corev1.PersistentVolumeClaim
		want time.Duration
	}{
		"bound":                            {claim(0, corev1.ClaimBound, annStorageProvisioner), -1},
		"provisioning":                     {claim(time.Minute, corev1.ClaimPending, annStorageProvisioner), 0},
		"provisioning, beta annotation":    {claim(time.Minute, corev1.ClaimPending, annBetaStorageProvisioner), 0},
		"scheduled for a consumer":         {claim(0, corev1.ClaimPending, annStorageProvisioner, annSelectedNode), -1},
		"not annotated yet":                {claim(300*time.Millisecond, corev1.ClaimPending), poolBindGrace - 300*time.Millisecond},
		"never annotated: binds on demand": {claim(2*poolBindGrace, corev1.ClaimPending), -1},
	} {
		if got := pl.awaitBinding(tc.c); got != tc.want {
			t.Errorf("%s: awaitBinding = %s, want %s", name, got, tc.want)
		}
	}
}
