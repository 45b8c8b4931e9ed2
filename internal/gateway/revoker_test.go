package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// envRecordKeys are what the gateway gives the helper for the fixture's environment: the
// material's record key derived over its UID — never the material's key itself.
func envRecordKeys(t *testing.T, k *keys) []*helperv1.RecordKey {
	t.Helper()
	rk := k.bundle.RecordKeys()
	if len(rk) != 1 || rk[0].ID != devbundle.RecordKeyID {
		t.Fatalf("the fixture's record keys: %v", rk)
	}
	return []*helperv1.RecordKey{{Id: rk[0].ID, Key: protocol.EnvironmentRecordKey(rk[0].Secret, string(readyEnv().UID))}}
}

// Every durable operation carries the environment's record keys and the generation its
// grant was admitted under.
func TestDurableRequestsCarryRecordKeys(t *testing.T) {
	k := newKeys(t)
	w := newWorld(t, k, setup{exec: func(_ context.Context, _ *world, req *helperv1.Request) (*helperv1.Response, error) {
		return defaultAnswer(req), nil
	}})
	_, err := w.h.StartCommand(callerCtx(t), &executionv1.StartCommandRequest{RunGrant: k.run(t, nil), Environment: testRef(), Command: argv("true"), Detach: true, CommandId: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.h.CommandStatus(callerCtx(t), &executionv1.CommandStatusRequest{RunGrant: k.run(t, nil), Environment: testRef(), CommandId: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	want := envRecordKeys(t, k)
	for _, c := range w.exec.recorded() {
		d := c.Request.GetDurable()
		if diff := cmp.Diff(want, d.GetRecordKeys(), protocmp.Transform()); diff != "" {
			t.Errorf("%T: record keys (-want +got):\n%s", d.GetOp(), diff)
		}
		if d.GetGrantGeneration() != testGen {
			t.Errorf("%T: grant generation %d, want %d", d.GetOp(), d.GetGrantGeneration(), testGen)
		}
	}
}

// A raised generation seen by the view becomes one revoke per environment in its executor:
// the new generation as the bound, the environment's keys; an environment without an
// executor is not called; a hostile answer is refused.
func TestRevokerAsksTheExecutor(t *testing.T) {
	k := newKeys(t)
	answer := func(req *helperv1.Request) *helperv1.Response {
		return &helperv1.Response{RequestId: req.GetRequestId(), Outcome: &helperv1.Response_Durable{Durable: &helperv1.DurableResult{
			Commands: []*executionv1.CommandInfo{{CommandId: "c1", State: executionv1.CommandState_COMMAND_STATE_CANCELLED,
				Result: &executionv1.CommandResult{State: executionv1.CommandState_COMMAND_STATE_CANCELLED}, Message: "cancelled: the environment's grants were revoked"}},
		}}}
	}
	w := newWorld(t, k, setup{exec: func(_ context.Context, _ *world, req *helperv1.Request) (*helperv1.Response, error) {
		return answer(req), nil
	}})
	rv := newRevoker(w.h, w.exec.Execute)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); rv.Run(ctx) }()
	defer func() { cancel(); <-done }()

	revoked := readyEnv()
	revoked.Status.GrantGeneration = testGen + 1
	noExecutor := readyEnv()
	noExecutor.Name = "other"
	noExecutor.Status.Pod = nil
	rv.Observe(noExecutor)
	rv.Observe(revoked)
	waitCalls(t, w, 1)
	time.Sleep(50 * time.Millisecond) // room for a wrong second call
	got := w.exec.recorded()
	if len(got) != 1 {
		t.Fatalf("%d executor calls, want 1", len(got))
	}
	want := &helperv1.Durable{
		Op:         &helperv1.Durable_Revoke{Revoke: &helperv1.DurableRevoke{BelowGeneration: testGen + 1}},
		RecordKeys: envRecordKeys(t, k), GrantGeneration: testGen + 1,
	}
	if diff := cmp.Diff(want, got[0].Request.GetDurable(), protocmp.Transform()); diff != "" {
		t.Errorf("the revoke (-want +got):\n%s", diff)
	}
	if got[0].Pod.UID != testPodUID {
		t.Errorf("sent to %v", got[0].Pod)
	}
	for name, res := range map[string]*helperv1.DurableResult{
		"output":      {Output: []*executionv1.OutputChunk{{Data: []byte("x")}}},
		"bad state":   {Commands: []*executionv1.CommandInfo{{CommandId: "c1", State: 99}}},
		"bad id":      {Commands: []*executionv1.CommandInfo{{CommandId: "../x", State: executionv1.CommandState_COMMAND_STATE_CANCELLED, Result: &executionv1.CommandResult{}}}},
		"nothing":     nil,
		"too many":    {Commands: make([]*executionv1.CommandInfo, 1000)},
		"more marked": {More: true},
	} {
		if err := checkRevoked(res, 10); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func waitCalls(t *testing.T, w *world, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(w.exec.recorded()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d executor calls within 5s, want %d", len(w.exec.recorded()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
