package execctl

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/golden"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// scripted is a gateway with fixed answers over real mTLS: the CLI's output and exit codes
// are compared with golden files. (The end-to-end tests run execctl against the real
// processes.)
type scripted struct {
	executionv1grpc.UnimplementedExecutionProviderServiceServer
}

var (
	at       = timestamppb.New(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	fixedEnv = &executionv1.Environment{
		Ref:       &executionv1.EnvironmentRef{Id: "xenv-0123456789abcdef0123", Revision: "5f0e1a1e-0000-4000-8000-000000000001"},
		BindingId: "conv-1", Profile: "sandbox", ProfileDigest: "sha256:" + strings.Repeat("ab", 32),
		Lifecycle: executionv1.LifecycleState_LIFECYCLE_STATE_READY, Ready: true, FenceState: executionv1.FenceState_FENCE_STATE_HEALTHY,
		Epoch: 2, GrantGeneration: 1, PodUid: "8c1d0000-0000-4000-8000-000000000002", PvcUid: "17d80000-0000-4000-8000-000000000003",
		References:    []*executionv1.Reference{{BindingId: "conv-1", State: executionv1.ReferenceState_REFERENCE_STATE_PUBLISHED, UpdatedAt: at}},
		SchemaVersion: 1, CreatedAt: at,
	}
	fileA = &executionv1.FileInfo{Path: []byte("main.py"), Type: executionv1.FileType_FILE_TYPE_REGULAR, Size: 12, Mode: 0o644, ModifiedAt: at, Version: "v1-abc"}
	dirB  = &executionv1.FileInfo{Path: []byte("src"), Type: executionv1.FileType_FILE_TYPE_DIRECTORY, Size: 4096, Mode: 0o755, ModifiedAt: at}
	odd   = &executionv1.FileInfo{Path: []byte("bad\x1b[31mname"), Type: executionv1.FileType_FILE_TYPE_REGULAR, Mode: 0o600, ModifiedAt: at, Version: "v1-def"}
)

// provisioning is fixedEnv before it is Ready: Ensure answers it for the bindings "slow"
// (whose next poll, an Attach, answers Ready) and "never" (whose polls never do).
func provisioning() *executionv1.Environment {
	e := proto.CloneOf(fixedEnv)
	e.Lifecycle, e.Ready = executionv1.LifecycleState_LIFECYCLE_STATE_PROVISIONING, false
	return e
}

func refusal(code codes.Code, reason string) error {
	st, _ := status.New(code, "scripted "+strings.ToLower(reason)).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: errorDomainForTest,
		Metadata: map[string]string{"retryable": "false"}})
	return st.Err()
}

const errorDomainForTest = "execplane.dev"

func (scripted) ValidateProfile(_ context.Context, r *executionv1.ValidateProfileRequest) (*executionv1.ValidateProfileResponse, error) {
	if r.GetProfile() != "sandbox" {
		return nil, refusal(codes.NotFound, "NOT_FOUND")
	}
	return &executionv1.ValidateProfileResponse{Profile: &executionv1.Profile{Name: "sandbox", Digest: fixedEnv.GetProfileDigest(),
		MaxFileBytes: 8 << 20, MaxCommandBytes: 1 << 20, MaxCommandDuration: durationpb.New(10 * time.Minute)}}, nil
}

func (scripted) EnsureEnvironment(_ context.Context, r *executionv1.EnsureEnvironmentRequest) (*executionv1.EnsureEnvironmentResponse, error) {
	if r.GetBindingId() == "denied" {
		return nil, refusal(codes.PermissionDenied, "PERMISSION_DENIED")
	}
	if r.GetBindingId() == "slow" || r.GetBindingId() == "never" {
		return &executionv1.EnsureEnvironmentResponse{Environment: provisioning(), EnvironmentGrant: &executionv1.Grant{Token: "env-grant"}, Created: true}, nil
	}
	return &executionv1.EnsureEnvironmentResponse{Environment: fixedEnv, EnvironmentGrant: &executionv1.Grant{Token: "env-grant"}, Created: true}, nil
}

func (scripted) AttachEnvironment(_ context.Context, r *executionv1.AttachEnvironmentRequest) (*executionv1.AttachEnvironmentResponse, error) {
	if r.GetEnvironment().GetId() != fixedEnv.GetRef().GetId() {
		return nil, refusal(codes.NotFound, "NOT_FOUND")
	}
	if r.GetBindingId() == "never" {
		return &executionv1.AttachEnvironmentResponse{Environment: provisioning(), EnvironmentGrant: &executionv1.Grant{Token: "env-grant"}}, nil
	}
	return &executionv1.AttachEnvironmentResponse{Environment: fixedEnv, EnvironmentGrant: &executionv1.Grant{Token: "env-grant"}}, nil
}

