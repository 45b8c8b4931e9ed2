package integration_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// terminalCall is one Terminal call: what it showed, and how it ended.
type terminalCall struct {
	st      executionv1grpc.ExecutionProviderService_TerminalClient
	cancel  context.CancelFunc
	started bool
	mu      sync.Mutex
	shown   bytes.Buffer
	changed chan struct{}
	result  *executionv1.CommandResult
	err     error
	done    chan struct{}
}

// openTerminal starts a Terminal call for spec and sends its start.
func (s *session) openTerminal(t *testing.T, spec *executionv1.CommandSpec, size *executionv1.TerminalSize) *terminalCall {
	t.Helper()
	ctx, cancel := context.WithCancel(callCtx(t))
	st, err := s.api.Terminal(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &terminalCall{st: st, cancel: cancel, changed: make(chan struct{}, 1), done: make(chan struct{})}
	t.Cleanup(cancel)
	c.send(t, &executionv1.TerminalRequest{Frame: &executionv1.TerminalRequest_Start{Start: &executionv1.TerminalStart{
		RunGrant: s.runG, Environment: s.envRef, Command: spec, Size: size}}})
	go c.receive()
	return c
}

func (c *terminalCall) send(t *testing.T, m *executionv1.TerminalRequest) {
	t.Helper()
	if err := c.st.Send(m); err != nil {
		t.Fatalf("sending to the terminal: %v", err)
	}
}

func (c *terminalCall) typeIn(t *testing.T, s string) {
	t.Helper()
	c.send(t, &executionv1.TerminalRequest{Frame: &executionv1.TerminalRequest_Input{Input: []byte(s)}})
}

func (c *terminalCall) receive() {
	defer close(c.done)
	for {
		m, err := c.st.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.err = err
			}
			return
		}
		c.mu.Lock()
		switch {
		case m.GetStarted() != nil:
			c.started = true
		case m.GetOutput() != nil:
			if !c.started {
				c.err = errors.New("output before the start")
			}
			c.shown.Write(m.GetOutput())
		case m.GetResult() != nil:
			c.result = m.GetResult()
		}
		c.mu.Unlock()
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
}

// waitFor waits until the terminal shows want past offset from; it returns the offset
// after it.
func (c *terminalCall) waitFor(t *testing.T, from int, want string) int {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		c.mu.Lock()
		shown := c.shown.String()
		c.mu.Unlock()
		if i := strings.Index(shown[from:], want); i >= 0 {
			return from + i + len(want)
		}
		select {
		case <-c.changed:
		case <-c.done:
			c.mu.Lock()
			shown = c.shown.String()
			c.mu.Unlock()
			if !strings.Contains(shown[from:], want) {
				t.Fatalf("the terminal ended (%v) without showing %q; it showed %q", c.err, want, shown[from:])
			}
		case <-deadline:
			t.Fatalf("the terminal never showed %q; it showed %q", want, shown[from:])
		}
	}
}

// end waits for the call's end.
func (c *terminalCall) end(t *testing.T) (*executionv1.CommandResult, error) {
	t.Helper()
	select {
	case <-c.done:
		return c.result, c.err
	case <-time.After(30 * time.Second):
		t.Fatal("the terminal's call did not end")
		return nil, nil
	}
}

