package integration_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// revokeBound is how long a detached command may outlive the revocation of its grants
// (docs/commands.md "Revocation"): the gateways' observation (p99 under a second), one exec
// into the executor, the helper's 2 s grace and the reaping, with room for a loaded machine.
const revokeBound = 10 * time.Second

// statOf reads a process's parent and start time from /proc; ok is false once it is gone or
// a zombie.
func statOf(pid int) (ppid int, startTicks uint64, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	startTicks, _ = strconv.ParseUint(f[19], 10, 64)
	return ppid, startTicks, true
}

// onlyProcessWith is the one live process whose command line holds token.
func onlyProcessWith(t *testing.T, token string) int {
	t.Helper()
	var pids []int
	clustertest.Eventually(t, 10*time.Second, "the command runs", func() bool {
		pids = processesWith(t, token)
		return len(pids) == 1
	})
	return pids[0]
}

// A revocation ends the detached commands started under the grants it revoked — their
// supervisors gone from the node, found by the node's process table with no call made after
// the revoke — and records them CANCELLED with the revocation as the reason; through every
// gateway, each ending them once.
func TestRevocationEndsDetachedCommands(t *testing.T) {
	sys := startSystem(t, 2)
	admin := sys.dial(t, "admin", 1)
	s := ensureReady(t, sys.dial(t, "caller", 0), "alice", "conv-detached")
	token := survivorToken()
	ctx := callCtx(t)
	if _, err := s.api.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: s.runG, Environment: s.envRef, Detach: true, CommandId: "job",
		Command: shell("sleep 300; : " + token)}); err != nil {
		t.Fatal(err)
	}
	command := onlyProcessWith(t, token)
	supervisor, _, ok := statOf(command)
	if !ok {
		t.Fatal("the command's parent is not readable")
	}
	if cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(supervisor) + "/cmdline"); !bytes.HasPrefix(cmdline, []byte("execplane-helper-supervisor\x00")) {
		t.Fatalf("the command's parent is %q, not its supervisor", cmdline)
	}

	env := s.latest(t)
	revoked := time.Now()
	if _, err := admin.RevokeEnvironment(ctx, &executionv1.RevokeEnvironmentRequest{OperationId: op(), Environment: s.envRef,
		Preconditions: &executionv1.AdminPreconditions{GrantGeneration: ptr(env.GetGrantGeneration())}, Reason: "leaked grant"}); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	// No call from here on until both are gone: the gateways do it on their own.
	clustertest.Eventually(t, revokeBound, "the revoked command and its supervisor are gone from the node", func() bool {
		_, _, supervisorLives := statOf(supervisor)
		return len(processesWith(t, token)) == 0 && !supervisorLives
	})
	t.Logf("the detached command and its supervisor were gone %s after the revoke", time.Since(revoked).Round(time.Millisecond))

	s.latest(t)
	s.acquire(t, "run-2")
	st, err := s.api.CommandStatus(callCtx(t), &executionv1.CommandStatusRequest{RunGrant: s.runG, Environment: s.envRef, CommandId: "job"})
	if err != nil {
		t.Fatal(err)
	}
	c := st.GetCommand()
	if c.GetState() != executionv1.CommandState_COMMAND_STATE_CANCELLED || !strings.Contains(c.GetMessage(), "revoked") || c.GetUnverified() {
		t.Fatalf("the revoked command's record: %v", c)
	}
	// Each gateway asked once (the helper's revoke is idempotent: both may have signalled
	// the command while it was in its grace; it ended once, as its one record says).
	var asked, ended float64
	clustertest.Eventually(t, revokeBound, "each gateway asked its executor once", func() bool {
		asked, ended = 0, 0
		for _, g := range sys.gateways {
			asked += g.metric(t, `execplane_gateway_command_revocations_total{outcome="ok"}`)
			ended += g.metric(t, "execplane_gateway_commands_revoked_total")
		}
		return asked >= 2
	})
	if ended < 1 || ended > 2 {
		t.Fatalf("commands ended by the revocations: %v, want 1 or 2 (one command, seen by up to two gateways)", ended)
	}
}

// plant writes a record file into the workspace's command records, as a command of the
// workload can.
func plant(t *testing.T, s *session, id string, rec *helperv1.CommandRecord) {
	t.Helper()
	data, err := proto.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	spec := shell("mkdir -p .execplane/commands/" + id + " && cat > .execplane/commands/" + id + "/record")
	spec.Stdin = data
	if r, err := s.command(callCtx(t), spec); err != nil || r.GetExitCode() != 0 {
		t.Fatalf("planting %s: %v %v", id, r, err)
	}
}