func (scripted) AcquireRun(_ context.Context, r *executionv1.AcquireRunRequest) (*executionv1.AcquireRunResponse, error) {
	return &executionv1.AcquireRunResponse{Environment: fixedEnv, Run: &executionv1.RunClaim{RunId: r.GetRunId(), Epoch: 3},
		RunGrant: &executionv1.Grant{Token: "secret-run-grant", ExpiresAt: at}}, nil
}

func (scripted) ReleaseRun(context.Context, *executionv1.ReleaseRunRequest) (*executionv1.ReleaseRunResponse, error) {
	return &executionv1.ReleaseRunResponse{Environment: fixedEnv}, nil
}

func (scripted) Files(_ context.Context, r *executionv1.FilesRequest) (*executionv1.FilesResponse, error) {
	op := r.GetOperation()
	res := &executionv1.FileResult{}
	switch {
	case op.GetStat() != nil && string(op.GetStat().GetPath()) == "missing":
		return nil, refusal(codes.NotFound, "NOT_FOUND")
	case op.GetStat() != nil:
		res.Result = &executionv1.FileResult_Stat{Stat: &executionv1.StatFileResult{Info: fileA}}
	case op.GetList() != nil && len(op.GetList().GetPath()) == 0:
		return nil, refusal(codes.InvalidArgument, "INVALID_ARGUMENT") // as the gateway does: "." names the root
	case op.GetList() != nil && string(op.GetList().GetPath()) == ".":
		res.Result = &executionv1.FileResult_List{List: &executionv1.ListDirectoryResult{Entries: []*executionv1.FileInfo{fileA, odd, dirB}}}
	case op.GetList() != nil:
		res.Result = &executionv1.FileResult_List{List: &executionv1.ListDirectoryResult{Entries: []*executionv1.FileInfo{fileA}}}
	case op.GetRead() != nil:
		res.Result = &executionv1.FileResult_Read{Read: &executionv1.ReadFileResult{Content: []byte("print('hi')\n"), Info: fileA}}
	case op.GetWrite() != nil && op.GetWrite().GetExpectedVersion() == "stale":
		return nil, refusal(codes.Aborted, "VERSION_MISMATCH")
	case op.GetWrite() != nil:
		res.Result = &executionv1.FileResult_Write{Write: &executionv1.WriteFileResult{Info: fileA}}
	case op.GetGrep() != nil:
		res.Result = &executionv1.FileResult_Grep{Grep: &executionv1.GrepResult{Matches: []*executionv1.GrepMatch{{Path: []byte("main.py"), LineNumber: 1, Line: []byte("print('hi')")}}, FilesSearched: 2}}
	default:
		return nil, refusal(codes.InvalidArgument, "INVALID_ARGUMENT")
	}
	return &executionv1.FilesResponse{Result: res}, nil
}

// durable is the scripted durable command.
func durable(id string, state executionv1.CommandState) *executionv1.CommandInfo {
	c := &executionv1.CommandInfo{CommandId: id, State: state, RunId: "turn-1", Epoch: 2, StartedAt: at, Detached: true, StdoutBytes: 12}
	if state != executionv1.CommandState_COMMAND_STATE_RUNNING {
		c.Result = &executionv1.CommandResult{State: state, ExitCode: -1, Signal: 15, StartedAt: at, Duration: durationpb.New(time.Second)}
	}
	return c
}

func (scripted) ListCommands(context.Context, *executionv1.ListCommandsRequest) (*executionv1.ListCommandsResponse, error) {
	return &executionv1.ListCommandsResponse{Commands: []*executionv1.CommandInfo{durable("dev-server", executionv1.CommandState_COMMAND_STATE_RUNNING)}}, nil
}

func (scripted) CancelCommand(_ context.Context, r *executionv1.CancelCommandRequest) (*executionv1.CancelCommandResponse, error) {
	if r.GetCommandId() != "dev-server" {
		return nil, refusal(codes.NotFound, "NOT_FOUND")
	}
	return &executionv1.CancelCommandResponse{Command: durable("dev-server", executionv1.CommandState_COMMAND_STATE_CANCELLED)}, nil
}

