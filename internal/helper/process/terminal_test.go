package process

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// screen is what a test's terminal showed, with a wait for some text to appear.
type screen struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{}
}

func newScreen() *screen { return &screen{changed: make(chan struct{}, 1)} }

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.b.Write(p)
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return len(p), nil
}

// waitFor waits until the screen shows want after what it showed at from, and returns the
// offset after it.
func (s *screen) waitFor(t *testing.T, from int, want string) int {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		shown := s.b.String()
		s.mu.Unlock()
		if i := strings.Index(shown[from:], want); i >= 0 {
			return from + i + len(want)
		}
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("the terminal never showed %q; it showed %q", want, shown[from:])
		}
	}
}

type terminalRun struct {
	input  chan []byte
	resize chan WindowSize
	cancel chan struct{}
	screen *screen
	done   chan *executionv1.CommandResult
}

func startTestTerminal(t *testing.T, spec *executionv1.CommandSpec, size WindowSize) *terminalRun {
	t.Helper()
	// As the helper is: what a command's process leaves orphaned comes back to be killed
	// and reaped, rather than to init.
	if err := EnableSubreaper(); err != nil {
		t.Fatal(err)
	}
	r := &terminalRun{
		input: make(chan []byte), resize: make(chan WindowSize), cancel: make(chan struct{}),
		screen: newScreen(), done: make(chan *executionv1.CommandResult, 1),
	}
	go func() {
		res, err := Run(spec, Options{
			Limits:   Limits{MaxOutputBytes: 1 << 10, MaxDuration: time.Minute},
			Environ:  []string{"PATH=" + defaultPath, "PS1=$ "},
			Cancel:   r.cancel,
			Terminal: &Terminal{Size: size, Input: r.input, Resize: r.resize, Output: r.screen},
		})
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		r.done <- res
	}()
	return r
}

func (r *terminalRun) typeIn(t *testing.T, s string) {
	t.Helper()
	select {
	case r.input <- []byte(s):
	case <-time.After(10 * time.Second):
		t.Fatalf("the terminal took no input %q", s)
	}
}

func (r *terminalRun) result(t *testing.T) *executionv1.CommandResult {
	t.Helper()
	select {
	case res := <-r.done:
		if res == nil {
			t.FailNow()
		}
		return res
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal's command did not end")
		return nil
	}
}

// An interactive shell on the terminal: it is the terminal's session leader (tty names a
// pseudo-terminal, the line discipline echoes), it sees the window's size and its changes,
// ^C interrupts its foreground job, and it ends with the exit code it chose.
func TestTerminalRunsAnInteractiveShell(t *testing.T) {
	r := startTestTerminal(t, &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: []string{"sh", "-i"}}}},
		WindowSize{Rows: 30, Columns: 100})
	r.typeIn(t, "tty; stty size; echo $((6*7))\n")
	at := r.screen.waitFor(t, 0, "/dev/pts/")
	at = r.screen.waitFor(t, at, "30 100")
	at = r.screen.waitFor(t, at, "42")
	r.resize <- WindowSize{Rows: 40, Columns: 120}
	r.typeIn(t, "stty size\n")
	at = r.screen.waitFor(t, at, "40 120")
	// The job sleeps in the foreground; ^C (0x03) makes the line discipline send SIGINT to
	// it, and the shell prompts again.
	// ^C once the job runs in the foreground (the shell makes it so before its exec).
	long := strconv.FormatInt(1_000_000+time.Now().UnixNano()%1_000_000, 10)
	r.typeIn(t, "sleep "+long+"; echo slept\n")
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.After(10 * time.Second); !running("sleep\x00" + long); {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the job never ran")
		}
	}
	r.typeIn(t, "\x03")
	r.typeIn(t, "echo after-$((1+1))\n")
	at = r.screen.waitFor(t, at, "after-2")
	r.typeIn(t, "exit 3\n")
	res := r.result(t)
	if res.GetState() != executionv1.CommandState_COMMAND_STATE_FAILED || res.GetExitCode() != 3 {
		t.Fatalf("the shell's end: %v %d %q", res.GetState(), res.GetExitCode(), res.GetMessage())
	}
	if strings.Contains(r.screen.b.String()[:at], "\nslept") {
		t.Errorf("the interrupted job went on")
	}
	if got := res.GetStdout().GetTotalBytes(); got != uint64(r.screen.b.Len()) || len(res.GetStdout().GetHead()) != 0 {
		t.Errorf("the result counts %d bytes shown (head %d), the screen has %d", got, len(res.GetStdout().GetHead()), r.screen.b.Len())
	}
}

// A terminal whose call is cancelled ends CANCELLED with nothing left of what it started —
// a job in the background under its own process group included.
func TestTerminalCancelledLeavesNothing(t *testing.T) {
	r := startTestTerminal(t, &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: []string{"sh", "-i"}}}}, WindowSize{Rows: 24, Columns: 80})
	r.typeIn(t, "set -m; sleep 300 & echo bg=$!\n")
	at := r.screen.waitFor(t, 0, "bg=")
	r.screen.waitFor(t, at, "\n")
	r.screen.mu.Lock()
	shown := r.screen.b.String()
	r.screen.mu.Unlock()
	pid := strings.Fields(shown[at:])[0]
	close(r.cancel)
	res := r.result(t)
	if res.GetState() != executionv1.CommandState_COMMAND_STATE_CANCELLED || res.GetMessage() != "" {
		t.Fatalf("the cancelled terminal: %v %q", res.GetState(), res.GetMessage())
	}
	if alive(pid) {
		t.Fatalf("the background job %s outlived its terminal", pid)
	}
}

// A terminal's command that does not read its input, with the caller typing on, holds the
// caller back rather than buffering without bound, and its timeout still ends it.
func TestTerminalTimeoutEndsAStuckTerminal(t *testing.T) {
	spec := &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Shell{Shell: "stty -icanon -echo; echo raw-now; sleep 300"}, Timeout: durationpb.New(time.Second)}
	r := startTestTerminal(t, spec, WindowSize{Rows: 24, Columns: 80})
	// Only once the line discipline is raw: before it, a full canonical line buffer drops
	// what is typed, and the terminal would seem to take it (a flake under load).
	r.screen.waitFor(t, 0, "raw-now")
	chunk := []byte(strings.Repeat("x", 4096))
	took := 0
	for took < 1<<20 {
		select {
		case r.input <- chunk:
			took += len(chunk)
			continue
		case res := <-r.done:
			if res.GetState() != executionv1.CommandState_COMMAND_STATE_TIMED_OUT || res.GetMessage() != "" {
				t.Fatalf("the stuck terminal: %v %q", res.GetState(), res.GetMessage())
			}
			if took >= 1<<20 {
				t.Fatalf("the terminal took %d bytes nobody read", took)
			}
			return
		}
	}
	t.Fatalf("the terminal took %d bytes nobody read", took)
}

// running reports whether a live process's command line holds arg.
func running(arg string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(cmdline, []byte(arg)) && alive(e.Name()) {
			return true
		}
	}
	return false
}

// alive reports whether the process pid exists and is not a zombie.
func alive(pid string) bool {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || !strings.HasPrefix(string(stat[i+1:]), " Z")
}
