package helper_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/precondition"
	"github.com/execplane/execplane/internal/helper/spool"
	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// envKeys are an environment's record keys as a gateway gives them.
var envKeys = []*helperv1.RecordKey{{Id: "k1", Key: bytes.Repeat([]byte{7}, protocol.RecordKeyBytes)}}

// sealedReq gives a durable request the environment's keys and a grant generation.
func sealedReq(req *helperv1.Request, gen uint64) *helperv1.Request {
	req.GetDurable().RecordKeys = envKeys
	req.GetDurable().GrantGeneration = gen
	return req
}

func commandDir(t *testing.T, root, id string) int {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, ".execplane/commands", id), 0o700); err != nil {
		t.Fatal(err)
	}
	dir, err := unix.Open(filepath.Join(root, ".execplane/commands", id), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(dir) })
	return dir
}

// planted is the record a workload writes to pass for a command that succeeded, or that
// runs under a supervisor of its choosing.
func planted(id string, sup *helperv1.Supervisor) *helperv1.CommandRecord {
	info := &executionv1.CommandInfo{CommandId: id, StartedAt: timestamppb.Now(), Detached: true}
	if sup == nil {
		info.State = executionv1.CommandState_COMMAND_STATE_SUCCEEDED
		info.Result = &executionv1.CommandResult{State: executionv1.CommandState_COMMAND_STATE_SUCCEEDED}
	} else {
		info.State = executionv1.CommandState_COMMAND_STATE_RUNNING
	}
	return &helperv1.CommandRecord{Info: info, Supervisor: sup, Ended: sup == nil}
}

// A record the workload plants or alters is never taken for its supervisor's: a start of
// its id is refused (the id is taken), a status of an altered record is DATA_LOSS, and a
// cancel never signals the process it names.
func TestPlantedAndAlteredRecordsAreRefused(t *testing.T) {
	root := t.TempDir()

	// Planted, unsealed, "succeeded": the start does not answer it, nor run.
	spoolDir := commandDir(t, root, "planted")
	if err := spool.WriteRecord(spoolDir, planted("planted", nil), nil); err != nil {
		t.Fatal(err)
	}
	start := sealedReq(startReq("planted", "touch ran"), 1)
	if got := durableCode(t, root, start); got != helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS {
		t.Fatalf("start over a planted record = %v, want ALREADY_EXISTS", got)
	}
	if _, err := os.Stat(filepath.Join(root, "ran")); !os.IsNotExist(err) {
		t.Fatalf("the command ran over a planted record: %v", err)
	}
	// An unsealed record reads as unverified (an older helper's look the same).
	res, _ := durableOK(t, root, sealedReq(statusReq("planted", nil, 0), 1))
	if !res.GetCommands()[0].GetUnverified() {
		t.Fatalf("a planted record answered as verified: %v", res.GetCommands()[0])
	}

	// Sealed under another key (the workload's guess): DATA_LOSS, and the start is refused.
	forged := commandDir(t, root, "forged")
	other := protocol.CommandRecordKey(&helperv1.RecordKey{Id: "k1", Key: bytes.Repeat([]byte{8}, protocol.RecordKeyBytes)}, "forged")
	if err := spool.WriteRecord(forged, planted("forged", nil), other); err != nil {
		t.Fatal(err)
	}
	for _, req := range []*helperv1.Request{statusReq("forged", nil, 0), followReq("forged", nil), cancelReq("forged", 0)} {
		if got := durableCode(t, root, sealedReq(req, 1)); got != helperv1.ErrorCode_ERROR_CODE_DATA_LOSS {
			t.Fatalf("%v of a forged record = %v, want DATA_LOSS", req.GetDurable().GetOp(), got)
		}
	}
	if got := durableCode(t, root, sealedReq(startReq("forged", "touch ran"), 1)); got != helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS {
		t.Fatalf("start over a forged record = %v, want ALREADY_EXISTS", got)
	}

	// A real command's record copied under another id does not verify there: the key is
	// bound to the id.
	durableOK(t, root, sealedReq(startReq("real", "echo hi"), 1))
	data, err := os.ReadFile(filepath.Join(root, ".execplane/commands/real/record"))
	if err != nil {
		t.Fatal(err)
	}
	commandDir(t, root, "copy")
	if err := os.WriteFile(filepath.Join(root, ".execplane/commands/copy/record"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := durableCode(t, root, sealedReq(statusReq("copy", nil, 0), 1)); got != helperv1.ErrorCode_ERROR_CODE_DATA_LOSS {
		t.Fatalf("status of a record copied from another id = %v, want DATA_LOSS", got)
	}

	// A planted running record naming a live process that is no supervisor of ours (the
	// container's PID 1 in a Pod): the cancel refuses and signals nothing.
	victim := exec.Command("sleep", "100")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = victim.Process.Kill(); _ = victim.Wait() })
	ns, _ := os.Readlink("/proc/self/ns/pid")
	sup := &helperv1.Supervisor{Pid: int32(victim.Process.Pid), StartTicks: startTicks(t, victim.Process.Pid), PidNamespace: ns}
	if err := spool.WriteRecord(commandDir(t, root, "pid1"), planted("pid1", sup), nil); err != nil {
		t.Fatal(err)
	}
	if got := durableCode(t, root, sealedReq(cancelReq("pid1", 0), 1)); got != helperv1.ErrorCode_ERROR_CODE_DATA_LOSS {
		t.Fatalf("cancel of a planted running record = %v, want DATA_LOSS", got)
	}
	if err := victim.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the process a planted record named was signalled: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if st := procState(victim.Process.Pid); st == 'Z' || st == 0 {
		t.Fatal("the process a planted record named was killed")
	}
	// The listing passes by what does not verify and marks what is unsealed.
	list, _ := durableOK(t, root, sealedReq(listReq(10), 1))
	seen := map[string]bool{}
	for _, c := range list.GetCommands() {
		seen[c.GetCommandId()] = c.GetUnverified()
	}
	if want := map[string]bool{"planted": true, "pid1": true, "real": false}; !equalMarks(seen, want) {
		t.Fatalf("listing = %v, want %v", seen, want)
	}
}

