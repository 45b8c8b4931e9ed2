package helper_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/helper/spool"
	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// durableLimits are small bounds, so that the caps are observable.
func durableLimits() *helperv1.Limits {
	l := limits()
	l.MaxSpoolBytes = 1 << 20
	l.MaxDetached = 3
	l.MaxDetachedMillis = uint64(24 * time.Hour / time.Millisecond) // past the foreground ceiling

	l.RetainRecords = 50
	l.RetainMillis = uint64(time.Hour / time.Millisecond)
	return l
}

func durableReq(op *helperv1.Durable) *helperv1.Request {
	return &helperv1.Request{RequestId: "d", Limits: durableLimits(), Operation: &helperv1.Request_Durable{Durable: op}}
}

func startReq(id, script string) *helperv1.Request {
	return durableReq(&helperv1.Durable{Op: &helperv1.Durable_Start{Start: &helperv1.DurableStart{
		CommandId: id, RunId: "run-1", Epoch: 7, Detached: true,
		Command: &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Shell{Shell: script}},
	}}})
}

func followReq(id string, from *executionv1.OutputCursor) *helperv1.Request {
	return durableReq(&helperv1.Durable{Op: &helperv1.Durable_Follow{Follow: &helperv1.DurableFollow{CommandId: id, From: from, MaxBytes: 1 << 20, WaitMillis: 2000}}})
}

// followAll follows a command from the cursor until its end, as the gateway does: one long
// poll after another from where the last answer ended. It returns the last answer and
// every chunk.
func followAll(t *testing.T, root string, id string, from *executionv1.OutputCursor, limits func(*helperv1.Limits)) (*helperv1.DurableResult, []*executionv1.OutputChunk) {
	t.Helper()
	cursor := &executionv1.OutputCursor{Stdout: from.GetStdout(), Stderr: from.GetStderr()}
	var chunks []*executionv1.OutputChunk
	for range 10000 {
		req := followReq(id, cursor)
		if limits != nil {
			limits(req.Limits)
		}
		res, _ := durableOK(t, root, req)
		for _, c := range res.GetOutput() {
			chunks = append(chunks, c)
			end := c.GetOffset() + uint64(len(c.GetData()))
			if c.GetStream() == executionv1.OutputStream_OUTPUT_STREAM_STDERR {
				cursor.Stderr = end
			} else {
				cursor.Stdout = end
			}
		}
		if res.GetComplete() {
			return res, chunks
		}
	}
	t.Fatal("the follow never completed")
	return nil, nil
}

func statusReq(id string, from *executionv1.OutputCursor, max uint64) *helperv1.Request {
	return durableReq(&helperv1.Durable{Op: &helperv1.Durable_Status{Status: &helperv1.DurableStatus{CommandId: id, From: from, MaxBytes: max}}})
}

func cancelReq(id string, grace time.Duration) *helperv1.Request {
	return durableReq(&helperv1.Durable{Op: &helperv1.Durable_Cancel{Cancel: &helperv1.DurableCancel{CommandId: id, GraceMillis: uint64(grace / time.Millisecond)}}})
}

func listReq(max uint32) *helperv1.Request {
	return durableReq(&helperv1.Durable{Op: &helperv1.Durable_List{List: &helperv1.DurableList{Max: max}}})
}

// durableOK runs one durable request and returns its result, failing on a refusal.
func durableOK(t *testing.T, root string, req *helperv1.Request) (*helperv1.DurableResult, []*executionv1.OutputChunk) {
	t.Helper()
	res := call(t, root, req, callOptions{})
	if e := res.resp.GetError(); e != nil {
		t.Fatalf("refused: %v %s", e.GetCode(), e.GetMessage())
	}
	if res.resp.GetDurable() == nil {
		t.Fatalf("no durable result: %v", res.resp)
	}
	return res.resp.GetDurable(), res.resp.GetDurable().GetOutput()
}

