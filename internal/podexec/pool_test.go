package podexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/helper"
	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/internal/session"
	"github.com/execplane/execplane/pkg/apierror"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// opener is a sessionOpener over in-process helpers: the helper's own session server on a
// temporary workspace (file operations only: a command would exec the test binary), or a
// scripted peer for faults.
type opener struct {
	root string
	// roots, when set, is each executor Pod's workspace (by Pod UID).
	roots map[types.UID]string
	// unsupported: every open finds a helper without sessions.
	unsupported bool
	// serve, when set, replaces the helper for the n-th open (from 0).
	serve func(n int, in io.Reader, out *io.PipeWriter)

	mu      sync.Mutex
	opens   int
	perExec int
	ends    []func()
}

func (o *opener) openSession(ctx context.Context, pod PodRef, cfg session.Config) (*session.Session, error) {
	o.mu.Lock()
	n := o.opens
	o.opens++
	o.mu.Unlock()
	if o.unsupported {
		return nil, session.ErrUnsupported
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	end := func() { inR.Close(); outW.CloseWithError(io.EOF) }
	o.mu.Lock()
	o.ends = append(o.ends, end)
	o.mu.Unlock()
	go func() {
		if o.serve != nil {
			o.serve(n, inR, outW)
		} else {
			root := o.root
			if r, ok := o.roots[pod.UID]; ok {
				root = r
			}
			_ = helper.ServeSession(context.Background(), helper.Config{Root: root}, inR, outW)
		}
		end()
	}()
	return session.Open(ctx, cfg, inW, outR, end)
}

func (o *opener) Execute(_ context.Context, _ PodRef, req *helperv1.Request, _ int) (*helperv1.Response, error) {
	o.mu.Lock()
	o.perExec++
	o.mu.Unlock()
	return &helperv1.Response{RequestId: req.GetRequestId(), Outcome: &helperv1.Response_File{File: &executionv1.FileResult{}}}, nil
}

func (o *opener) counts() (opens, perExec int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.opens, o.perExec
}

// poolView is a mutable environment view for the pool: the fixture's environment, and more.
type poolView struct {
	mu   sync.Mutex
	envs map[string]*v1alpha1.ExecutionEnvironment
	ch   chan struct{}
}

func newPoolView() *poolView {
	return &poolView{envs: map[string]*v1alpha1.ExecutionEnvironment{testEnv: readyEnv()}, ch: make(chan struct{})}
}

func (v *poolView) lookup(name string) *v1alpha1.ExecutionEnvironment {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e := v.envs[name]; e != nil {
		return e.DeepCopy()
	}
	return nil
}

func (v *poolView) changes() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ch
}

// edit changes the fixture's environment (a copy of the pointer the view holds).
func (v *poolView) edit(f func(*v1alpha1.ExecutionEnvironment)) { v.editNamed(testEnv, f) }

func (v *poolView) editNamed(name string, f func(*v1alpha1.ExecutionEnvironment)) {
	v.mu.Lock()
	e := v.envs[name]
	if e == nil {
		e = readyEnv()
		e.Name = name
		v.envs[name] = e
	}
	f(e)
	close(v.ch)
	v.ch = make(chan struct{})
	v.mu.Unlock()
}

func (v *poolView) target() Target { return TargetOf(v.lookup(testEnv)) }

// pool starts a pool over o and the view, following it until the test ends.
func pool(t *testing.T, cfg PoolConfig, o *opener, v *poolView) *Pool {
	t.Helper()
	before := goleak.IgnoreCurrent()
	p := newPool(cfg, o, v.lookup)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, v.changes); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		p.Drain()
		goleak.VerifyNone(t, before, spdyShutdown)
	})
	return p
}

// spdyShutdown is the goroutine spdystream's Connection.Close leaves behind (an exec stream's,
// this test's or an earlier one's in the package): when closing the network connection
// failed, it waits up to a second for a reader of the error before it ends — the library's
// bound, not a leak of ours, and longer than goleak's retries under a loaded machine.
var spdyShutdown = goleak.IgnoreTopFunction("github.com/moby/spdystream.(*Connection).shutdown")