func equalMarks(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// startTicks is a process's start time as /proc gives it.
func startTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func procState(pid int) byte {
	data, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	return strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))[0][0]
}

// A revocation ends what earlier generations started — recorded CANCELLED with the
// revocation as its message, its supervisor gone — and leaves the current generation's
// commands running; a second revocation finds nothing left.
func TestRevokeEndsCommandsOfEarlierGenerations(t *testing.T) {
	root := t.TempDir()
	// The current generation's first: a start also ends what older generations started.
	durableOK(t, root, sealedReq(startReq("new", "sleep 100"), 2))
	durableOK(t, root, sealedReq(startReq("old", "sleep 100"), 1))
	revoke := func() *helperv1.DurableResult {
		res, _ := durableOK(t, root, sealedReq(durableReq(&helperv1.Durable{Op: &helperv1.Durable_Revoke{Revoke: &helperv1.DurableRevoke{BelowGeneration: 2}}}), 2))
		return res
	}
	oldDir := commandDir(t, root, "old")
	rec, sealed, err := spool.ReadRecord(oldDir, []*helperv1.RecordKey{protocol.CommandRecordKey(envKeys[0], "old")})
	if err != nil || !sealed {
		t.Fatalf("the record of old: sealed %v, %v", sealed, err)
	}
	supervisor := int(rec.GetSupervisor().GetPid())
	res := revoke()
	if len(res.GetCommands()) != 1 || res.GetCommands()[0].GetCommandId() != "old" {
		t.Fatalf("revoked %v, want old only", res.GetCommands())
	}
	old := res.GetCommands()[0]
	if old.GetState() != executionv1.CommandState_COMMAND_STATE_CANCELLED || !strings.Contains(old.GetMessage(), "revoked") || old.GetUnverified() {
		t.Fatalf("the revoked command's record: %v", old)
	}
	status, _ := durableOK(t, root, sealedReq(statusReq("new", nil, 0), 2))
	if got := status.GetCommands()[0].GetState(); got != executionv1.CommandState_COMMAND_STATE_RUNNING {
		t.Fatalf("the current generation's command is %v", got)
	}
	if again := revoke(); len(again.GetCommands()) != 0 {
		t.Fatalf("a second revoke ended %v", again.GetCommands())
	}
	// No supervisor of "old" is left (its record named it; the kernel no longer has it).
	clustertest.Eventually(t, 5*time.Second, "the revoked command's supervisor is gone", func() bool {
		st := procState(supervisor)
		return st == 0 || st == 'Z'
	})
	// A start under a later generation ends the earlier one's commands on its way, should
	// no gateway have revoked them.
	durableOK(t, root, sealedReq(startReq("third", "true"), 3))
	clustertest.Eventually(t, 5*time.Second, "a later start ended the earlier generation's command", func() bool {
		res, _ := durableOK(t, root, sealedReq(statusReq("new", nil, 0), 3))
		return res.GetCommands()[0].GetState() == executionv1.CommandState_COMMAND_STATE_CANCELLED
	})
}

