package helper_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// terminalWait bounds every wait of these tests for something the helper shows.
const terminalWait = 10 * time.Second

// terminal drives one `helper --terminal`: the gateway's side of the stream. Frames are
// read in a goroutine into frames; everything else is the test goroutine's.
type terminal struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	frames chan *helperv1.Frame
	// readErr is why the reader stopped (io.EOF: the helper's stdout ended cleanly); set
	// before frames is closed.
	readErr error

	// What the helper sent so far, in order.
	events       []*helperv1.TerminalEvent
	output       bytes.Buffer
	outputFrames []int // the size of each output frame
	heartbeats   int
	resp         *helperv1.Response
	ended        bool // the helper's stdout ended (readErr tells how)
	seen         int  // waitFor looks for text after this offset of output
	exited       bool
}

// startTerminal starts the helper in terminal mode with root as its workspace and sends
// req. A nil Version or Limits is filled in, as the gateway sends them.
func startTerminal(t *testing.T, root string, req *helperv1.Request) *terminal {
	t.Helper()
	if req.Version == helperv1.ProtocolVersion_PROTOCOL_VERSION_UNSPECIFIED {
		req.Version = helperv1.ProtocolVersion_PROTOCOL_VERSION_1
	}
	if req.Limits == nil {
		req.Limits = limits()
	}
	d := &terminal{t: t, frames: make(chan *helperv1.Frame, 64)}
	d.cmd = exec.Command(helperBin, "--terminal", "--root", root)
	var err error
	if d.stdin, err = d.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = &d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !d.exited {
			_ = d.cmd.Process.Kill()
			_ = d.cmd.Wait()
		}
	})
	go func() {
		for {
			var f helperv1.Frame
			// The gateway's bound on a frame of terminal mode (podexec.Terminal.Next).
			if err := protocol.ReadFrame(stdout, &f, protocol.MaxTerminalFrameBytes); err != nil {
				d.readErr = err
				close(d.frames)
				return
			}
			d.frames <- &f
		}
	}()
	if err := protocol.WriteFrame(d.stdin, req, protocol.MaxRequestBytes); err != nil {
		t.Fatalf("writing the request: %v", err)
	}
	return d
}

func terminalRequest(spec *executionv1.CommandSpec, rows, columns uint32) *helperv1.Request {
	open := &helperv1.TerminalOpen{Command: spec}
	if rows != 0 || columns != 0 {
		open.Size = &executionv1.TerminalSize{Rows: rows, Columns: columns}
	}
	return &helperv1.Request{RequestId: "term", Operation: &helperv1.Request_Terminal{Terminal: open}}
}

// send writes one input frame, as the gateway does (its bound).
func (d *terminal) send(in *helperv1.TerminalInput) {
	d.t.Helper()
	if err := protocol.WriteFrame(d.stdin, in, protocol.MaxTerminalFrameBytes); err != nil {
		d.t.Fatalf("writing input: %v", err)
	}
}

func (d *terminal) typeText(s string) {
	d.t.Helper()
	d.send(&helperv1.TerminalInput{Input: &helperv1.TerminalInput_Data{Data: []byte(s)}})
}

func (d *terminal) resize(rows, columns uint32) {
	d.t.Helper()
	d.send(&helperv1.TerminalInput{Input: &helperv1.TerminalInput_Resize{Resize: &executionv1.TerminalSize{Rows: rows, Columns: columns}}})
}

// shown describes what the helper sent, for failure messages.
func (d *terminal) shown() string {
	end := "not ended"
	if d.ended {
		end = fmt.Sprintf("ended (%v)", d.readErr)
	}
	return fmt.Sprintf("output %q, %d events, response %v, stdout %s", d.output.String(), len(d.events), d.resp, end)
}

// next takes one frame (or the end of the helper's stdout) and records it; false when
// the deadline passed first.
func (d *terminal) next(deadline <-chan time.Time) bool {
	d.t.Helper()
	if d.ended {
		return false
	}
	select {
	case f, ok := <-d.frames:
		if !ok {
			d.ended = true
			return true
		}
		if d.resp != nil {
			d.t.Fatalf("a frame after the response: %v", f)
		}
		switch x := f.GetFrame().(type) {
		case *helperv1.Frame_Heartbeat:
			d.heartbeats++
		case *helperv1.Frame_Terminal:
			d.events = append(d.events, x.Terminal)
			if out, ok := x.Terminal.GetEvent().(*helperv1.TerminalEvent_Output); ok {
				d.output.Write(out.Output)
				d.outputFrames = append(d.outputFrames, len(out.Output))
			}
		case *helperv1.Frame_Response:
			d.resp = x.Response
		default:
			d.t.Fatalf("a frame of another mode: %v", f)
		}
		return true
	case <-deadline:
		return false
	}
}