func poolRead(path string) *helperv1.Request {
	return &helperv1.Request{Limits: &helperv1.Limits{MaxFileBytes: 1 << 20, MaxCommandBytes: 1 << 16, MaxCommandMillis: 10_000},
		Operation: &helperv1.Request_File{File: &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte(path)}}}}}
}

func poolWrite(path, content string) *helperv1.Request {
	r := poolRead(path)
	r.Operation = &helperv1.Request_File{File: &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
		Path: []byte(path), Content: []byte(content), Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}}}}
	return r
}

func workspaceWith(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// awaitSessions polls until the pool holds n sessions.
func awaitSessions(t *testing.T, p *Pool, n int) {
	t.Helper()
	clustertest.Eventually(t, 5*time.Second, fmt.Sprintf("the pool holding %d sessions", n), func() bool { return p.Open() == n })
}

func TestSessionsOpenOneSessionPerPodLazily(t *testing.T) {
	o := &opener{root: workspaceWith(t, map[string]string{"a": "alpha"})}
	v := newPoolView()
	p := pool(t, PoolConfig{}, o, v)
	if opens, _ := o.counts(); opens != 0 || p.Open() != 0 {
		t.Fatal("a session was opened before any call")
	}
	var g errgroup.Group
	for range 32 {
		g.Go(func() error {
			resp, err := p.Execute(context.Background(), v.target(), poolRead("a"), 1<<20)
			if err == nil && string(resp.GetFile().GetRead().GetContent()) != "alpha" {
				err = errors.New("wrong content")
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if opens, perExec := o.counts(); opens != 1 || perExec != 0 || p.Open() != 1 {
		t.Fatalf("32 calls opened %d sessions and made %d single execs", opens, perExec)
	}
}

func TestSessionsCloseWhenTheViewMoves(t *testing.T) {
	for name, c := range map[string]struct {
		edit func(*v1alpha1.ExecutionEnvironment)
		want session.Reason
	}{
		"a new run claim (epoch)": {func(e *v1alpha1.ExecutionEnvironment) { e.Status.Epoch++ }, session.ReasonView},
		"a revocation":            {func(e *v1alpha1.ExecutionEnvironment) { e.Status.GrantGeneration++ }, session.ReasonView},
		"a replaced executor": {func(e *v1alpha1.ExecutionEnvironment) {
			e.Status.Pod = &v1alpha1.ObjectIdentity{Name: testPod + "-2", UID: testPodUID + "-2"}
		}, session.ReasonPod},
		"fenced":            {func(e *v1alpha1.ExecutionEnvironment) { e.Status.FenceState = v1alpha1.FenceUnknown }, session.ReasonView},
		"another UID":       {func(e *v1alpha1.ExecutionEnvironment) { e.UID = types.UID("other") }, session.ReasonView},
		"the executor gone": {func(e *v1alpha1.ExecutionEnvironment) { e.Status.Pod = nil }, session.ReasonPod},
	} {
		t.Run(name, func(t *testing.T) {
			o := &opener{root: workspaceWith(t, map[string]string{"a": "alpha"})}
			v := newPoolView()
			p := pool(t, PoolConfig{}, o, v)
			old := v.target()
			if _, err := p.Execute(context.Background(), old, poolRead("a"), 1<<20); err != nil {
				t.Fatal(err)
			}
			s := p.open[sessionKey{env: old.EnvironmentUID, pod: old.Pod.UID}].s
			v.edit(c.edit)
			select {
			case <-s.Done():
			case <-time.After(time.Second):
				t.Fatal("the session outlived the view it was opened under by a second")
			}
			if s.Reason() != c.want {
				t.Fatalf("closed as %q, want %q", s.Reason(), c.want)
			}
			awaitSessions(t, p, 0)
		})
	}
}

func TestSessionsNeverCarryACallOfAnOlderView(t *testing.T) {
	root := workspaceWith(t, map[string]string{"a": "alpha"})
	o := &opener{root: root}
	v := newPoolView()
	p := pool(t, PoolConfig{}, o, v)
	stale := v.target()
	// The newer view opens its session first (the view moved, a new claim's call came).
	v.edit(func(e *v1alpha1.ExecutionEnvironment) { e.Status.Epoch++ })
	if _, err := p.Execute(context.Background(), v.target(), poolRead("a"), 1<<20); err != nil {
		t.Fatal(err)
	}
	_, err := p.Execute(context.Background(), stale, poolWrite("stale", "x"), 1<<20)
	if !errors.Is(err, apierror.ErrStaleEpoch) {
		t.Fatalf("a call admitted under the older view: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "stale")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the older view's write reached the workspace: %v", err)
	}
	if opens, perExec := o.counts(); opens != 1 || perExec != 0 {
		t.Fatalf("opens %d, single execs %d", opens, perExec)
	}
}

func TestSessionsDriveAHelperWithoutSessionsOneExecPerOperation(t *testing.T) {
	o := &opener{unsupported: true}
	v := newPoolView()
	p := pool(t, PoolConfig{}, o, v)
	for range 3 {
		if _, err := p.Execute(context.Background(), v.target(), poolRead("a"), 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	if opens, perExec := o.counts(); opens != 1 || perExec != 3 {
		t.Fatalf("opens %d (the Pod is remembered after one), single execs %d", opens, perExec)
	}
}

func TestSessionsDisabledAndDrained(t *testing.T) {
	o := &opener{root: workspaceWith(t, map[string]string{"a": "alpha"})}
	v := newPoolView()
	off := pool(t, PoolConfig{Disabled: true}, o, v)
	if _, err := off.Execute(context.Background(), v.target(), poolRead("a"), 1<<20); err != nil {
		t.Fatal(err)
	}
	if opens, perExec := o.counts(); opens != 0 || perExec != 1 {
		t.Fatalf("disabled: opens %d, single execs %d", opens, perExec)
	}
	on := pool(t, PoolConfig{}, o, v)
	if _, err := on.Execute(context.Background(), v.target(), poolRead("a"), 1<<20); err != nil {
		t.Fatal(err)
	}
	on.Drain()
	if on.Open() != 0 {
		t.Fatal("sessions survived the drain")
	}
	if _, err := on.Execute(context.Background(), v.target(), poolRead("a"), 1<<20); err != nil {
		t.Fatal(err)
	}
	if opens, perExec := o.counts(); opens != 1 || perExec != 2 {
		t.Fatalf("after the drain: opens %d, single execs %d", opens, perExec)
	}
}

// breakOnFirst is a peer that handshakes and, on the first open only, ends the stream as
// soon as it has read one request (its helper killed mid-operation); later opens serve.
func breakOnFirst(root string) func(n int, in io.Reader, out *io.PipeWriter) {
	return func(n int, in io.Reader, out *io.PipeWriter) {
		if n > 0 {
			_ = helper.ServeSession(context.Background(), helper.Config{Root: root}, in, out)
			return
		}
		var hello helperv1.SessionFrame
		if protocol.ReadFrame(in, &hello, 1<<16) != nil {
			return
		}
		ready, _ := protocol.Accept(hello.GetHello())
		_ = protocol.WriteFrame(out, &helperv1.Frame{Frame: &helperv1.Frame_Ready{Ready: ready}}, 1<<16)
		var req helperv1.SessionFrame
		_ = protocol.ReadFrame(in, &req, protocol.MaxRequestBytes)
	}
}

func TestSessionsRetryOnlyWhatCannotActTwice(t *testing.T) {
	root := workspaceWith(t, map[string]string{"a": "alpha"})
	t.Run("a read is sent again on a new session", func(t *testing.T) {
		o := &opener{serve: breakOnFirst(root)}
		v := newPoolView()
		p := pool(t, PoolConfig{}, o, v)
		resp, err := p.Execute(context.Background(), v.target(), poolRead("a"), 1<<20)
		if err != nil || string(resp.GetFile().GetRead().GetContent()) != "alpha" {
			t.Fatalf("%v %v", resp, err)
		}
		if opens, _ := o.counts(); opens != 2 {
			t.Fatalf("opens %d", opens)
		}
	})
	t.Run("a write's outcome is unknown", func(t *testing.T) {
		o := &opener{serve: breakOnFirst(root)}
		v := newPoolView()
		p := pool(t, PoolConfig{}, o, v)
		_, err := p.Execute(context.Background(), v.target(), poolWrite("b", "x"), 1<<20)
		if !errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("want an unknown outcome, got %v", err)
		}
		if opens, _ := o.counts(); opens != 1 {
			t.Fatalf("the write was retried: opens %d", opens)
		}
		// The next call opens a new session.
		if _, err := p.Execute(context.Background(), v.target(), poolRead("a"), 1<<20); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSessionsCloseIdleAndLeastRecentlyUsed(t *testing.T) {
	root := workspaceWith(t, map[string]string{"a": "alpha"})
	t.Run("idle", func(t *testing.T) {
		o := &opener{root: root}
		v := newPoolView()
		p := pool(t, PoolConfig{Idle: 200 * time.Millisecond}, o, v)
		if _, err := p.Execute(context.Background(), v.target(), poolRead("a"), 1<<20); err != nil {
			t.Fatal(err)
		}
		awaitSessions(t, p, 0)
	})
	t.Run("evicted", func(t *testing.T) {
		o := &opener{root: root}
		v := newPoolView()
		p := pool(t, PoolConfig{Max: 2}, o, v)
		var sessions []*session.Session
		for i := range 3 {
			name := testEnv + string(rune('a'+i)) // three environments' sessions
			v.editNamed(name, func(e *v1alpha1.ExecutionEnvironment) {
				e.UID = types.UID(name)
				e.Status.Pod = &v1alpha1.ObjectIdentity{Name: name, UID: types.UID(name + "-pod")}
			})
			tg := TargetOf(v.lookup(name))
			if _, err := p.Execute(context.Background(), tg, poolRead("a"), 1<<20); err != nil {
				t.Fatal(err)
			}
			p.mu.Lock()
			sessions = append(sessions, p.open[sessionKey{env: tg.EnvironmentUID, pod: tg.Pod.UID}].s)
			p.mu.Unlock()
		}
		select {
		case <-sessions[0].Done():
		case <-time.After(time.Second):
			t.Fatal("the least recently used session stayed open")
		}
		if r := sessions[0].Reason(); r != session.ReasonEvicted {
			t.Fatalf("closed as %q", r)
		}
		if p.Open() > 2 {
			t.Fatalf("%d sessions open", p.Open())
		}
	})
}

// A request of one environment never goes over another's session: each environment's calls
// land in its own executor's workspace, whatever the order.
func TestSessionsKeepEnvironmentsApart(t *testing.T) {
	v := newPoolView()
	roots := map[types.UID]string{}
	var targets []Target
	for _, name := range []string{"xenv-a", "xenv-b"} {
		v.editNamed(name, func(e *v1alpha1.ExecutionEnvironment) {
			e.UID = types.UID(name)
			e.Status.Pod = &v1alpha1.ObjectIdentity{Name: name + "-pod", UID: types.UID(name + "-pod")}
		})
		roots[types.UID(name+"-pod")] = t.TempDir()
		targets = append(targets, TargetOf(v.lookup(name)))
	}
	o := &opener{roots: roots}
	p := pool(t, PoolConfig{}, o, v)
	var g errgroup.Group
	for i := range 40 {
		tg := targets[i%2]
		g.Go(func() error {
			_, err := p.Execute(context.Background(), tg, poolWrite(fmt.Sprintf("f%d", i), tg.Environment), 1<<20)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		tg := targets[i%2]
		for _, other := range targets {
			content, err := os.ReadFile(filepath.Join(roots[other.Pod.UID], fmt.Sprintf("f%d", i)))
			switch {
			case other == tg && (err != nil || string(content) != tg.Environment):
				t.Fatalf("f%d of %s: %q %v", i, tg.Environment, content, err)
			case other != tg && !errors.Is(err, os.ErrNotExist):
				t.Fatalf("f%d of %s reached %s's workspace", i, tg.Environment, other.Environment)
			}
		}
	}
	if opens, _ := o.counts(); opens != 2 {
		t.Fatalf("opens %d, want one per environment", opens)
	}
}