// Execute-only is what keeps the keys: run as a user of its own, a helper whose binary that
// user can read was dumpable from its exec — a process of that user may have opened its
// descriptors — and refuses the keys (records unsealed, answered unverified); installed
// 0111, the kernel made it not dumpable at exec, and it seals.
func TestKeysNeedAnExecuteOnlyHelper(t *testing.T) {
	if os.Geteuid() != 0 {
		precondition.Missing(t, "running as root, to run the helper as another user")
	}
	const uid = 65532
	data, err := os.ReadFile(helperBin)
	if err != nil {
		t.Fatal(err)
	}
	bins := t.TempDir()
	for _, d := range []string{bins, filepath.Dir(bins)} { // the user must reach in
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for mode, want := range map[os.FileMode]bool{0o111: true, 0o555: false} {
		bin := filepath.Join(bins, fmt.Sprintf("helper-%o", mode))
		if err := os.WriteFile(bin, data, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(bin, mode); err != nil {
			t.Fatal(err)
		}
		root := t.TempDir()
		if err := os.Chown(root, uid, uid); err != nil {
			t.Fatal(err)
		}
		o := callOptions{bin: bin, credential: &syscall.Credential{Uid: uid, Gid: uid}}
		res := call(t, root, sealedReq(startReq("c", "true"), 1), o)
		if e := res.resp.GetError(); e != nil {
			t.Fatalf("mode %o: start refused: %v", mode, e)
		}
		var st *helperv1.Response
		for range 100 {
			st = call(t, root, sealedReq(statusReq("c", nil, 0), 1), o).resp
			if st.GetDurable().GetCommands()[0].GetState() != executionv1.CommandState_COMMAND_STATE_RUNNING {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got := !st.GetDurable().GetCommands()[0].GetUnverified(); got != want {
			t.Errorf("mode %o: the record proved %v, want %v (%v)", mode, got, want, st)
		}
		dir := commandDir(t, root, "c")
		_, sealed, err := spool.ReadRecord(dir, []*helperv1.RecordKey{protocol.CommandRecordKey(envKeys[0], "c")})
		if err != nil || sealed != want {
			t.Errorf("mode %o: the record file sealed %v (%v), want %v", mode, sealed, err, want)
		}
	}
}

// A revoked command whose supervisor does not end it within the grace — stopped by the
// workload, here — is killed with its supervisor and recorded CANCELLED by the revoke.
func TestRevokeKillsWhatOutlivesItsGrace(t *testing.T) {
	root := t.TempDir()
	durableOK(t, root, sealedReq(startReq("stuck", "sleep 100"), 1))
	rec, _, err := spool.ReadRecord(commandDir(t, root, "stuck"), []*helperv1.RecordKey{protocol.CommandRecordKey(envKeys[0], "stuck")})
	if err != nil {
		t.Fatal(err)
	}
	supervisor := int(rec.GetSupervisor().GetPid())
	if err := syscall.Kill(supervisor, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	res, _ := durableOK(t, root, sealedReq(durableReq(&helperv1.Durable{Op: &helperv1.Durable_Revoke{Revoke: &helperv1.DurableRevoke{BelowGeneration: 2}}}), 2))
	if len(res.GetCommands()) != 1 {
		t.Fatalf("revoked %v", res.GetCommands())
	}
	c := res.GetCommands()[0]
	if c.GetState() != executionv1.CommandState_COMMAND_STATE_CANCELLED || !strings.Contains(c.GetMessage(), "killed after its grace") || c.GetUnverified() {
		t.Fatalf("the stopped command after the revoke: %v", c)
	}
	t.Logf("ended %s after the revoke", time.Since(began).Round(time.Millisecond))
	clustertest.Eventually(t, 5*time.Second, "the stopped supervisor is gone", func() bool {
		st := procState(supervisor)
		return st == 0 || st == 'Z'
	})
	status, _ := durableOK(t, root, sealedReq(statusReq("stuck", nil, 0), 2))
	if got := status.GetCommands()[0]; got.GetState() != executionv1.CommandState_COMMAND_STATE_CANCELLED || got.GetUnverified() {
		t.Fatalf("the record after the revoke: %v", got)
	}
}
