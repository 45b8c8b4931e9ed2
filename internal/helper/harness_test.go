package helper_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// helperBin is the binary under test: $EXECPLANE_HELPER_BIN (make test sets it to
// bin/helper) or one built here the way the Makefile builds it.
var helperBin string

// Limits the tests run under: the profile package's ceilings are larger; small caps make
// the bounds observable.
const (
	testMaxFileBytes    = 1 << 20
	testMaxCommandBytes = 64 << 10
	testMaxCommandMs    = 20_000
)

func TestMain(m *testing.M) {
	helperBin = os.Getenv("EXECPLANE_HELPER_BIN")
	if helperBin == "" {
		dir, err := os.MkdirTemp("", "helper-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		helperBin = filepath.Join(dir, "helper")
		cmd := exec.Command("go", "build", "-o", helperBin, "../../cmd/helper")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building the helper: %v\n%s", err, out)
			os.Exit(1)
		}
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// result is what one helper invocation produced.
type result struct {
	resp       *helperv1.Response
	heartbeats int
	stderr     string
	elapsed    time.Duration
}

type callOptions struct {
	// closeStdinAfter closes the helper's stdin this long after the request (cancellation);
	// zero keeps it open until the response arrives, as the gateway does.
	closeStdinAfter time.Duration
	args            []string
	rawRequest      []byte
	// afterStart runs once the helper process exists, before the request is sent.
	afterStart func(pid int)
	// ignoreHupInt starts the helper with SIGHUP and SIGINT ignored, as a container
	// runtime's exec may.
	ignoreHupInt bool
	// bin, when set, is the helper binary to run instead of helperBin; credential, the
	// user it runs as.
	bin        string
	credential *syscall.Credential
}

func limits() *helperv1.Limits {
	return &helperv1.Limits{MaxFileBytes: testMaxFileBytes, MaxCommandBytes: testMaxCommandBytes, MaxCommandMillis: testMaxCommandMs}
}

// call runs the helper binary once with root as its workspace.
func call(t testing.TB, root string, req *helperv1.Request, o callOptions) result {
	t.Helper()
	if req != nil {
		if req.Version == 0 {
			req.Version = helperv1.ProtocolVersion_PROTOCOL_VERSION_1
		}
		if req.Limits == nil {
			req.Limits = limits()
		}
	}
	bin := helperBin
	if o.bin != "" {
		bin = o.bin
	}
	cmd := exec.Command(bin, append([]string{"--root", root}, o.args...)...)
	if o.credential != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.credential}
	}
	if o.ignoreHupInt {
		cmd = exec.Command("sh", append([]string{"-c", `trap "" HUP INT; exec "$0" "$@"`, helperBin, "--root", root}, o.args...)...)
	}
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
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if o.afterStart != nil {
		o.afterStart(cmd.Process.Pid)
	}
	if o.rawRequest != nil {
		_, _ = stdin.Write(o.rawRequest)
	} else if err := protocol.WriteFrame(stdin, req, protocol.MaxRequestBytes); err != nil {
		t.Fatal(err)
	}
	if o.closeStdinAfter > 0 {
		time.AfterFunc(o.closeStdinAfter, func() { stdin.Close() })
	}
	var res result
	for {
		var fr helperv1.Frame
		err := protocol.ReadFrame(stdout, &fr, protocol.MaxResponseBytes)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading helper output: %v (stderr %q)", err, stderr.String())
		}
		switch f := fr.Frame.(type) {
		case *helperv1.Frame_Heartbeat:
			res.heartbeats++
		case *helperv1.Frame_Response:
			if res.resp != nil {
				t.Fatal("helper sent two responses")
			}
			res.resp = f.Response
			stdin.Close() // the call is over: as the gateway does
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper exited with %v (stderr %q)", err, stderr.String())
	}
	res.elapsed = time.Since(start)
	res.stderr = stderr.String()
	if res.resp == nil {
		t.Fatalf("helper sent no response (stderr %q)", res.stderr)
	}
	return res
}