// What the workload writes into its command records is never taken for a supervisor's: a
// planted "succeeded" record does not answer a start of its id (the id is taken, nothing
// runs); a planted record naming another process as the supervisor does not make a cancel
// signal it; a sealed record it alters answers DATA_LOSS.
func TestRecordsTheWorkloadWritesAreRefused(t *testing.T) {
	sys := startSystem(t, 1)
	s := ensureReady(t, sys.dial(t, "caller", 0), "alice", "conv-planted")
	ctx := callCtx(t)

	succeeded := &executionv1.CommandResult{State: executionv1.CommandState_COMMAND_STATE_SUCCEEDED}
	plant(t, s, "planted", &helperv1.CommandRecord{Ended: true, Info: &executionv1.CommandInfo{CommandId: "planted",
		State: executionv1.CommandState_COMMAND_STATE_SUCCEEDED, Result: succeeded, StartedAt: timestamppb.Now(), Detached: true}})
	_, err := s.api.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: s.runG, Environment: s.envRef, Detach: true, CommandId: "planted",
		Command: shell("touch ran")})
	wantCode(t, "a start over a planted record", err, codes.Aborted, "OPERATION_ID_REUSED")
	_, err = s.files(ctx, read("ran"))
	wantCode(t, "what the refused start would have written", err, codes.NotFound, "NOT_FOUND")
	st, err := s.api.CommandStatus(ctx, &executionv1.CommandStatusRequest{RunGrant: s.runG, Environment: s.envRef, CommandId: "planted"})
	if err != nil || !st.GetCommand().GetUnverified() {
		t.Fatalf("the planted record's status: %v %v", st, err)
	}

	// A victim: a live process of the workload, named as a planted record's supervisor.
	token := survivorToken()
	if _, err := s.api.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: s.runG, Environment: s.envRef, Detach: true, CommandId: "victim",
		Command: shell("sleep 300; : " + token)}); err != nil {
		t.Fatal(err)
	}
	victim := onlyProcessWith(t, token)
	_, ticks, _ := statOf(victim)
	ns, err := os.Readlink("/proc/" + strconv.Itoa(victim) + "/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	plant(t, s, "forged", &helperv1.CommandRecord{Info: &executionv1.CommandInfo{CommandId: "forged",
		State: executionv1.CommandState_COMMAND_STATE_RUNNING, StartedAt: timestamppb.Now(), Detached: true},
		Supervisor: &helperv1.Supervisor{Pid: int32(victim), StartTicks: ticks, PidNamespace: ns}, Pgid: int32(victim)})
	_, err = s.api.CancelCommand(ctx, &executionv1.CancelCommandRequest{RunGrant: s.runG, Environment: s.envRef, CommandId: "forged", Grace: durationpb.New(0)})
	wantCode(t, "a cancel of a planted running record", err, codes.DataLoss, "RECORD_UNVERIFIED")
	time.Sleep(time.Second)
	if _, _, ok := statOf(victim); !ok {
		t.Fatal("the process a planted record named was signalled")
	}
	if _, _, ok := statOf(1); !ok {
		t.Fatal("PID 1 is gone")
	}

	// A sealed record the workload alters: refused, whatever it says.
	if _, err := s.api.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: s.runG, Environment: s.envRef, Detach: true, CommandId: "real",
		Command: shell("exit 3")}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 10*time.Second, "the real command ended", func() bool {
		st, err := s.api.CommandStatus(ctx, &executionv1.CommandStatusRequest{RunGrant: s.runG, Environment: s.envRef, CommandId: "real"})
		return err == nil && st.GetCommand().GetState() == executionv1.CommandState_COMMAND_STATE_FAILED && !st.GetCommand().GetUnverified()
	})
	if r, err := s.command(ctx, shell(`f=.execplane/commands/real/record; n=$(wc -c < $f); printf X | dd of=$f bs=1 seek=$((n/2)) conv=notrunc 2>/dev/null`)); err != nil || r.GetExitCode() != 0 {
		t.Fatalf("altering the record: %v %v", r, err)
	}
	_, err = s.api.CommandStatus(ctx, &executionv1.CommandStatusRequest{RunGrant: s.runG, Environment: s.envRef, CommandId: "real"})
	wantCode(t, "the status of an altered record", err, codes.DataLoss, "RECORD_UNVERIFIED")

	c, err := s.api.CancelCommand(context.Background(), &executionv1.CancelCommandRequest{RunGrant: s.runG, Environment: s.envRef, CommandId: "victim", Grace: durationpb.New(0)})
	if err != nil || c.GetCommand().GetState() != executionv1.CommandState_COMMAND_STATE_CANCELLED {
		t.Fatalf("cancelling the victim, a real command: %v %v", c, err)
	}
}