func durableCode(t *testing.T, root string, req *helperv1.Request) helperv1.ErrorCode {
	t.Helper()
	return call(t, root, req, callOptions{}).resp.GetError().GetCode()
}

// joined concatenates what chunks carried per stream, checking that each chunk starts where
// the previous one of its stream ended.
func joined(t *testing.T, chunks []*executionv1.OutputChunk, from *executionv1.OutputCursor) (stdout, stderr []byte) {
	t.Helper()
	at := map[executionv1.OutputStream]uint64{
		executionv1.OutputStream_OUTPUT_STREAM_STDOUT: from.GetStdout(),
		executionv1.OutputStream_OUTPUT_STREAM_STDERR: from.GetStderr(),
	}
	out := map[executionv1.OutputStream]*bytes.Buffer{
		executionv1.OutputStream_OUTPUT_STREAM_STDOUT: {},
		executionv1.OutputStream_OUTPUT_STREAM_STDERR: {},
	}
	for _, c := range chunks {
		if c.GetOffset()-c.GetSkipped() != at[c.GetStream()] {
			t.Fatalf("a %v chunk at %d (skipping %d) after %d", c.GetStream(), c.GetOffset(), c.GetSkipped(), at[c.GetStream()])
		}
		out[c.GetStream()].Write(c.GetData())
		at[c.GetStream()] = c.GetOffset() + uint64(len(c.GetData()))
	}
	return out[executionv1.OutputStream_OUTPUT_STREAM_STDOUT].Bytes(), out[executionv1.OutputStream_OUTPUT_STREAM_STDERR].Bytes()
}

// A detached command outlives the helper that started it; a follow from the start gets its
// output exactly and ends with the record of how it ended, which a later status repeats.
func TestDurableCommandOutlivesItsStartAndIsFollowed(t *testing.T) {
	root := t.TempDir()
	res, _ := durableOK(t, root, startReq("c1", "for i in 1 2 3; do echo line $i; sleep 0.1; done; echo oops >&2; exit 3"))
	info := res.GetCommands()[0]
	if info.GetState() != executionv1.CommandState_COMMAND_STATE_RUNNING || info.GetCommandId() != "c1" || info.GetRunId() != "run-1" || info.GetEpoch() != 7 {
		t.Fatalf("the start answered %v", info)
	}
	res, chunks := followAll(t, root, "c1", nil, nil)
	stdout, stderr := joined(t, chunks, nil)
	if diff := cmp.Diff("line 1\nline 2\nline 3\n", string(stdout)); diff != "" {
		t.Fatalf("stdout (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("oops\n", string(stderr)); diff != "" {
		t.Fatalf("stderr (-want +got):\n%s", diff)
	}
	end := res.GetCommands()[0]
	if end.GetState() != executionv1.CommandState_COMMAND_STATE_FAILED || end.GetResult().GetExitCode() != 3 || end.GetStdoutBytes() != 21 || end.GetStderrBytes() != 5 {
		t.Fatalf("the follow ended with %v", end)
	}
	// From the middle: only what comes after.
	res, _ = durableOK(t, root, statusReq("c1", &executionv1.OutputCursor{Stdout: 7, Stderr: 5}, 0))
	stdout, stderr = joined(t, res.GetOutput(), &executionv1.OutputCursor{Stdout: 7, Stderr: 5})
	if string(stdout) != "line 2\nline 3\n" || len(stderr) != 0 || res.GetCommands()[0].GetResult().GetReceipt() != end.GetResult().GetReceipt() {
		t.Fatalf("status from the middle: %q %q %v", stdout, stderr, res.GetCommands()[0])
	}
	if code := durableCode(t, root, statusReq("c1", &executionv1.OutputCursor{Stdout: 22}, 0)); code != helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
		t.Fatalf("a cursor past the end: %v", code)
	}
}