func fileCall(t testing.TB, root string, op *executionv1.FileOperation) (*executionv1.FileResult, *helperv1.Error) {
	t.Helper()
	r := call(t, root, &helperv1.Request{RequestId: "t", Operation: &helperv1.Request_File{File: op}}, callOptions{})
	if e := r.resp.GetError(); e != nil {
		return nil, e
	}
	if r.resp.GetRequestId() != "t" {
		t.Fatalf("request id not echoed: %q", r.resp.GetRequestId())
	}
	return r.resp.GetFile(), nil
}

func mustFile(t testing.TB, root string, op *executionv1.FileOperation) *executionv1.FileResult {
	t.Helper()
	res, e := fileCall(t, root, op)
	if e != nil {
		t.Fatalf("file operation failed: %v %s", e.GetCode(), e.GetMessage())
	}
	return res
}

func wantCode(t testing.TB, root string, op *executionv1.FileOperation, want helperv1.ErrorCode) {
	t.Helper()
	_, e := fileCall(t, root, op)
	if e.GetCode() != want {
		t.Fatalf("want %v, got %v (%s)", want, e.GetCode(), e.GetMessage())
	}
}

func command(t testing.TB, root string, spec *executionv1.CommandSpec, o callOptions) (*executionv1.CommandResult, result) {
	t.Helper()
	r := call(t, root, &helperv1.Request{RequestId: "c", Operation: &helperv1.Request_Command{Command: spec}}, o)
	if e := r.resp.GetError(); e != nil {
		return nil, r
	}
	return r.resp.GetCommand(), r
}

// Operation constructors keep the tests readable.
func readOp(p string) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte(p)}}}
}

func writeOp(p, content string, mode executionv1.WriteMode) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{Path: []byte(p), Content: []byte(content), Mode: mode}}}
}

func statOp(p string) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Stat{Stat: &executionv1.StatFile{Path: []byte(p)}}}
}

func listOp(p string, size uint32, token []byte) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_List{List: &executionv1.ListDirectory{Path: []byte(p), PageSize: size, PageToken: token}}}
}

func mkdirOp(p string, parents bool) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Mkdir{Mkdir: &executionv1.MakeDirectory{Path: []byte(p), Parents: parents}}}
}

func removeOp(p string, recursive bool) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Remove{Remove: &executionv1.RemovePath{Path: []byte(p), Recursive: recursive}}}
}

func renameOp(from, to string) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Rename{Rename: &executionv1.RenamePath{From: []byte(from), To: []byte(to)}}}
}

func copyOp(from, to string, recursive bool) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Copy{Copy: &executionv1.CopyPath{From: []byte(from), To: []byte(to), Recursive: recursive}}}
}

func globOp(pattern string) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Glob{Glob: &executionv1.Glob{Pattern: []byte(pattern)}}}
}

func grepOp(pattern, p string) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Grep{Grep: &executionv1.Grep{Pattern: pattern, Path: []byte(p)}}}
}

func shell(script string) *executionv1.CommandSpec {
	return &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Shell{Shell: script}}
}

func argv(args ...string) *executionv1.CommandSpec {
	return &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: args}}}
}

// workspace returns a fresh workspace root and, beside it, an "outside" directory holding
// a secret that no operation may reveal or change.
func workspace(t testing.TB) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root, outside = filepath.Join(base, "ws"), filepath.Join(base, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, outside
}

func assertOutsideUntouched(t testing.TB, outside string) {
	t.Helper()
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "secret" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("outside directory changed: %v", names)
	}
	data, err := os.ReadFile(filepath.Join(outside, "secret"))
	if err != nil || string(data) != "SECRET" {
		t.Fatalf("outside secret changed: %q %v", data, err)
	}
}

func readRequest(p string) *helperv1.Request {
	return &helperv1.Request{RequestId: "b", Limits: &helperv1.Limits{MaxFileBytes: 8 << 20, MaxCommandBytes: testMaxCommandBytes, MaxCommandMillis: testMaxCommandMs},
		Operation: &helperv1.Request_File{File: readOp(p)}}
}

func writeRequest(p string, content []byte) *helperv1.Request {
	return &helperv1.Request{RequestId: "b", Limits: &helperv1.Limits{MaxFileBytes: 8 << 20, MaxCommandBytes: testMaxCommandBytes, MaxCommandMillis: testMaxCommandMs},
		Operation: &helperv1.Request_File{File: &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{Path: []byte(p), Content: content, Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}}}}}
}
