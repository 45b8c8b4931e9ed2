package integration_test

import (
	"crypto/tls"
	"encoding/base64"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/pkg/apierror"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// Every refusal class end to end, through the gateway process: the code and reason of
// DESIGN.md §7, and nothing changed (the environment's record compared before and after).
func TestRefusalClasses(t *testing.T) {
	sys := startSystem(t, 1)
	api := sys.dial(t, "caller", 0)
	s := ensureReady(t, api, "alice", "conv-1")
	ctx := callCtx(t)
	if _, err := s.files(ctx, write("a.txt", "v1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.files(ctx, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Mkdir{Mkdir: &executionv1.MakeDirectory{Path: []byte("dir")}}}); err != nil {
		t.Fatal(err)
	}
	before := s.latest(t)

	forged := func(token string) *executionv1.Grant {
		parts := strings.Split(token, ".")
		sig, _ := base64.RawURLEncoding.DecodeString(parts[2])
		sig[0] ^= 1
		return &executionv1.Grant{Token: parts[0] + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString(sig)}
	}
	files := func(g *executionv1.Grant, o *executionv1.FileOperation) error {
		_, err := api.Files(ctx, &executionv1.FilesRequest{RunGrant: g, Environment: s.envRef, Operation: o})
		return err
	}
	plain := sys.dial(t, plainClient, 0)
	cases := []struct {
		name   string
		call   func() error
		code   codes.Code
		reason string
	}{
		{"malformed binding id", func() error {
			_, err := api.EnsureEnvironment(ctx, &executionv1.EnsureEnvironmentRequest{OperationId: op(), Owner: s.owner, BindingId: "../x", Profile: profiletest.Name})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		// Refused by the gateway's own field checks, not by the control API's message limit.
		{"oversized binding id", func() error {
			_, err := api.EnsureEnvironment(ctx, &executionv1.EnsureEnvironmentRequest{OperationId: op(), Owner: s.owner, BindingId: strings.Repeat("b", 8<<20), Profile: profiletest.Name})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"oversized owner subject", func() error {
			_, err := api.EnsureEnvironment(ctx, &executionv1.EnsureEnvironmentRequest{OperationId: op(), Owner: &executionv1.Owner{Issuer: s.owner.GetIssuer(), Subject: strings.Repeat("s", 8<<20)}, BindingId: "b", Profile: profiletest.Name})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"malformed environment ref", func() error {
			_, err := api.Files(ctx, &executionv1.FilesRequest{RunGrant: s.runG, Environment: &executionv1.EnvironmentRef{Id: "Bad_Name", Revision: "x"}, Operation: read("a.txt")})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"unknown profile", func() error {
			_, err := api.ValidateProfile(ctx, &executionv1.ValidateProfileRequest{Profile: "nope"})
			return err
		}, codes.NotFound, "NOT_FOUND"},
		{"profile digest mismatch", func() error {
			_, err := api.ValidateProfile(ctx, &executionv1.ValidateProfileRequest{Profile: profiletest.Name, ExpectedDigest: "sha256:" + strings.Repeat("0", 64)})
			return err
		}, codes.FailedPrecondition, "PRECONDITION_MISMATCH"},
		{"missing MayAttestOwner", func() error {
			_, err := plain.EnsureEnvironment(ctx, &executionv1.EnsureEnvironmentRequest{OperationId: op(), Owner: s.owner, BindingId: "b", Profile: profiletest.Name})
			return err
		}, codes.PermissionDenied, "PERMISSION_DENIED"},
		{"non-admin calls an admin RPC", func() error {
			_, err := api.RevokeEnvironment(ctx, &executionv1.RevokeEnvironmentRequest{OperationId: op(), Environment: s.envRef,
				Preconditions: &executionv1.AdminPreconditions{GrantGeneration: ptr(before.GetGrantGeneration())}})
			return err
		}, codes.PermissionDenied, "PERMISSION_DENIED"},
		{"no grant", func() error { return files(nil, read("a.txt")) }, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"forged grant", func() error { return files(forged(s.runG.GetToken()), read("a.txt")) }, codes.Unauthenticated, "GRANT_INVALID"},
		{"garbage grant", func() error { return files(&executionv1.Grant{Token: "a.b.c"}, read("a.txt")) }, codes.Unauthenticated, "GRANT_INVALID"},
		{"oversized grant", func() error { return files(&executionv1.Grant{Token: strings.Repeat("a", 5000)}, read("a.txt")) }, codes.Unauthenticated, "GRANT_INVALID"},
		{"environment grant used as a run grant", func() error { return files(s.envG, read("a.txt")) }, codes.Unauthenticated, "GRANT_INVALID"},
		{"run grant used as an environment grant", func() error {
			_, err := api.AcquireRun(ctx, &executionv1.AcquireRunRequest{OperationId: op(), EnvironmentGrant: s.runG, Environment: s.envRef, RunId: "r"})
			return err
		}, codes.Unauthenticated, "GRANT_INVALID"},
		{"no operation", func() error { return files(s.runG, &executionv1.FileOperation{}) }, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"NUL in a path", func() error { return files(s.runG, read("a\x00b")) }, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"path escape", func() error { return files(s.runG, read("../../etc/passwd")) }, codes.PermissionDenied, "PATH_ESCAPE"},
		{"absolute path", func() error { return files(s.runG, read("/etc/passwd")) }, codes.PermissionDenied, "PATH_ESCAPE"},
		{"absent file", func() error { return files(s.runG, read("missing.txt")) }, codes.NotFound, "NOT_FOUND"},
		{"read a directory", func() error { return files(s.runG, read("dir")) }, codes.FailedPrecondition, "WRONG_TYPE"},
		{"create-only over an existing file", func() error {
			return files(s.runG, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
				Path: []byte("a.txt"), Content: []byte("x"), Mode: executionv1.WriteMode_WRITE_MODE_CREATE_ONLY}}})
		}, codes.AlreadyExists, "ALREADY_EXISTS"},
		{"compare-and-swap on a stale version", func() error {
			return files(s.runG, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
				Path: []byte("a.txt"), Content: []byte("x"), Mode: executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP, ExpectedVersion: "stale"}}})
		}, codes.Aborted, "VERSION_MISMATCH"},
		{"write over the profile's max_file_bytes", func() error { return files(s.runG, write("big", strings.Repeat("x", 1<<20+1))) }, codes.ResourceExhausted, "LIMIT_EXCEEDED"},
		{"dangerous environment variable", func() error {
			_, err := api.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: s.runG, Environment: s.envRef, Command: &executionv1.CommandSpec{
				Program: &executionv1.CommandSpec_Shell{Shell: "true"}, Environment: []*executionv1.EnvironmentVariable{{Name: "LD_PRELOAD", Value: "/x.so"}}}})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"timeout above the profile's maximum", func() error {
			spec := shell("true")
			spec.Timeout = durationpb.New(time.Hour)
			_, err := api.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: s.runG, Environment: s.envRef, Command: spec})
			return err
		}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"another run's claim held", func() error {
			_, err := api.AcquireRun(ctx, &executionv1.AcquireRunRequest{OperationId: op(), EnvironmentGrant: s.envG, Environment: s.envRef, RunId: "someone-else"})
			return err
		}, codes.Aborted, "RUN_CLAIM_HELD"},
		{"operation id reused with other arguments", func() error {
			id := op()
			if _, err := api.ReserveSuccessor(ctx, &executionv1.ReserveSuccessorRequest{OperationId: id, Owner: s.owner, Environment: s.envRef,
				SourceBindingId: "conv-1", SuccessorBindingId: "conv-2"}); err != nil {
				return err
			}
			_, err := api.ReserveSuccessor(ctx, &executionv1.ReserveSuccessorRequest{OperationId: id, Owner: s.owner, Environment: s.envRef,
				SourceBindingId: "conv-1", SuccessorBindingId: "conv-3"})
			return err
		}, codes.Aborted, "OPERATION_ID_REUSED"},
	}
	for _, c := range cases {
		err := c.call()
		if got := status.Code(err); got != c.code || apierror.Reason(err) != c.reason {
			t.Errorf("%s: got %v (%s), want %s/%s", c.name, err, apierror.Reason(err), c.code, c.reason)
		}
	}
	// The content is unchanged by every refused write.
	if r, err := s.files(ctx, read("a.txt")); err != nil || string(r.GetRead().GetContent()) != "v1" {
		t.Fatalf("a.txt after the refusals: %v %v", r, err)
	}
	after := s.latest(t)
	// The reuse case's first call reserved conv-2; nothing else may differ.
	after.References = slices.DeleteFunc(after.References, func(r *executionv1.Reference) bool { return r.GetBindingId() == "conv-2" })
	if !proto.Equal(before, after) {
		t.Fatalf("the environment changed:\nbefore %v\nafter  %v", before, after)
	}

	// Transport-level refusals: no client certificate; a certificate from another CA.
	t.Run("no client certificate", func(t *testing.T) {
		cfg, err := security.LoadClientTLSConfig(security.ClientFiles{CertFile: sys.material.Caller.CertFile, KeyFile: sys.material.Caller.KeyFile,
			CAFile: sys.material.CACert, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = nil
		wantTransportRefusal(t, sys, cfg)
	})
	t.Run("untrusted CA", func(t *testing.T) {
		other, err := devbundle.Generate(t.TempDir()+"/other", devbundle.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := security.LoadClientTLSConfig(security.ClientFiles{CertFile: other.Caller.CertFile, KeyFile: other.Caller.KeyFile,
			CAFile: sys.material.CACert, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		wantTransportRefusal(t, sys, cfg)
	})
	t.Run("TLS 1.2", func(t *testing.T) {
		cfg, err := security.LoadClientTLSConfig(security.ClientFiles{CertFile: sys.material.Caller.CertFile, KeyFile: sys.material.Caller.KeyFile,
			CAFile: sys.material.CACert, ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
		wantTransportRefusal(t, sys, cfg)
	})
	if got := sys.gateways[0].metric(t, "execplane_gateway_handshake_rejections_total"); got < 3 {
		t.Errorf("handshake rejections counted: %v, want at least 3", got)
	}
	if got := sys.gateways[0].metric(t, "execplane_gateway_refusals_total"); got < float64(len(cases)-1) {
		t.Errorf("refusals counted: %v, want at least %d", got, len(cases)-1)
	}
}

func wantTransportRefusal(t *testing.T, sys *system, cfg *tls.Config) {
	t.Helper()
	conn, err := grpc.NewClient(sys.gateways[0].Listen, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = executionv1grpc.NewExecutionProviderServiceClient(conn).ValidateProfile(clustertest.Context(t, 10*time.Second),
		&executionv1.ValidateProfileRequest{Profile: profiletest.Name})
	if code := status.Code(err); code != codes.Unavailable && code != codes.Unauthenticated {
		t.Fatalf("served a peer that should have been refused: %v", err)
	}
}

// A gateway whose executors answer outside the helper protocol (a replaced or compromised
// helper): every hostile answer is refused (INTERNAL, or UNKNOWN when the stream broke), the
// call's deadline is honoured, and the gateway's memory stays bounded. The per-exec hostile
// helpers are met one exec per operation (their gateways run with --sessions=false), the
// session ones over a session.
func TestHostileExecutorThroughTheGateway(t *testing.T) {
	sys := startSystem(t, 1)
	s := ensureReady(t, sys.dial(t, "caller", 0), "alice", "conv-1")
	perExec := slices.Sorted(maps.Keys(clustertest.Hostile))
	names := append(perExec, slices.Sorted(maps.Keys(clustertest.HostileSessions))...)
	for i, name := range names {
		mode := "--sessions=true"
		if i < len(perExec) {
			mode = "--sessions=false"
		}
		sys.gateways = append(sys.gateways, sys.startGateway(t, "hostile-"+name, clustertest.HostileDir+name, mode))
	}
	clustertest.Eventually(t, 30*time.Second, "the hostile gateways ready", func() bool {
		for _, p := range sys.gateways {
			if !p.ready() {
				return false
			}
		}
		return true
	})
	for i, name := range names {
		p := sys.gateways[i+1]
		api := sys.dial(t, "caller", i+1)
		rssBefore := p.metric(t, "process_resident_memory_bytes")
		// "lingers" answers, then never exits: refused after the 5 s exit grace.
		deadline := 2 * time.Second
		if name == "lingers" {
			deadline = 7 * time.Second
		}
		ctx := clustertest.Context(t, deadline)
		start := time.Now()
		_, err := api.Files(ctx, &executionv1.FilesRequest{RunGrant: s.runG, Environment: s.envRef, Operation: read("a.txt")})
		elapsed := time.Since(start)
		// Only the executors that never answer run into the deadline; every other answer is
		// refused as soon as it is seen to be outside the protocol.
		code := status.Code(err)
		want := []codes.Code{codes.Internal, codes.Unknown}
		switch name {
		case "silent", "session-mute":
			want = []codes.Code{codes.DeadlineExceeded}
		case "session-duplicate":
			// Its first answer is a well-formed refusal (no such file); the second breaks
			// the session.
			want = []codes.Code{codes.NotFound}
		}
		if !slices.Contains(want, code) {
			t.Errorf("%s: answered %v, want one of %v", name, err, want)
		}
		if elapsed > deadline+time.Second {
			t.Errorf("%s: took %s past a %s deadline", name, elapsed, deadline)
		}
		if grew := p.metric(t, "process_resident_memory_bytes") - rssBefore; grew > 64<<20 {
			t.Errorf("%s: the gateway's resident memory grew by %.0f bytes", name, grew)
		}
		if strings.HasPrefix(name, "session-") {
			clustertest.Eventually(t, 15*time.Second, name+"'s session closed as a violation, silent or stuck", func() bool {
				return p.metric(t, `execplane_gateway_sessions_closed_total{reason="violation"}`)+
					p.metric(t, `execplane_gateway_sessions_closed_total{reason="silent"}`)+
					p.metric(t, `execplane_gateway_sessions_closed_total{reason="stuck"}`) >= 1
			})
		}
		t.Logf("%s: %s/%s after %s", name, code, apierror.Reason(err), elapsed.Round(time.Millisecond))
	}
}

// One environment takes at most --max-environment-calls data calls at once on a gateway: the
// next is refused at once (RESOURCE_EXHAUSTED, retryable) without reaching the Pod, another
// environment on the same gateway is still served, and the slots come back when the calls end.
func TestEnvironmentCallLimit(t *testing.T) {
	sys := startSystem(t, 1)
	limited := sys.startGateway(t, "limited", clustertest.HelperPath, "--max-environment-calls", "2")
	sys.gateways = append(sys.gateways, limited)
	clustertest.Eventually(t, 30*time.Second, "the limited gateway ready", limited.ready)
	api := sys.dial(t, "caller", 1)
	busy := ensureReady(t, api, "alice", "conv-busy")
	other := ensureReady(t, api, "alice", "conv-other")

	inflight := limited.metric(t, "execplane_gateway_inflight_rpcs")
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := busy.command(callCtx(t), shell("sleep 3"))
			errs <- err
		}()
	}
	clustertest.Eventually(t, 10*time.Second, "two commands in flight", func() bool {
		return limited.metric(t, "execplane_gateway_inflight_rpcs") >= inflight+2
	})
	_, err := busy.files(callCtx(t), write("refused.txt", "x"))
	wantCode(t, "a third call into the busy environment", err, codes.ResourceExhausted, "LIMIT_EXCEEDED")
	if !apierror.Retryable(err) {
		t.Errorf("the refusal is not retryable: %v", err)
	}
	if _, err := other.files(callCtx(t), write("ok.txt", "x")); err != nil {
		t.Fatalf("another environment on the same gateway: %v", err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("a command within the limit: %v", err)
		}
	}
	// The slots are back, and the refused write never happened.
	_, err = busy.files(callCtx(t), read("refused.txt"))
	wantCode(t, "the refused write's file", err, codes.NotFound, "NOT_FOUND")
}