// waitUntil takes frames until cond holds, failing with what was shown when it does not
// within terminalWait.
func (d *terminal) waitUntil(what string, cond func() bool) {
	d.t.Helper()
	deadline := time.After(terminalWait)
	for !cond() {
		if !d.next(deadline) {
			d.t.Fatalf("waiting for %s: %s", what, d.shown())
		}
	}
}

// waitFor waits until the terminal shows want after what earlier waits matched.
func (d *terminal) waitFor(want string) {
	d.t.Helper()
	d.waitUntil(fmt.Sprintf("%q", want), func() bool {
		i := strings.Index(d.output.String()[d.seen:], want)
		if i >= 0 {
			d.seen += i + len(want)
		}
		return i >= 0
	})
}

// waitMatch waits until the terminal shows a match of re after what earlier waits matched
// and returns its submatches.
func (d *terminal) waitMatch(re *regexp.Regexp) []string {
	d.t.Helper()
	var m []int
	d.waitUntil(re.String(), func() bool {
		m = re.FindStringSubmatchIndex(d.output.String()[d.seen:])
		return m != nil
	})
	s := d.output.String()[d.seen:]
	var subs []string
	for i := 0; i+1 < len(m); i += 2 {
		subs = append(subs, s[m[i]:m[i+1]])
	}
	d.seen += m[1]
	return subs
}

// response waits for the Response, then for the helper's stdout to end cleanly and the
// helper to exit 0.
func (d *terminal) response() *helperv1.Response {
	d.t.Helper()
	d.waitUntil("the response", func() bool { return d.resp != nil || d.ended })
	if d.resp == nil {
		d.t.Fatalf("the helper's stdout ended without a response: %s", d.shown())
	}
	d.waitUntil("the end of the helper's stdout after its response", func() bool { return d.ended })
	if !errors.Is(d.readErr, io.EOF) {
		d.t.Fatalf("the helper's stdout did not end cleanly after the response: %v (%s)", d.readErr, d.shown())
	}
	d.wait()
	return d.resp
}

// wait waits for the helper to exit, and wants it to exit 0.
func (d *terminal) wait() {
	d.t.Helper()
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait() }()
	select {
	case err := <-exited:
		d.exited = true
		if err != nil {
			d.t.Fatalf("the helper exited with %v (stderr %q)", err, d.stderr.String())
		}
	case <-time.After(terminalWait):
		d.t.Fatal("the helper did not exit after its stdout ended")
	}
}

// started reports whether the helper sent a started event.
func (d *terminal) started() bool {
	for _, ev := range d.events {
		if ev.GetStarted() != nil {
			return true
		}
	}
	return false
}

// result is the Response's CommandResult; the first terminal frame must have been started.
func (d *terminal) result() *executionv1.CommandResult {
	d.t.Helper()
	resp := d.response()
	if e := resp.GetError(); e != nil {
		d.t.Fatalf("the terminal was refused: %v %s", e.GetCode(), e.GetMessage())
	}
	res := resp.GetCommand()
	if res == nil {
		d.t.Fatalf("a response without a command result: %v", resp)
	}
	if resp.GetRequestId() != "term" {
		d.t.Errorf("request id not echoed: %q", resp.GetRequestId())
	}
	if len(d.events) == 0 || d.events[0].GetStarted() == nil {
		d.t.Errorf("the first terminal frame was not started: %v", d.events)
	}
	for i, ev := range d.events[1:] {
		if ev.GetStarted() != nil {
			d.t.Errorf("a second started event (event %d)", i+1)
		}
	}
	return res
}