func (scripted) StartCommand(_ context.Context, r *executionv1.StartCommandRequest) (*executionv1.StartCommandResponse, error) {
	if r.GetDetach() {
		return &executionv1.StartCommandResponse{Command: durable(r.GetCommandId(), executionv1.CommandState_COMMAND_STATE_RUNNING)}, nil
	}
	switch r.GetCommand().GetShell() {
	case "fenced":
		return nil, refusal(codes.FailedPrecondition, "FENCED")
	case "cut":
		return nil, refusal(codes.Unknown, "OUTCOME_UNKNOWN")
	case "busy":
		st, _ := status.New(codes.ResourceExhausted, "busy").WithDetails(&errdetails.ErrorInfo{Reason: "LIMIT_EXCEEDED", Domain: errorDomainForTest, Metadata: map[string]string{"retryable": "false"}})
		return nil, st.Err()
	}
	res := &executionv1.CommandResult{State: executionv1.CommandState_COMMAND_STATE_SUCCEEDED, StartedAt: at, Duration: durationpb.New(5 * time.Millisecond),
		Stdout: &executionv1.CapturedOutput{Head: []byte("out\n"), TotalBytes: 4}, Stderr: &executionv1.CapturedOutput{Head: []byte("err\n"), TotalBytes: 4}, Receipt: "sha256:" + strings.Repeat("0", 64)}
	if r.GetCommand().GetShell() == "exit 3" {
		res.State, res.ExitCode = executionv1.CommandState_COMMAND_STATE_FAILED, 3
	}
	if r.GetCommand().GetShell() == "sleep" {
		res.State, res.ExitCode, res.Signal = executionv1.CommandState_COMMAND_STATE_TIMED_OUT, -1, 9
	}
	return &executionv1.StartCommandResponse{Result: res}, nil
}

// RunCommand answers as StartCommand does, streamed: the same refusals, else started, the
// output and the end.
func (sc scripted) RunCommand(r *executionv1.RunCommandRequest, st grpc.ServerStreamingServer[executionv1.CommandEvent]) error {
	resp, err := sc.StartCommand(st.Context(), &executionv1.StartCommandRequest{RunGrant: r.GetRunGrant(), Environment: r.GetEnvironment(), Command: r.GetCommand()})
	if err != nil {
		return err
	}
	res := resp.GetResult()
	info := &executionv1.CommandInfo{CommandId: r.GetCommandId(), State: executionv1.CommandState_COMMAND_STATE_RUNNING, StartedAt: at}
	events := []*executionv1.CommandEvent{
		{Event: &executionv1.CommandEvent_Started{Started: info}},
		{Event: &executionv1.CommandEvent_Output{Output: &executionv1.OutputChunk{Stream: executionv1.OutputStream_OUTPUT_STREAM_STDOUT, Data: res.GetStdout().GetHead()}}},
		{Event: &executionv1.CommandEvent_Output{Output: &executionv1.OutputChunk{Stream: executionv1.OutputStream_OUTPUT_STREAM_STDERR, Data: res.GetStderr().GetHead()}}},
		{Event: &executionv1.CommandEvent_Ended{Ended: &executionv1.CommandInfo{CommandId: r.GetCommandId(), State: res.GetState(), StartedAt: at,
			StdoutBytes: 4, StderrBytes: 4, Result: res}}},
	}
	for _, e := range events {
		if err := st.Send(e); err != nil {
			return err
		}
	}
	return nil
}

func (scripted) RetireEnvironment(_ context.Context, r *executionv1.RetireEnvironmentRequest) (*executionv1.RetireEnvironmentResponse, error) {
	if r.GetPreconditions().Epoch == nil || r.GetPreconditions().GetEpoch() != fixedEnv.GetEpoch() {
		return nil, refusal(codes.Aborted, "PRECONDITION_MISMATCH")
	}
	return &executionv1.RetireEnvironmentResponse{Environment: fixedEnv}, nil
}

func (scripted) ListReferenceIntents(context.Context, *executionv1.ListReferenceIntentsRequest) (*executionv1.ListReferenceIntentsResponse, error) {
	return &executionv1.ListReferenceIntentsResponse{Intents: []*executionv1.ReferenceIntent{{Environment: fixedEnv.GetRef(),
		Reference: &executionv1.Reference{BindingId: "conv-2", State: executionv1.ReferenceState_REFERENCE_STATE_PENDING_CREATE, UpdatedAt: at}}}}, nil
}

