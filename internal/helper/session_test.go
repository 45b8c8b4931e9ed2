package helper_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/internal/session"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// sessionHelper is a helper started with --session, driven through the gateway's own
// session client.
type sessionHelper struct {
	s     *session.Session
	cmd   *exec.Cmd
	stdin io.WriteCloser
	wait  chan error
}

// testSessionHeartbeat is the tests' session heartbeat: a session silent for three of them
// is broken. At 200 ms, a 5 MiB write under the race detector on a loaded CI machine once
// starved the helper's heartbeats past 600 ms and the session was closed as silent; no test
// here is about silence detection (the gateway's tests are).
const testSessionHeartbeat = time.Second

func openSession(t testing.TB, root string) *sessionHelper {
	t.Helper()
	cmd := exec.Command(helperBin, "--session", "--root", root)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &sessionHelper{cmd: cmd, stdin: stdin, wait: make(chan error, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.s, err = session.Open(ctx, session.Config{Heartbeat: testSessionHeartbeat}, stdin, stdout, func() {})
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("open: %v (stderr %q)", err, stderr.String())
	}
	go func() { h.wait <- cmd.Wait() }()
	t.Cleanup(func() { h.close(t) })
	return h
}

// close ends the session and requires the helper to exit cleanly within the bound.
func (h *sessionHelper) close(t testing.TB) {
	t.Helper()
	h.s.Close(session.ReasonDrain)
	select {
	case err := <-h.wait:
		if err != nil {
			t.Errorf("session helper exited with %v", err)
		}
		h.wait <- nil // later closes see it ended
	case <-time.After(10 * time.Second):
		h.cmd.Process.Kill()
		t.Error("the session helper did not exit after its stdin ended")
	}
}

func (h *sessionHelper) do(t testing.TB, ctx context.Context, req *helperv1.Request) (*helperv1.Response, error) {
	t.Helper()
	if req.Limits == nil {
		req.Limits = limits()
	}
	return h.s.Do(ctx, req, protocol.MaxResponseBytes)
}

func (h *sessionHelper) file(t testing.TB, op *executionv1.FileOperation) *executionv1.FileResult {
	t.Helper()
	resp, err := h.do(t, context.Background(), &helperv1.Request{Operation: &helperv1.Request_File{File: op}})
	if err != nil {
		t.Fatalf("session call: %v", err)
	}
	if e := resp.GetError(); e != nil {
		t.Fatalf("file operation refused: %v %s", e.GetCode(), e.GetMessage())
	}
	return resp.GetFile()
}

func (h *sessionHelper) command(t *testing.T, ctx context.Context, spec *executionv1.CommandSpec) (*helperv1.Response, error) {
	t.Helper()
	return h.do(t, ctx, &helperv1.Request{Operation: &helperv1.Request_Command{Command: spec}})
}

func TestSessionServesManyRequests(t *testing.T) {
	root, outside := workspace(t)
	h := openSession(t, root)
	h.file(t, writeOp("a.txt", "hello", executionv1.WriteMode_WRITE_MODE_CREATE_ONLY))
	if got := string(h.file(t, readOp("a.txt")).GetRead().GetContent()); got != "hello" {
		t.Fatalf("read %q", got)
	}
	resp, err := h.command(t, context.Background(), shell("echo out; pwd; echo err >&2"))
	if err != nil {
		t.Fatal(err)
	}
	res := resp.GetCommand()
	if got, want := string(res.GetStdout().GetHead()), "out\n"+root+"\n"; got != want || string(res.GetStderr().GetHead()) != "err\n" || res.GetExitCode() != 0 {
		t.Fatalf("command: stdout %q (want %q), stderr %q, exit %d", got, want, res.GetStderr().GetHead(), res.GetExitCode())
	}
	// A refusal answers its request and leaves the session serving.
	resp, err = h.do(t, context.Background(), &helperv1.Request{Operation: &helperv1.Request_File{File: readOp("../outside/secret")}})
	if err != nil || resp.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_PATH_ESCAPE {
		t.Fatalf("escape: %v %v", resp, err)
	}
	// Many at once, beyond the session's bound: the extra callers wait their turn.
	var g errgroup.Group
	for i := range 3 * protocol.DefaultMaxInFlight {
		g.Go(func() error {
			name := fmt.Sprintf("f%d", i)
			if _, err := h.do(t, context.Background(), &helperv1.Request{Operation: &helperv1.Request_File{File: writeOp(name, name, executionv1.WriteMode_WRITE_MODE_OVERWRITE)}}); err != nil {
				return err
			}
			resp, err := h.do(t, context.Background(), &helperv1.Request{Operation: &helperv1.Request_File{File: readOp(name)}})
			if err != nil {
				return err
			}
			if got := string(resp.GetFile().GetRead().GetContent()); got != name {
				return fmt.Errorf("%s read back %q", name, got)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := h.s.Served(); n != uint64(4+6*protocol.DefaultMaxInFlight) {
		t.Fatalf("served %d requests", n)
	}
	assertOutsideUntouched(t, outside)
}

func TestSessionChunksLargeTransfersBothWays(t *testing.T) {
	root, _ := workspace(t)
	h := openSession(t, root)
	content := make([]byte, 5<<20)
	_, _ = rand.Read(content)
	big := &helperv1.Limits{MaxFileBytes: 8 << 20, MaxCommandBytes: testMaxCommandBytes, MaxCommandMillis: testMaxCommandMs}
	// A small read goes on while the large transfers are under way.
	var g errgroup.Group
	g.Go(func() error {
		resp, err := h.do(t, context.Background(), &helperv1.Request{Limits: big, Operation: &helperv1.Request_File{File: &executionv1.FileOperation{
			Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{Path: []byte("big"), Content: content, Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}}}}})
		if err == nil && resp.GetError() != nil {
			err = errors.New(resp.GetError().GetMessage())
		}
		return err
	})
	h.file(t, writeOp("small", "s", executionv1.WriteMode_WRITE_MODE_OVERWRITE))
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	resp, err := h.do(t, context.Background(), &helperv1.Request{Limits: big, Operation: &helperv1.Request_File{File: readOp("big")}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(resp.GetFile().GetRead().GetContent(), content) {
		t.Fatalf("5 MiB read back %d bytes, not what was written", len(resp.GetFile().GetRead().GetContent()))
	}
	// A response above the call's cap is refused by the client, whatever the helper sends.
	_, err = h.s.Do(context.Background(), &helperv1.Request{Limits: big, Operation: &helperv1.Request_File{File: readOp("big")}}, 1<<20)
	if !errors.Is(err, session.ErrViolation) {
		t.Fatalf("over-cap response: %v", err)
	}
}

// marker is a string that names a test's processes in their command lines.
func marker(t *testing.T) string {
	return "execplane-session-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// livePIDs are the pids of the live processes whose command line holds m (survivors, in
// commands_test.go, lists them).
func livePIDs(t *testing.T, m string) []int {
	var out []int
	for _, s := range survivors(t, m) {
		field, _, _ := strings.Cut(s, ":")
		if pid, err := strconv.Atoi(field); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// await polls cond until it holds, failing after bound.
func await(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, bound, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("%s: not within %s", what, bound)
	}
}

// awaitNoSurvivor polls until no process carries m, failing (and killing what is left)
// after the bound.
func awaitNoSurvivor(t *testing.T, m string, bound time.Duration) {
	t.Helper()
	t.Cleanup(func() {
		for _, pid := range livePIDs(t, m) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	await(t, bound, "no process "+m+" left", func() bool { return len(livePIDs(t, m)) == 0 })
}

// awaitProcesses polls until n processes carry m.
func awaitProcesses(t *testing.T, m string, n int) {
	t.Helper()
	await(t, 10*time.Second, fmt.Sprintf("%d processes %s", n, m), func() bool { return len(livePIDs(t, m)) >= n })
}

func TestSessionCancelEndsOnlyThatCommand(t *testing.T) {
	root, _ := workspace(t)
	h := openSession(t, root)
	m := marker(t)
	ctx, cancel := context.WithCancel(context.Background())
	var g errgroup.Group
	g.Go(func() error {
		_, err := h.command(t, ctx, shell("sleep 300; : "+m))
		if !errors.Is(err, session.ErrLost) || !errors.Is(err, context.Canceled) {
			return fmt.Errorf("cancelled command: %v", err)
		}
		return nil
	})
	other := make(chan *helperv1.Response, 1)
	g.Go(func() error {
		resp, err := h.command(t, context.Background(), shell("sleep 1; echo done"))
		other <- resp
		return err
	})
	awaitProcesses(t, m, 1)
	cancel()
	awaitNoSurvivor(t, m, 3*time.Second)
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := string((<-other).GetCommand().GetStdout().GetHead()); got != "done\n" {
		t.Fatalf("the other command: %q", got)
	}
	// The session still serves.
	h.file(t, statOp("."))
}

func TestSessionEndKillsEverythingItStarted(t *testing.T) {
	root, _ := workspace(t)
	h := openSession(t, root)
	m := marker(t)
	done := make(chan error, 2)
	for _, script := range []string{
		"setsid sh -c 'sleep 300; : " + m + "' & sleep 301; : " + m, // a descendant that left the group
		"sleep 302; : " + m,
	} {
		go func() { _, err := h.command(t, context.Background(), shell(script)); done <- err }()
	}
	awaitProcesses(t, m, 3)
	h.close(t)
	awaitNoSurvivor(t, m, time.Second)
	for range 2 {
		if err := <-done; !errors.Is(err, session.ErrLost) {
			t.Fatalf("a command of a closed session: %v", err)
		}
	}
}

func TestSessionCommandHelperKilledIsAnUnknownOutcome(t *testing.T) {
	root, _ := workspace(t)
	h := openSession(t, root)
	m := marker(t)
	got := make(chan *helperv1.Response, 1)
	go func() {
		// The inner shell, a grandchild, is no child of the killed helper: only the
		// session's sweep can end it.
		resp, err := h.command(t, context.Background(), shell("sh -c 'sleep 300; : "+m+"' & wait"))
		if err != nil {
			t.Error(err)
		}
		got <- resp
	}()
	awaitProcesses(t, m, 1)
	// The per-command helper is the session helper's child named in its argv.
	var killed bool
	for _, pid := range livePIDs(t, "execplane-helper-command") {
		if ppid(pid) == h.cmd.Process.Pid {
			killed = syscall.Kill(pid, syscall.SIGKILL) == nil || killed
		}
	}
	if !killed {
		t.Fatal("no per-command helper found")
	}
	resp := <-got
	if resp.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_OUTCOME_UNKNOWN {
		t.Fatalf("want OUTCOME_UNKNOWN, got %v", resp)
	}
	// What its command left behind is swept by the session.
	awaitNoSurvivor(t, m, 2*time.Second)
	h.file(t, statOp("."))
}

func ppid(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(fields[1])
	return n
}

// rawSession starts a session helper and returns its raw pipes, for frames the client
// would never send.
func rawSession(t *testing.T, root string) (io.WriteCloser, io.Reader, func() error) {
	t.Helper()
	cmd := exec.Command(helperBin, "--session", "--root", root)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var werr error
	wait := func() error { once.Do(func() { werr = cmd.Wait() }); return werr }
	t.Cleanup(func() { stdin.Close(); _ = cmd.Process.Kill(); _ = wait() })
	return stdin, stdout, wait
}

func readFrames(t *testing.T, r io.Reader) []*helperv1.Frame {
	t.Helper()
	var out []*helperv1.Frame
	for {
		var f helperv1.Frame
		err := protocol.ReadFrame(r, &f, protocol.MaxResponseBytes)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.GetHeartbeat() == nil {
			out = append(out, &f)
		}
	}
}

func TestSessionRefusesWhatTheGatewayMustNotSend(t *testing.T) {
	req := func(id string) *helperv1.SessionFrame {
		return &helperv1.SessionFrame{Frame: &helperv1.SessionFrame_Request{Request: &helperv1.Request{
			Version: helperv1.ProtocolVersion_PROTOCOL_VERSION_2, RequestId: id, Limits: limits(),
			Operation: &helperv1.Request_Command{Command: shell("sleep 5")}}}}
	}
	hello := protocol.NewHello(2, protocol.DefaultChunkBytes, time.Second)
	cases := []struct {
		name   string
		frames []*helperv1.SessionFrame
		// wantReady: the hello was accepted before the refusal.
		wantReady bool
	}{
		{"a request before the hello", []*helperv1.SessionFrame{req("1")}, false},
		{"a hello of no known version", []*helperv1.SessionFrame{{Frame: &helperv1.SessionFrame_Hello{Hello: &helperv1.SessionHello{MaxInFlight: 1, ChunkBytes: protocol.DefaultChunkBytes, HeartbeatMillis: 1000}}}}, false},
		{"a duplicate request id", []*helperv1.SessionFrame{hello, req("1"), req("1")}, true},
		{"more in flight than agreed", []*helperv1.SessionFrame{hello, req("1"), req("2"), req("3")}, true},
		{"an empty request id", []*helperv1.SessionFrame{hello, req("")}, true},
		{"a second hello", []*helperv1.SessionFrame{hello, hello}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := workspace(t)
			in, out, wait := rawSession(t, root)
			for _, f := range tc.frames {
				if err := protocol.WriteFrame(in, f, protocol.MaxRequestBytes); err != nil {
					t.Fatal(err)
				}
			}
			frames := readFrames(t, out) // the helper ends the session itself
			if err := wait(); err != nil {
				t.Fatalf("helper exit: %v", err)
			}
			if tc.wantReady != (len(frames) > 0 && frames[0].GetReady() != nil) {
				t.Fatalf("ready: %v", frames)
			}
			last := frames[len(frames)-1].GetResponse()
			if last.GetRequestId() != "" || last.GetError() == nil {
				t.Fatalf("want a refusal with no request id last, got %v", frames)
			}
		})
	}
}