// The same start again answers the same command; the same id with another program is
// refused and changes nothing; an unknown id is NOT_FOUND for every operation.
func TestDurableStartIsIdempotentAndIdsAreExact(t *testing.T) {
	root := t.TempDir()
	first, _ := durableOK(t, root, startReq("same", "echo once >> ran; sleep 0.2"))
	again, _ := durableOK(t, root, startReq("same", "echo once >> ran; sleep 0.2"))
	if first.GetCommands()[0].GetStartedAt().AsTime() != again.GetCommands()[0].GetStartedAt().AsTime() {
		t.Fatalf("a second command was started: %v then %v", first.GetCommands()[0], again.GetCommands()[0])
	}
	if code := durableCode(t, root, startReq("same", "echo other")); code != helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS {
		t.Fatalf("another program under the id: %v", code)
	}
	followAll(t, root, "same", nil, nil)
	if b, _ := os.ReadFile(filepath.Join(root, "ran")); string(b) != "once\n" {
		t.Fatalf("the command ran %q", b)
	}
	for name, req := range map[string]*helperv1.Request{
		"status": statusReq("nope", nil, 0), "follow": followReq("nope", nil), "cancel": cancelReq("nope", 0),
	} {
		if code := durableCode(t, root, req); code != helperv1.ErrorCode_ERROR_CODE_NOT_FOUND {
			t.Errorf("%s of an unknown id: %v", name, code)
		}
	}
	if code := durableCode(t, root, startReq("../x", "true")); code != helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT {
		t.Fatalf("a path as id: %v", code)
	}
}

// A replay-only start answers the command a start of the same id, program and run began,
// and never begins one: without a record it is NOT_FOUND and leaves nothing.
func TestDurableReplayOnlyStartBeginsNothing(t *testing.T) {
	root := t.TempDir()
	replay := func(id, script, run string) *helperv1.Request {
		req := startReq(id, script)
		st := req.GetDurable().GetStart()
		st.ReplayOnly, st.RunId = true, run
		return req
	}
	if code := durableCode(t, root, replay("r1", "echo once >> ran", "run-1")); code != helperv1.ErrorCode_ERROR_CODE_NOT_FOUND {
		t.Fatalf("a replay of a command never started: %v, want NOT_FOUND", code)
	}
	if listed, _ := durableOK(t, root, listReq(10)); len(listed.GetCommands()) != 0 {
		t.Fatalf("a refused replay left commands: %v", listed.GetCommands())
	}
	started, _ := durableOK(t, root, startReq("r1", "echo once >> ran"))
	again, _ := durableOK(t, root, replay("r1", "echo once >> ran", "run-1"))
	if !proto.Equal(started.GetCommands()[0].GetStartedAt(), again.GetCommands()[0].GetStartedAt()) {
		t.Fatalf("the replay answered %v, the start %v", again.GetCommands()[0], started.GetCommands()[0])
	}
	if code := durableCode(t, root, replay("r1", "echo once >> ran", "run-2")); code != helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS {
		t.Fatalf("a replay of another run's start: %v, want ALREADY_EXISTS", code)
	}
	followAll(t, root, "r1", nil, nil)
	if b, _ := os.ReadFile(filepath.Join(root, "ran")); string(b) != "once\n" {
		t.Fatalf("the command ran %q", b)
	}

	// Its working directory gone since: the replay needs none, and answers the command.
	must(t, os.Mkdir(filepath.Join(root, "sub"), 0o755))
	inSub := func(req *helperv1.Request) *helperv1.Request {
		req.GetDurable().GetStart().Command.WorkingDirectory = []byte("sub")
		return req
	}
	durableOK(t, root, inSub(startReq("r2", "echo twice >> ../ran")))
	followAll(t, root, "r2", nil, nil)
	must(t, os.Remove(filepath.Join(root, "sub")))
	if res, _ := durableOK(t, root, inSub(replay("r2", "echo twice >> ../ran", "run-1"))); res.GetCommands()[0].GetState() != executionv1.CommandState_COMMAND_STATE_SUCCEEDED {
		t.Fatalf("the replay of a command whose directory is gone: %v", res.GetCommands()[0])
	}

	// Its record retired (retention keeps one finished record: r3's start retires r1 and
	// r2): the replay begins nothing.
	retainOne := func(req *helperv1.Request) *helperv1.Request {
		req.Limits.RetainRecords = 1
		return req
	}
	durableOK(t, root, retainOne(startReq("r3", "true")))
	followAll(t, root, "r3", nil, nil)
	if code := durableCode(t, root, retainOne(replay("r1", "echo once >> ran", "run-1"))); code != helperv1.ErrorCode_ERROR_CODE_NOT_FOUND {
		t.Fatalf("a replay of a retired command: %v, want NOT_FOUND", code)
	}

	// A directory without a record (a start that died before its first write): nothing.
	must(t, os.Mkdir(filepath.Join(root, ".execplane/commands/r4"), 0o700))
	if code := durableCode(t, root, replay("r4", "echo once >> ran", "run-1")); code != helperv1.ErrorCode_ERROR_CODE_NOT_FOUND {
		t.Fatalf("a replay of a start that died before its record: %v, want NOT_FOUND", code)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "ran")); string(b) != "once\ntwice\n" {
		t.Fatalf("the commands ran %q", b)
	}
}