// harness serves the scripted gateway with a development bundle's certificates.
type harness struct {
	env   map[string]string
	state string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	b, err := devbundle.Generate(filepath.Join(t.TempDir(), "bundle"), devbundle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(b.ServerCert, b.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := os.ReadFile(b.CACert)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})))
	executionv1grpc.RegisterExecutionProviderServiceServer(srv, scripted{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	h := &harness{state: t.TempDir()}
	h.env = map[string]string{"EXECPLANE_ADDRESS": l.Addr().String(), "EXECPLANE_CA": b.CACert, "EXECPLANE_CERT": b.Caller.CertFile,
		"EXECPLANE_KEY": b.Caller.KeyFile, "EXECPLANE_SERVER_NAME": "localhost", "EXECPLANE_ISSUER": "https://idp.example",
		"EXECPLANE_OWNER": "alice", "EXECPLANE_STATE_DIR": h.state}
	return h
}

// execctl runs the CLI in-process and returns its output and exit code.
func (h *harness) execctl(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(t.Context(), args, &out, &errOut, func(k string) string { return h.env[k] })
	code = cli.ExitCode(err)
	if err != nil && code != cli.ExitOK {
		var quiet interface{ Quiet() bool }
		if !errors.As(err, &quiet) || !quiet.Quiet() {
			errOut.WriteString("error: " + err.Error() + "\n")
		}
	}
	return strings.ReplaceAll(out.String(), h.state, "$STATE"), strings.ReplaceAll(errOut.String(), h.state, "$STATE"), code
}

func TestGolden(t *testing.T) {
	h := newHarness(t)
	const env = "xenv-0123456789abcdef0123"
	steps := []struct {
		name string
		args []string
		code int
	}{
		{"profiles-get", []string{"profiles", "get", "sandbox"}, 0},
		{"profiles-get-json", []string{"-o", "json", "profiles", "get", "sandbox"}, 0},
		{"profiles-get-missing", []string{"profiles", "get", "absent"}, ExitNotFound},
		{"env-ensure", []string{"env", "ensure", "conv-1", "--profile", "sandbox"}, 0},
		{"env-ensure-json", []string{"env", "ensure", "conv-1", "--profile", "sandbox", "-o", "json"}, 0},
		{"env-ensure-denied", []string{"env", "ensure", "denied", "--profile", "sandbox"}, ExitDenied},
		{"env-ensure-no-profile", []string{"env", "ensure", "conv-1"}, cli.ExitUsage},
		{"fs-before-acquire", []string{"fs", "ls", env}, ExitNotFound},
		{"run-acquire", []string{"run", "acquire", "conv-1", env, "--revision", "5f0e1a1e-0000-4000-8000-000000000001", "--run-id", "turn-1"}, 0},
		{"fs-ls", []string{"fs", "ls", env}, 0},
		{"fs-ls-json", []string{"fs", "ls", env, "-o", "json"}, 0},
		{"fs-ls-dir", []string{"fs", "ls", env, "src"}, 0},
		{"fs-stat-missing", []string{"fs", "stat", env, "missing"}, ExitNotFound},
		{"fs-cat", []string{"fs", "cat", env, "main.py"}, 0},
		{"fs-put-stale", []string{"fs", "put", env, "-", "main.py", "--if-version", "stale"}, ExitConflict},
		{"fs-grep", []string{"fs", "grep", env, "print"}, 0},
		{"exec", []string{"exec", env, "--shell", "ok"}, 0},
		{"exec-exit-3", []string{"exec", env, "--shell", "exit 3"}, 3},
		{"exec-timeout", []string{"exec", env, "--shell", "sleep"}, 124},
		{"exec-json", []string{"exec", env, "-o", "json", "--shell", "exit 3"}, 0},
		{"exec-fenced", []string{"exec", env, "--shell", "fenced"}, ExitPrecondition},
		{"exec-busy", []string{"exec", env, "--shell", "busy"}, ExitRetryLater},
		{"exec-cut", []string{"exec", env, "--shell", "cut"}, ExitUnknown},
		{"exec-no-program", []string{"exec", env}, cli.ExitUsage},
		{"exec-detach", []string{"exec", env, "--detach", "--id", "dev-server", "--", "npm", "run", "dev"}, 0},
		{"cmd-ls", []string{"cmd", "ls", env}, 0},
		{"cmd-cancel", []string{"cmd", "cancel", env, "dev-server", "-o", "json"}, 0},
		{"cmd-cancel-unknown", []string{"cmd", "cancel", env, "nope"}, ExitNotFound},
		{"refs-list", []string{"refs", "list"}, 0},
		{"admin-retire-stale", []string{"admin", "retire", env, "--revision", "5f0e1a1e-0000-4000-8000-000000000001", "--epoch", "9"}, ExitConflict},
		{"admin-retire", []string{"admin", "retire", env, "--revision", "5f0e1a1e-0000-4000-8000-000000000001", "--epoch", "2", "-o", "json"}, 0},
		{"run-release", []string{"run", "release", env}, 0},
		{"fs-after-release", []string{"fs", "ls", env}, ExitNotFound},
		{"unknown-command", []string{"fs", "frobnicate"}, cli.ExitUsage},
		{"dev-moved", []string{"dev", "up", "--node", "kwok"}, cli.ExitUsage},
	}
	var all strings.Builder
	for _, s := range steps {
		stdout, stderr, code := h.execctl(t, s.args...)
		if code != s.code {
			t.Errorf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", s.name, code, s.code, stdout, stderr)
		}
		all.WriteString("$ execctl " + strings.Join(s.args, " ") + "\n" + stdout)
		if stderr != "" {
			all.WriteString("[stderr]\n" + stderr)
		}
		all.WriteString("[exit " + itoa(code) + "]\n\n")
	}
	if strings.Contains(all.String(), "secret-run-grant") {
		t.Fatal("a run grant reached the output")
	}
	checkGolden(t, "session.golden", all.String())
}

func TestHelpGolden(t *testing.T) {
	h := &harness{env: map[string]string{}, state: "/nonexistent"} // no EXECPLANE_* defaults in the text
	var all strings.Builder
	for _, args := range [][]string{{"help"}, {"fs", "put", "-h"}, {"fs", "ls", "-h"}, {"exec", "-h"}, {"admin", "help"}} {
		stdout, stderr, code := h.execctl(t, args...)
		all.WriteString("$ execctl " + strings.Join(args, " ") + "\n" + stdout + stderr + "[exit " + itoa(code) + "]\n\n")
	}
	checkGolden(t, "help.golden", all.String())
}

// env ensure's wait for Ready: stdout holds the table alone (what a script parses), stderr
// the progress, in whole lines (nothing else can land on a line left open).
func TestEnsureWaitProgress(t *testing.T) {
	h := newHarness(t)
	const table = "ID                         REVISION                              BINDING  PROFILE  LIFECYCLE  READY  FENCE    EPOCH  GENERATION  RUN\n" +
		"xenv-0123456789abcdef0123  5f0e1a1e-0000-4000-8000-000000000001  conv-1   sandbox  READY      true   HEALTHY  2      1           -\n"
	cases := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr []*regexp.Regexp // one per line
	}{{
		name: "ready on the first poll", args: []string{"env", "ensure", "slow", "--profile", "sandbox"}, stdout: table,
		stderr: []*regexp.Regexp{
			regexp.MustCompile(`^waiting for xenv-0123456789abcdef0123 to be ready \(up to 5m0s\)$`),
			regexp.MustCompile(`^xenv-0123456789abcdef0123 is ready after [0-9.]+(ms|s)$`),
		},
	}, {
		name: "never ready", args: []string{"env", "ensure", "never", "--profile", "sandbox", "--wait", "300ms"}, code: ExitRetryLater,
		stderr: []*regexp.Regexp{
			regexp.MustCompile(`^waiting for xenv-0123456789abcdef0123 to be ready \(up to 300ms\)$`),
			regexp.MustCompile(`^error: .*deadline`),
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr, code := h.execctl(t, c.args...)
			if code != c.code {
				t.Errorf("exit %d, want %d", code, c.code)
			}
			if stdout != c.stdout {
				t.Errorf("stdout:\n got %q\nwant %q", stdout, c.stdout)
			}
			if !strings.HasSuffix(stderr, "\n") {
				t.Errorf("stderr does not end its last line: %q", stderr)
			}
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if len(lines) != len(c.stderr) {
				t.Fatalf("stderr: %d lines, want %d: %q", len(lines), len(c.stderr), stderr)
			}
			for i, re := range c.stderr {
				if !re.MatchString(lines[i]) {
					t.Errorf("stderr line %d: %q does not match %s", i+1, lines[i], re)
				}
			}
		})
	}
}

func TestRunStateIsPrivate(t *testing.T) {
	h := newHarness(t)
	if _, stderr, code := h.execctl(t, "run", "acquire", "conv-1", "xenv-0123456789abcdef0123", "--revision", "5f0e1a1e-0000-4000-8000-000000000001", "--run-id", "r"); code != 0 {
		t.Fatal(stderr)
	}
	fi, err := os.Stat(filepath.Join(h.state, "runs", "xenv-0123456789abcdef0123.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("run file: %v %v", fi, err)
	}
	if _, _, code := h.execctl(t, "fs", "ls", "../../etc"); code != cli.ExitUsage {
		t.Fatalf("an environment id that is a path: exit %d", code)
	}
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	golden.Check(t, filepath.Join("testdata", name), got, *update)
}

func itoa(i int) string { return strconv.Itoa(i) }