// An interactive shell: what is typed runs, the terminal has the size asked for and then
// the size resized to, and its exit is the result, which counts what was shown and holds
// none of it.
func TestTerminalInteractiveShell(t *testing.T) {
	root := t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "sub"), 0o755))
	spec := argv("sh", "-i")
	spec.WorkingDirectory = []byte("sub")
	d := startTerminal(t, root, terminalRequest(spec, 30, 100))

	d.typeText("stty size; pwd\n")
	d.waitFor("30 100\r\n")
	// pwd's line: the echo of what was typed shows "pwd", never a path.
	d.waitMatch(regexp.MustCompile(`(?m)^/\S*/sub\r\n`))

	// The helper applies a resize and input from separate queues ("in any order",
	// docs/commands.md): the shell's fork and exec of stty lie between them.
	d.resize(40, 120)
	d.typeText("stty size\n")
	d.waitFor("40 120\r\n")

	d.typeText("exit 7\n")
	res := d.result()
	if res.GetState() != executionv1.CommandState_COMMAND_STATE_FAILED || res.GetExitCode() != 7 {
		t.Errorf("want FAILED with exit code 7, got %v exit %d (%s)", res.GetState(), res.GetExitCode(), res.GetMessage())
	}
	if len(res.GetStdout().GetHead()) != 0 || len(res.GetStdout().GetTail()) != 0 {
		t.Errorf("the result carries output: head %q tail %q", res.GetStdout().GetHead(), res.GetStdout().GetTail())
	}
	if len(res.GetStderr().GetHead()) != 0 || len(res.GetStderr().GetTail()) != 0 {
		t.Errorf("the result carries stderr: head %q tail %q", res.GetStderr().GetHead(), res.GetStderr().GetTail())
	}
	if got, want := res.GetStdout().GetTotalBytes(), uint64(d.output.Len()); got != want || want == 0 {
		t.Errorf("stdout.total_bytes %d, but the output frames carried %d bytes", got, want)
	}
}

// procGone reports whether pid is gone (a zombie counts as gone).
func procGone(pid int) (bool, string) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true, ""
	}
	// The state follows the command's name, in parentheses that may hold anything.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && strings.HasPrefix(s[i:], ") Z") {
		return true, s
	}
	return false, s
}

var pidLine = regexp.MustCompile(`pid=(\d+)\r\n`)

// EOF on the helper's stdin (the call ended) kills the command: CANCELLED, and the process
// is gone once the helper exited.
func TestTerminalEOFCancels(t *testing.T) {
	root := t.TempDir()
	d := startTerminal(t, root, terminalRequest(shell(`echo pid=$$; exec sleep 300`), 0, 0))
	pid, err := strconv.Atoi(d.waitMatch(pidLine)[1])
	if err != nil {
		t.Fatal(err)
	}
	if gone, stat := procGone(pid); gone {
		t.Fatalf("the command %d is not running before stdin closed: %q", pid, stat)
	}
	d.stdin.Close()
	res := d.result()
	if res.GetState() != executionv1.CommandState_COMMAND_STATE_CANCELLED {
		t.Errorf("want CANCELLED, got %v (%s)", res.GetState(), res.GetMessage())
	}
	if gone, stat := procGone(pid); !gone {
		t.Errorf("the command %d outlived the helper: %s", pid, stat)
	}
}