// Beyond the cap of running commands a start is refused and leaves nothing; once one ends,
// a start is accepted again.
func TestDurableStartsBeyondTheCapAreRefused(t *testing.T) {
	root := t.TempDir()
	for _, id := range []string{"a", "b", "c"} {
		durableOK(t, root, startReq(id, "sleep 30"))
	}
	if code := durableCode(t, root, startReq("d", "sleep 30")); code != helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED {
		t.Fatalf("a fourth: %v", code)
	}
	if _, err := os.Stat(filepath.Join(root, ".execplane/commands/d")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused start left %v", err)
	}
	for _, id := range []string{"a", "b", "c"} {
		durableOK(t, root, cancelReq(id, 0))
	}
	durableOK(t, root, startReq("d", "true"))
	list, _ := durableOK(t, root, listReq(10))
	var ids []string
	for _, c := range list.GetCommands() {
		ids = append(ids, c.GetCommandId())
	}
	if diff := cmp.Diff([]string{"d", "c", "b", "a"}, ids); diff != "" {
		t.Fatalf("the list, newest first (-want +got):\n%s", diff)
	}
}

// A cancel sends SIGTERM, waits the grace, then kills everything the command started —
// also what ignored the SIGTERM and what left the group — and records CANCELLED.
func TestDurableCancelLeavesNoSurvivor(t *testing.T) {
	root := t.TempDir()
	res, _ := durableOK(t, root, startReq("k", `trap "" TERM; setsid sh -c 'trap "" TERM; echo $$ > escaped; sleep 100' & echo $$ > main; sleep 100 & wait`))
	_ = res
	var pids []int
	clustertest.Eventually(t, 5*time.Second, "both processes recorded their pids", func() bool {
		pids = pids[:0]
		for _, f := range []string{"main", "escaped"} {
			b, err := os.ReadFile(filepath.Join(root, f))
			if err != nil || len(bytes.TrimSpace(b)) == 0 {
				return false
			}
			var pid int
			for _, c := range bytes.TrimSpace(b) {
				pid = pid*10 + int(c-'0')
			}
			pids = append(pids, pid)
		}
		return true
	})
	began := time.Now()
	res, _ = durableOK(t, root, cancelReq("k", 300*time.Millisecond))
	took := time.Since(began)
	info := res.GetCommands()[0]
	if info.GetState() != executionv1.CommandState_COMMAND_STATE_CANCELLED {
		t.Fatalf("cancel answered %v", info)
	}
	if took > 300*time.Millisecond+time.Second {
		t.Fatalf("the cancel took %s", took)
	}
	for _, pid := range pids {
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			t.Fatalf("process %d survived the cancel (%v)", pid, err)
		}
	}
	// Cancelling an ended command answers its record.
	again, _ := durableOK(t, root, cancelReq("k", 0))
	if again.GetCommands()[0].GetResult().GetReceipt() != info.GetResult().GetReceipt() {
		t.Fatalf("a second cancel changed the record: %v", again.GetCommands()[0])
	}
}