// terminals walks the interactive terminal on a ready session: a shell on a pseudo-terminal
// of the window's size, following its changes, ^C reaching its foreground job, its exit
// code the result's; refusals before anything runs; the call's end killing everything the
// terminal started; and the terminal ending with its run claim.
func terminals(t *testing.T, s *session) {
	token := survivorToken()
	c := s.openTerminal(t, &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: []string{"sh", "-i"}}},
		Environment: []*executionv1.EnvironmentVariable{{Name: "TERM", Value: "xterm"}, {Name: "PS1", Value: "$ "}}},
		&executionv1.TerminalSize{Rows: 30, Columns: 100})
	c.typeIn(t, "tty; stty size; echo $((6*7))\n")
	at := c.waitFor(t, 0, "/dev/pts/")
	at = c.waitFor(t, at, "30 100")
	at = c.waitFor(t, at, "42")
	c.send(t, &executionv1.TerminalRequest{Frame: &executionv1.TerminalRequest_Resize{Resize: &executionv1.TerminalSize{Rows: 40, Columns: 120}}})
	c.typeIn(t, "stty size\n")
	at = c.waitFor(t, at, "40 120")
	// ^C once the job runs in the foreground: before, the shell may still be reading the
	// line in raw mode, or not have made the job the terminal's foreground group yet (it
	// does so before the job's exec). The sleep's length is unique on this machine.
	long := strconv.FormatInt(1_000_000+time.Now().UnixNano()%1_000_000, 10)
	c.typeIn(t, "sleep "+long+"; echo slept\n")
	clustertest.Eventually(t, 20*time.Second, "the job running", func() bool { return len(processesWith(t, "sleep\x00"+long)) == 1 })
	c.typeIn(t, "\x03")
	c.typeIn(t, "echo after-$((1+1))\n")
	at = c.waitFor(t, at, "after-2")
	c.typeIn(t, "exit 5\n")
	res, err := c.end(t)
	if err != nil || res.GetState() != executionv1.CommandState_COMMAND_STATE_FAILED || res.GetExitCode() != 5 || res.GetReceipt() == "" {
		t.Fatalf("the shell's end: %v %v", res, err)
	}
	if shown := c.shown.String(); strings.Contains(shown[:at], "\nslept") || res.GetStdout().GetTotalBytes() != uint64(len(shown)) || len(res.GetStdout().GetHead()) != 0 {
		t.Fatalf("the interrupted job went on, or the result counts %d bytes of the %d shown", res.GetStdout().GetTotalBytes(), len(shown))
	}

	// Refused before anything runs, each with its reason.
	for _, tc := range []struct {
		name  string
		first *executionv1.TerminalRequest
	}{
		{"input first", &executionv1.TerminalRequest{Frame: &executionv1.TerminalRequest_Input{Input: []byte("x")}}},
		{"a stdin", &executionv1.TerminalRequest{Frame: &executionv1.TerminalRequest_Start{Start: &executionv1.TerminalStart{
			RunGrant: s.runG, Environment: s.envRef, Command: &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Shell{Shell: "touch ran"}, Stdin: []byte("x")}}}}},
		{"a window of 0 rows", &executionv1.TerminalRequest{Frame: &executionv1.TerminalRequest_Start{Start: &executionv1.TerminalStart{
			RunGrant: s.runG, Environment: s.envRef, Command: shell("touch ran"), Size: &executionv1.TerminalSize{Columns: 80}}}}},
	} {
		st, err := s.api.Terminal(callCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(tc.first); err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		wantCode(t, tc.name, err, codes.InvalidArgument, "INVALID_ARGUMENT")
	}
	_, err = s.files(callCtx(t), &executionv1.FileOperation{Operation: &executionv1.FileOperation_Stat{Stat: &executionv1.StatFile{Path: []byte("ran")}}})
	wantCode(t, "what a refused terminal would have made", err, codes.NotFound, "NOT_FOUND")

	// Input over its bound ends the terminal, and with it everything it started.
	// Two shells in the background, their command lines holding the token (': ' keeps a
	// shell from exec'ing its last command), and the terminal's own.
	tree := "sh -c 'sleep 300; :' " + token + " & sh -c 'sleep 301; :' " + token + "; : " + token
	c = s.openTerminal(t, shell(tree), nil)
	clustertest.Eventually(t, 20*time.Second, "the terminal's processes", func() bool { return len(processesWith(t, token)) == 3 })
	c.typeIn(t, strings.Repeat("x", 64<<10+1))
	if _, err := c.end(t); err == nil {
		t.Fatal("input over its bound was taken")
	} else {
		wantCode(t, "input over its bound", err, codes.InvalidArgument, "INVALID_ARGUMENT")
	}
	clustertest.Eventually(t, 10*time.Second, "nothing of the refused terminal left", func() bool { return len(processesWith(t, token)) == 0 })

	// The caller going away ends it too.
	c = s.openTerminal(t, shell(tree), nil)
	clustertest.Eventually(t, 20*time.Second, "the terminal's processes", func() bool { return len(processesWith(t, token)) == 3 })
	c.cancel()
	clustertest.Eventually(t, 10*time.Second, "nothing of the abandoned terminal left", func() bool { return len(processesWith(t, token)) == 0 })

	// The run claim's end ends it: the outcome is unknown to the caller, and nothing is left.
	c = s.openTerminal(t, shell(tree), nil)
	clustertest.Eventually(t, 20*time.Second, "the terminal's processes", func() bool { return len(processesWith(t, token)) == 3 })
	if _, err := s.api.ReleaseRun(callCtx(t), &executionv1.ReleaseRunRequest{OperationId: op(), RunGrant: s.runG, Environment: s.envRef}); err != nil {
		t.Fatalf("release: %v", err)
	}
	_, err = c.end(t)
	wantCode(t, "a terminal whose claim ended", err, codes.Unknown, "OUTCOME_UNKNOWN")
	clustertest.Eventually(t, 10*time.Second, "nothing of the released run's terminal left", func() bool { return len(processesWith(t, token)) == 0 })
	s.acquire(t, "run-1") // a new claim of the same run: what follows expects its id
}