// Requests refused before anything runs: an error Response, no started frame, and the
// command (which would create a file) never ran.
func TestTerminalRefusals(t *testing.T) {
	touch := func() *executionv1.CommandSpec { return shell("touch ran") }
	withStdin := touch()
	withStdin.Stdin = []byte("input\n")
	escaping := touch()
	escaping.WorkingDirectory = []byte("../x")
	for _, c := range []struct {
		name string
		req  *helperv1.Request
		want helperv1.ErrorCode
	}{
		{"stdin", terminalRequest(withStdin, 0, 0), helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{"rows 0 columns 5", terminalRequest(touch(), 0, 5), helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{"rows 1001", terminalRequest(touch(), 1001, 80), helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{"columns 1001", terminalRequest(touch(), 24, 1001), helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{"no command", &helperv1.Request{RequestId: "term", Operation: &helperv1.Request_Terminal{Terminal: &helperv1.TerminalOpen{}}}, helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{"a file operation", &helperv1.Request{RequestId: "term", Operation: &helperv1.Request_File{File: writeOp("ran", "x", executionv1.WriteMode_WRITE_MODE_OVERWRITE)}}, helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		{"a command", &helperv1.Request{RequestId: "term", Operation: &helperv1.Request_Command{Command: touch()}}, helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT},
		// As a command's working directory outside the workspace (fileops: RESOLVE_BENEATH's
		// EXDEV), though ../x exists.
		{"working directory ../x", terminalRequest(escaping, 0, 0), helperv1.ErrorCode_ERROR_CODE_PATH_ESCAPE},
		{"version 2", func() *helperv1.Request {
			r := terminalRequest(touch(), 0, 0)
			r.Version = helperv1.ProtocolVersion_PROTOCOL_VERSION_2
			return r
		}(), helperv1.ErrorCode_ERROR_CODE_UNSUPPORTED_VERSION},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			root, x := filepath.Join(base, "ws"), filepath.Join(base, "x")
			must(t, os.Mkdir(root, 0o755))
			must(t, os.Mkdir(x, 0o755))
			d := startTerminal(t, root, c.req)
			resp := d.response()
			if e := resp.GetError(); e.GetCode() != c.want {
				t.Errorf("want an error %v, got %v", c.want, resp)
			}
			if d.started() || len(d.events) != 0 {
				t.Errorf("terminal frames for a refused terminal: %v", d.events)
			}
			for _, p := range []string{filepath.Join(root, "ran"), filepath.Join(x, "ran")} {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the refused request ran: %s exists (%v)", p, err)
				}
			}
		})
	}
}

// An input frame that is not valid input ends the terminal, as EOF does.
func TestTerminalInvalidInputEnds(t *testing.T) {
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"empty data", []byte{}},
		{"70000 bytes", bytes.Repeat([]byte("y"), 70000)},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := startTerminal(t, t.TempDir(), terminalRequest(shell(`echo ready; exec sleep 300`), 0, 0))
			d.waitFor("ready\r\n")
			frame := &helperv1.TerminalInput{Input: &helperv1.TerminalInput_Data{Data: c.data}}
			// The data is set, empty or not: the helper sees a piece of input, not a frame
			// without one.
			if b, err := proto.Marshal(frame); err != nil || len(b) < 2+len(c.data) {
				t.Fatalf("the input frame encodes to %d bytes (%v)", len(b), err)
			}
			// Over the gateway's bound, so written without it; the helper stops reading at
			// the header, so the write may wait for its exit.
			go func() { _ = protocol.WriteFrame(d.stdin, frame, protocol.MaxRequestBytes) }()
			sent := time.Now()
			res := d.result()
			if res.GetState() != executionv1.CommandState_COMMAND_STATE_CANCELLED {
				t.Errorf("want CANCELLED, got %v (%s)", res.GetState(), res.GetMessage())
			}
			if took := time.Since(sent); took > 5*time.Second {
				t.Errorf("the terminal took %v to end", took)
			}
		})
	}
}

// Heavy output: every output frame within 1..64 KiB, and their sum is what the result
// counts.
func TestTerminalLargeOutput(t *testing.T) {
	const size = 1 << 20
	d := startTerminal(t, t.TempDir(), terminalRequest(shell(fmt.Sprintf(`head -c %d /dev/zero | tr '\0' x`, size)), 0, 0))
	res := d.result()
	if res.GetState() != executionv1.CommandState_COMMAND_STATE_SUCCEEDED {
		t.Errorf("want SUCCEEDED, got %v (%s)", res.GetState(), res.GetMessage())
	}
	total := 0
	for i, n := range d.outputFrames {
		if n < 1 || n > protocol.MaxTerminalOutputBytes {
			t.Errorf("output frame %d carries %d bytes", i, n)
		}
		total += n
	}
	if total < size {
		t.Errorf("the output frames carried %d bytes, less than %d", total, size)
	}
	if got := res.GetStdout().GetTotalBytes(); got != uint64(total) {
		t.Errorf("stdout.total_bytes %d, but the output frames carried %d bytes", got, total)
	}
	if x := bytes.Count(d.output.Bytes(), []byte("x")); x != size {
		t.Errorf("the terminal showed %d x, want %d", x, size)
	}
}

// A command that cannot start is a result (START_FAILED, with its receipt), as for any
// command, and the terminal never starts: no started frame, no output ("or the Response,
// if it could not start": proto/helper/v1/helper.proto).
func TestTerminalStartFailure(t *testing.T) {
	d := startTerminal(t, t.TempDir(), terminalRequest(argv("no-such-program-for-a-terminal"), 0, 0))
	resp := d.response()
	res := resp.GetCommand()
	if res.GetState() != executionv1.CommandState_COMMAND_STATE_START_FAILED || res.GetReceipt() == "" {
		t.Errorf("want a START_FAILED result with its receipt, got %v", resp)
	}
	if len(d.events) != 0 {
		t.Errorf("terminal frames for a command that did not start: %v", d.events)
	}
}