// A command whose supervisor is gone without a final record is recorded ABANDONED by the
// next helper that looks, its output kept.
func TestDurableCommandWithoutSupervisorIsAbandoned(t *testing.T) {
	root := t.TempDir()
	durableOK(t, root, startReq("lost", "echo before; sleep 100"))
	dir, err := unix.Open(filepath.Join(root, ".execplane/commands/lost"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dir)
	rec, _, err := spool.ReadRecord(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 5*time.Second, "the output is spooled", func() bool {
		end, _ := spool.End(dir, executionv1.OutputStream_OUTPUT_STREAM_STDOUT)
		return end == 7
	})
	// As a replaced Pod's runtime does: everything goes at once — the supervisor first, so
	// that it cannot see its command die and record the end in between (a loaded machine
	// gives it the time).
	_ = unix.Kill(int(rec.GetSupervisor().GetPid()), unix.SIGKILL)
	_ = unix.Kill(-int(rec.GetPgid()), unix.SIGKILL)
	clustertest.Eventually(t, 5*time.Second, "the supervisor is gone", func() bool {
		return unix.Kill(int(rec.GetSupervisor().GetPid()), 0) != nil
	})
	res, _ := durableOK(t, root, statusReq("lost", nil, 0))
	info := res.GetCommands()[0]
	if info.GetState() != executionv1.CommandState_COMMAND_STATE_ABANDONED || !strings.Contains(info.GetMessage(), "supervisor") {
		t.Fatalf("status answered %v", info)
	}
	if stdout, _ := joined(t, res.GetOutput(), nil); string(stdout) != "before\n" {
		t.Fatalf("the output kept: %q", stdout)
	}
}

// A stream longer than the spool's cap keeps its head and its tail, counts every byte, and
// a follow from the start, once it ended, says what it skipped. (A follow under way while
// the command writes may get more: it reads segments before they are dropped.)
func TestDurableSpoolKeepsHeadAndTail(t *testing.T) {
	root := t.TempDir()
	req := startReq("big", "head -c 8388608 /dev/zero | tr '\\0' x; printf END")
	req.Limits.MaxSpoolBytes = 256 << 10
	durableOK(t, root, req)
	clustertest.Eventually(t, 20*time.Second, "the command ended", func() bool {
		res, _ := durableOK(t, root, statusReq("big", nil, 1))
		return res.GetCommands()[0].GetState() != executionv1.CommandState_COMMAND_STATE_RUNNING
	})
	res, chunks := followAll(t, root, "big", nil, func(l *helperv1.Limits) { l.MaxSpoolBytes = 256 << 10 })
	info := res.GetCommands()[0]
	if info.GetStdoutBytes() != 8<<20+3 || !info.GetResult().GetStdout().GetTruncated() {
		t.Fatalf("the record: %v", info)
	}
	stdout, _ := joined(t, chunks, nil)
	var skipped uint64
	for _, c := range chunks {
		skipped += c.GetSkipped()
	}
	if uint64(len(stdout))+skipped != 8<<20+3 || !bytes.HasSuffix(stdout, []byte("END")) || len(stdout) < 256<<10 || len(stdout) > 256<<10+2*32<<10 {
		t.Fatalf("kept %d bytes, skipped %d", len(stdout), skipped)
	}
}

func sessionRequest(id string, req *helperv1.Request) *helperv1.SessionFrame {
	req.Version, req.RequestId = helperv1.ProtocolVersion_PROTOCOL_VERSION_2, id
	return &helperv1.SessionFrame{Frame: &helperv1.SessionFrame_Request{Request: req}}
}

// A detached command started through a session survives the session's end, which kills
// everything else it started; a command started attached is cancelled by its supervisor
// once nobody has followed it for its attach time.
func TestDurableCommandsThroughASession(t *testing.T) {
	root := t.TempDir()
	in, out, wait := rawSession(t, root)
	tied := startReq("tied", "sleep 100")
	tied.GetDurable().GetStart().Detached, tied.GetDurable().GetStart().AttachMillis = false, 1000
	for _, f := range []*helperv1.SessionFrame{
		protocol.NewHello(4, protocol.DefaultChunkBytes, time.Second),
		sessionRequest("1", startReq("kept", "sleep 0.5; echo survived")),
		sessionRequest("2", tied),
	} {
		if err := protocol.WriteFrame(in, f, protocol.MaxRequestBytes); err != nil {
			t.Fatal(err)
		}
	}
	for answered := map[string]bool{}; len(answered) < 2; { // in either order
		var f helperv1.Frame
		if err := protocol.ReadFrame(out, &f, protocol.MaxResponseBytes); err != nil {
			t.Fatalf("reading the session: %v", err)
		}
		if resp := f.GetResponse(); resp != nil {
			if resp.GetDurable().GetCommands()[0].GetState() != executionv1.CommandState_COMMAND_STATE_RUNNING {
				t.Fatalf("start %s answered %v", resp.GetRequestId(), resp)
			}
			answered[resp.GetRequestId()] = true
		}
	}
	in.Close() // the session ends; its supervisors go on
	_, _ = io.Copy(io.Discard, out)
	if err := wait(); err != nil {
		t.Fatalf("session exit: %v", err)
	}
	res, chunks := followAll(t, root, "kept", nil, nil)
	if stdout, _ := joined(t, chunks, nil); string(stdout) != "survived\n" || res.GetCommands()[0].GetState() != executionv1.CommandState_COMMAND_STATE_SUCCEEDED {
		t.Fatalf("the detached command after the session: %q %v", stdout, res.GetCommands()[0])
	}
	clustertest.Eventually(t, 5*time.Second, "the unfollowed attached command is cancelled", func() bool {
		res, _ := durableOK(t, root, statusReq("tied", nil, 0))
		return res.GetCommands()[0].GetState() == executionv1.CommandState_COMMAND_STATE_CANCELLED
	})
}

// An attached command lives as long as it is followed — past its attach time, as long as
// every follow comes within it.
func TestDurableAttachedCommandLivesWhileFollowed(t *testing.T) {
	root := t.TempDir()
	req := startReq("watched", "sleep 2.5; echo done")
	req.GetDurable().GetStart().Detached, req.GetDurable().GetStart().AttachMillis = false, 1000
	durableOK(t, root, req)
	var cursor *executionv1.OutputCursor
	for range 100 {
		f := followReq("watched", cursor)
		f.GetDurable().GetFollow().WaitMillis = 300
		res, _ := durableOK(t, root, f)
		if stdout, _ := joined(t, res.GetOutput(), cursor); len(stdout) > 0 {
			cursor = &executionv1.OutputCursor{Stdout: uint64(len(stdout))}
		}
		if res.GetComplete() {
			if info := res.GetCommands()[0]; info.GetState() != executionv1.CommandState_COMMAND_STATE_SUCCEEDED || info.GetStdoutBytes() != 5 {
				t.Fatalf("the followed command ended %v", info)
			}
			return
		}
	}
	t.Fatal("the follow never completed")
}

// vmHWM is a process's peak resident memory, from /proc.
func vmHWM(pid int) (uint64, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			n, err := strconv.ParseUint(f[0], 10, 64)
			return n << 10, err == nil
		}
	}
	return 0, false
}

