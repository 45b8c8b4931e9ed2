package kube

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/utils/ptr"
)

// A clean stop releases the Lease, and a follower takes it at its next attempt — within a
// jittered retry period, not a lease duration — while each replica's answered Lease requests
// are reported (what a follower's readiness rests on).
func TestReleasedLeaseIsTakenWithinARetryPeriod(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	client := fake.NewClientset()
	const (
		leaseDuration = 30 * time.Second // a takeover by expiry would time the test out
		retryPeriod   = 100 * time.Millisecond
	)
	type replica struct {
		heard  atomic.Int32
		leads  chan struct{}
		cancel context.CancelFunc
		done   chan error
	}
	start := func(id string) *replica {
		r := &replica{leads: make(chan struct{}), done: make(chan error, 1)}
		ctx, cancel := context.WithCancel(t.Context())
		r.cancel = cancel
		go func() {
			r.done <- RunElection(ctx, Election{
				Client: client, Namespace: "execplane", LeaseName: "execplane-controller", Identity: id,
				LeaseDuration: leaseDuration, RenewDeadline: 20 * time.Second, RetryPeriod: retryPeriod,
				Lead:  func(context.Context) { close(r.leads) },
				Heard: func() { r.heard.Add(1) },
			})
		}()
		return r
	}
	a := start("a")
	select {
	case <-a.leads:
	case <-time.After(10 * time.Second):
		t.Fatal("the only replica did not lead")
	}
	b := start("b")
	eventually(t, "the follower reads the Lease", func() bool { return b.heard.Load() >= 2 })
	select {
	case <-b.leads:
		t.Fatal("the follower leads beside the leader")
	default:
	}
	if a.heard.Load() == 0 {
		t.Error("the leader's requests were not reported")
	}

	a.cancel()
	stopped := time.Now()
	if err := <-a.done; err != nil {
		t.Fatalf("a clean stop: %v", err)
	}
	lease, err := client.CoordinationV1().Leases("execplane").Get(t.Context(), "execplane-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Released: empty, or already the follower's — on a busy machine it may take the Lease
	// (one retry period) before this read. Never still the stopped leader's.
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != "" && holder != "b" {
		t.Fatalf("the stopped leader still holds the Lease: %q", holder)
	}
	jitter := leaderelection.JitterFactor
	bound := time.Duration((1+jitter)*float64(retryPeriod)) + time.Second // + scheduling slack
	select {
	case <-b.leads:
		if took := time.Since(stopped); took > bound {
			t.Errorf("taken over after %s, want within %s", took, bound)
		}
	case <-time.After(leaseDuration / 2):
		t.Fatal("the follower did not take the released Lease")
	}
	b.cancel()
	if err := <-b.done; err != nil {
		t.Fatal(err)
	}
}
