package integration_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/client"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// sdk returns an SDK client of the named client to gateway i.
func (s *system) sdk(t *testing.T, name string, i int) *client.Client {
	t.Helper()
	files, err := s.ClientFiles(name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(client.Config{Address: s.gateways[i].Listen, CAFile: files.CAFile, CertFile: files.CertFile,
		KeyFile: files.KeyFile, ServerName: files.ServerName})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The caller's session through the Go SDK, against the controller and gateway processes and
// the real helper: ensure (waits Ready) → acquire (renewed in the background) → every file
// helper → commands → close (release) → retire → delete-retired, errors tested with
// errors.Is.
func TestSDKSession(t *testing.T) {
	sys := startSystem(t, 1)
	c, admin := sys.sdk(t, "caller", 0), sys.sdk(t, "admin", 0)
	ctx := clustertest.Context(t, 3*time.Minute)
	owner := client.Owner{Issuer: "https://idp.example", Subject: "alice"}

	p, err := c.ValidateProfile(ctx, profiletest.Name, "")
	if err != nil || p.MaxFileBytes != 1<<20 {
		t.Fatalf("validate profile: %+v %v", p, err)
	}
	if _, err := c.ValidateProfile(ctx, profiletest.Name, "sha256:"+strings.Repeat("0", 64)); !errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("a pinned digest that differs: %v", err)
	}

	env, err := c.Ensure(ctx, client.EnsureRequest{Owner: owner, BindingID: "conv-1", Profile: profiletest.Name})
	if err != nil {
		t.Fatalf("ensure: %v", err)
	}
	if !env.Created || !env.Status().GetReady() || env.ID() == "" || env.Revision() == "" {
		t.Fatalf("ensure returned %v (created %v)", env.Status(), env.Created)
	}
	again, err := c.Ensure(ctx, client.EnsureRequest{Owner: owner, BindingID: "conv-1", Profile: profiletest.Name})
	if err != nil || again.Created || again.Revision() != env.Revision() {
		t.Fatalf("a second ensure: %v created=%v %v", again.Ref(), again.Created, err)
	}
	if _, err := c.Attach(ctx, client.AttachRequest{Owner: client.Owner{Issuer: "https://idp.example", Subject: "mallory"},
		BindingID: "conv-1", ID: env.ID(), Revision: env.Revision()}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("another owner attached: %v", err)
	}
	byRef, err := c.Attach(ctx, client.AttachRequest{Owner: owner, BindingID: "conv-1", ID: env.ID(), Revision: env.Revision()})
	if err != nil || !byRef.Status().GetReady() {
		t.Fatalf("attach by the recorded id and revision: %v", err)
	}

	for in, err := range c.ListReferenceIntents(ctx, client.Owner{}) { // every owner's
		if err != nil {
			t.Fatalf("list every owner's intents: %v", err)
		}
		t.Logf("intent %v", in.Reference)
	}
	run, err := env.Acquire(ctx, client.AcquireOptions{RunID: "turn-1", TTL: client.MinRunTTL})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	firstExpiry := run.Claim().GetExpiresAt().AsTime()

	// Files.
	info, err := run.WriteFile(ctx, "src/main.txt", []byte("hello, sdk\n"), client.CreateParents())
	if err != nil || info.Version == "" || info.Size != 11 {
		t.Fatalf("write: %+v %v", info, err)
	}
	if _, err := run.WriteFile(ctx, "src/main.txt", []byte("x"), client.CreateOnly()); !errors.Is(err, client.ErrAlreadyExists) {
		t.Fatalf("create-only over an existing file: %v", err)
	}
	v2, err := run.WriteFile(ctx, "src/main.txt", []byte("hello again\n"), client.IfVersion(info.Version))
	if err != nil {
		t.Fatalf("compare-and-swap with the current version: %v", err)
	}
	_, err = run.WriteFile(ctx, "src/main.txt", []byte("lost update"), client.IfVersion(info.Version))
	if !errors.Is(err, client.ErrVersionMismatch) || !errors.Is(err, client.ErrConflict) {
		t.Fatalf("compare-and-swap with a stale version: %v", err)
	}
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.RequestID == "" || apiErr.Retryable {
		t.Fatalf("the error carries no request id, or claims to be retryable: %#v", apiErr)
	}
	if got, err := run.ReadFile(ctx, "src/main.txt"); err != nil || string(got) != "hello again\n" {
		t.Fatalf("read: %q %v", got, err)
	}
	if st, err := run.Stat(ctx, "src/main.txt"); err != nil || st.Version != v2.Version || st.IsDir() {
		t.Fatalf("stat: %+v %v", st, err)
	}
	if _, err := run.ReadFile(ctx, "../etc/passwd"); err == nil {
		t.Fatal("read outside the workspace succeeded")
	}
	// Streamed content: from a reader that cannot seek, back to a writer; a source that fails
	// midway writes nothing; content over the profile's limit is refused before it travels.
	big := bytes.Repeat([]byte("0123456789abcdef"), 900<<10/16)
	if fi, err := run.WriteFileFrom(ctx, "streamed/big.bin", struct{ io.Reader }{bytes.NewReader(big)}, int64(len(big)), client.CreateParents()); err != nil || fi.Size != int64(len(big)) {
		t.Fatalf("write from a reader: %+v %v", fi, err)
	}
	var back bytes.Buffer
	if n, err := run.ReadFileTo(ctx, "streamed/big.bin", &back); err != nil || n != int64(len(big)) || !bytes.Equal(back.Bytes(), big) {
		t.Fatalf("read to a writer: %d bytes, %v", n, err)
	}
	failing := io.MultiReader(bytes.NewReader(big[:300<<10]), iotest.ErrReader(errors.New("the disk went away")))
	if _, err := run.WriteFileFrom(ctx, "streamed/failed.bin", failing, int64(len(big))); err == nil || !strings.Contains(err.Error(), "the disk went away") {
		t.Fatalf("a failing source: %v", err)
	}
	clustertest.Eventually(t, 10*time.Second, "nothing of the failed write", func() bool {
		_, err := run.Stat(ctx, "streamed/failed.bin")
		return errors.Is(err, client.ErrNotFound)
	})
	if _, err := run.WriteFile(ctx, "streamed/huge.bin", make([]byte, 1<<20+1)); !errors.Is(err, client.ErrExhausted) {
		t.Fatalf("content over max_file_bytes: %v", err)
	}
	if _, err := run.MkdirAll(ctx, "a/b/c"); err != nil {
		t.Fatalf("mkdir -p: %v", err)
	}
	if _, err := run.Mkdir(ctx, "a/b"); !errors.Is(err, client.ErrAlreadyExists) {
		t.Fatalf("mkdir of an existing directory: %v", err)
	}
	// 1,100 entries: List walks three pages.
	if res, err := run.Run(ctx, client.Command{Shell: "mkdir -p many && cd many && i=0; while [ $i -lt 1100 ]; do : > f$i; i=$((i+1)); done"}); err != nil || !res.Succeeded() {
		t.Fatalf("creating many files: %+v %v", res, err)
	}
	n := 0
	for fi, err := range run.List(ctx, "many") {
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if fi.IsDir() || fi.Path == "" {
			t.Fatalf("entry %+v", fi)
		}
		n++
	}
	if n != 1100 {
		t.Fatalf("listed %d entries, want 1100", n)
	}
	if _, err := run.Copy(ctx, "src", "src-copy", client.Recursive()); err != nil {
		t.Fatalf("copy: %v", err)
	}
	if _, err := run.Rename(ctx, "src-copy/main.txt", "src-copy/renamed.txt"); err != nil {
		t.Fatalf("rename: %v", err)
	}
	g, err := run.Glob(ctx, "**/*.txt", "")
	if err != nil || fmt.Sprint(g.Paths) != "[src-copy/renamed.txt src/main.txt]" {
		t.Fatalf("glob: %+v %v", g, err)
	}
	gr, err := run.Grep(ctx, client.GrepRequest{Pattern: "HELLO", IgnoreCase: true, Include: "*.txt"})
	if err != nil || len(gr.Matches) != 2 || gr.Matches[0].Line != 1 {
		t.Fatalf("grep: %+v %v", gr, err)
	}
	if err := run.Remove(ctx, "src-copy"); !errors.Is(err, client.ErrWrongType) {
		t.Fatalf("remove of a non-empty directory without recursion: %v", err)
	}
	if removed, err := run.RemoveAll(ctx, "many"); err != nil || removed != 1101 {
		t.Fatalf("remove -r: %d %v", removed, err)
	}
	if _, err := run.RemoveAll(ctx, "absent"); err != nil {
		t.Fatalf("remove -r of an absent path: %v", err)
	}

	// Commands: argv with env, shell with stdin and a working directory, failure, timeout,
	// truncation.
	res, err := run.Run(ctx, client.Command{Args: []string{"sh", "-c", "echo $GREETING"}, Env: map[string]string{"GREETING": "hi"}})
	if err != nil || !res.Succeeded() || res.Stdout.String() != "hi\n" || res.Receipt == "" {
		t.Fatalf("argv: %+v %v", res, err)
	}
	res, err = run.Run(ctx, client.Command{Shell: "cat main.txt - | wc -l", Dir: "src", Stdin: []byte("one\ntwo\n")})
	if err != nil || strings.TrimSpace(res.Stdout.String()) != "3" {
		t.Fatalf("shell with stdin in src: %+v %v", res, err)
	}
	res, err = run.Run(ctx, client.Command{Shell: "echo oops >&2; exit 3"})
	if err != nil || res.Succeeded() || res.ExitCode != 3 || res.Stderr.String() != "oops\n" {
		t.Fatalf("a failing command: %+v %v", res, err)
	}
	res, err = run.Run(ctx, client.Command{Args: []string{"sleep", "30"}, Timeout: time.Second})
	if err != nil || res.State != executionv1.CommandState_COMMAND_STATE_TIMED_OUT || res.Duration > 3*time.Second {
		t.Fatalf("timeout: %+v %v", res, err)
	}
	res, err = run.Run(ctx, client.Command{Shell: "head -c 200000 /dev/zero | tr '\\0' x"})
	if err != nil || !res.Stdout.Truncated || res.Stdout.Total != 200000 || !bytes.HasPrefix([]byte(res.Stdout.String()), []byte("xxx")) {
		t.Fatalf("truncation: total %d truncated %v %v", res.Stdout.Total, res.Stdout.Truncated, err)
	}

	// The background renewal extends the claim (every TTL/3 = 10 s).
	clustertest.Eventually(t, 20*time.Second, "the claim renewed", func() bool {
		return run.Claim().GetExpiresAt().AsTime().After(firstExpiry)
	})
	if run.Err() != nil {
		t.Fatalf("the run ended: %v", run.Err())
	}

	// Close releases the claim; the run is then unusable, and a second Close is a no-op.
	if err := run.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := run.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := run.ReadFile(ctx, "src/main.txt"); err == nil {
		t.Fatal("read through a closed run")
	}
	if err := env.Refresh(ctx); err != nil || env.Status().GetActiveRun() != nil {
		t.Fatalf("after close: active run %v, %v", env.Status().GetActiveRun(), err)
	}

	// A new run sees the workspace; a second Acquire by another run id supersedes nothing
	// while the first holds.
	run2, err := env.Acquire(ctx, client.AcquireOptions{RunID: "turn-2"})
	if err != nil {
		t.Fatalf("acquire again: %v", err)
	}
	if got, err := run2.ReadFile(ctx, "src/main.txt"); err != nil || string(got) != "hello again\n" {
		t.Fatalf("read in the second run: %q %v", got, err)
	}
	if err := run2.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Administration through the SDK: retire with the exact epoch, then delete-retired.
	if err := env.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	areq := client.AdminRequest{ID: env.ID(), Revision: env.Revision(), Preconditions: client.PreconditionsOf(env.Status()), Reason: "sdk test"}
	stale := areq
	stale.Preconditions.Epoch = ptr(env.Status().GetEpoch() + 7)
	if _, err := admin.Retire(ctx, stale); !errors.Is(err, client.ErrPreconditionFailed) {
		t.Fatalf("retire with a wrong epoch: %v", err)
	}
	if _, err := c.Retire(ctx, areq); !errors.Is(err, client.ErrPermissionDenied) && !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("retire by a non-administrator: %v", err)
	}
	if _, err := admin.Retire(ctx, client.AdminRequest{ID: env.ID(), Revision: env.Revision(), Preconditions: client.Preconditions{Epoch: areq.Preconditions.Epoch}, Reason: "sdk test"}); err != nil {
		t.Fatalf("retire: %v", err)
	}
	clustertest.Eventually(t, 60*time.Second, "retired", func() bool {
		return env.Refresh(ctx) == nil && env.Status().GetLifecycle() == executionv1.LifecycleState_LIFECYCLE_STATE_RETIRED
	})
	if err := admin.DeleteRetired(ctx, client.AdminRequest{ID: env.ID(), Revision: env.Revision(),
		Preconditions: client.Preconditions{PVCUID: ptr(env.Status().GetPvcUid())}, Reason: "sdk test"}); err != nil {
		t.Fatalf("delete retired: %v", err)
	}
	clustertest.Eventually(t, 60*time.Second, "the environment gone", func() bool {
		return errors.Is(env.Refresh(ctx), client.ErrNotFound)
	})
}