// 1 GiB of output under the default 64 MiB spool: the spool on disk stays within the cap
// and two segments, the head and the tail are kept, the total is exact, and the supervisor's
// memory stays small whatever the command writes.
func TestDurableGigabyteOfOutputIsBounded(t *testing.T) {
	const total = 1 << 30
	root := t.TempDir()
	req := startReq("gig", "head -c 1073741824 /dev/zero | tr '\\0' x; printf END")
	req.Limits.MaxSpoolBytes = 64 << 20
	durableOK(t, root, req)
	dir, err := unix.Open(filepath.Join(root, ".execplane/commands/gig"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dir)
	rec, _, err := spool.ReadRecord(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	sup := int(rec.GetSupervisor().GetPid())
	var peak uint64
	var info *executionv1.CommandInfo
	clustertest.Eventually(t, 2*time.Minute, "the command ended", func() bool {
		if m, ok := vmHWM(sup); ok {
			peak = max(peak, m)
		}
		res, _ := durableOK(t, root, statusReq("gig", nil, 1))
		info = res.GetCommands()[0]
		return info.GetState() != executionv1.CommandState_COMMAND_STATE_RUNNING
	})
	if info.GetState() != executionv1.CommandState_COMMAND_STATE_SUCCEEDED || info.GetStdoutBytes() != total+3 || !info.GetResult().GetStdout().GetTruncated() {
		t.Fatalf("the record: %v", info)
	}
	var onDisk int64
	_ = filepath.WalkDir(filepath.Join(root, ".execplane/commands/gig/stdout"), func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				onDisk += fi.Size()
			}
		}
		return nil
	})
	if onDisk > 64<<20+2<<20 || onDisk < 64<<20 {
		t.Fatalf("the spool holds %d bytes for a 64 MiB cap", onDisk)
	}
	head, _ := durableOK(t, root, statusReq("gig", nil, 16))
	tail, _ := durableOK(t, root, statusReq("gig", &executionv1.OutputCursor{Stdout: total - 13}, 0))
	if got := string(head.GetOutput()[0].GetData()); got != strings.Repeat("x", 16) {
		t.Fatalf("the head: %q", got)
	}
	if c := tail.GetOutput()[0]; string(c.GetData()) != "xxxxxxxxxxxxxEND" || c.GetOffset() != total-13 {
		t.Fatalf("the tail: %q at %d", c.GetData(), c.GetOffset())
	}
	// The supervisor copies through a pipe into segments: its memory is its runtime and one
	// buffer, however much passes. 0 means it was gone before the first look.
	if peak > 64<<20 {
		t.Fatalf("the supervisor's peak memory was %d bytes", peak)
	}
	t.Logf("1 GiB: spool %d bytes on disk, supervisor peak %d KiB", onDisk, peak>>10)
}

// Ended records are kept by count and by age, the oldest removed first by the next start or
// listing; a running command is never removed.
func TestDurableRecordsAreRetainedByCountAndAge(t *testing.T) {
	root := t.TempDir()
	withRetention := func(req *helperv1.Request) *helperv1.Request {
		req.Limits.RetainRecords, req.Limits.RetainMillis = 2, uint64(time.Hour/time.Millisecond)
		return req
	}
	durableOK(t, root, withRetention(startReq("running", "sleep 30")))
	for _, id := range []string{"a", "b", "c", "d"} {
		durableOK(t, root, withRetention(startReq(id, "true")))
		followAll(t, root, id, nil, nil)
	}
	ids := func() []string {
		res, _ := durableOK(t, root, withRetention(listReq(10)))
		var out []string
		for _, c := range res.GetCommands() {
			out = append(out, c.GetCommandId())
		}
		return out
	}
	if diff := cmp.Diff([]string{"d", "c", "running"}, ids()); diff != "" {
		t.Fatalf("kept by count (-want +got):\n%s", diff)
	}
	// "c" ended two hours ago, as far as its record says.
	dir, err := unix.Open(filepath.Join(root, ".execplane/commands/c"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := spool.ReadRecord(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec.GetInfo().StartedAt = timestamppb.New(time.Now().Add(-2 * time.Hour))
	if err := spool.WriteRecord(dir, rec, nil); err != nil {
		t.Fatal(err)
	}
	unix.Close(dir)
	if diff := cmp.Diff([]string{"d", "running"}, ids()); diff != "" {
		t.Fatalf("kept by age (-want +got):\n%s", diff)
	}
	durableOK(t, root, cancelReq("running", 0))
}
