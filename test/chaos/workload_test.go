package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/execplane/execplane/internal/dev/devsystem"
	"github.com/execplane/execplane/internal/dev/history"
	"github.com/execplane/execplane/pkg/apierror"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// Bounds of one operation.
const (
	callTimeout   = 8 * time.Second
	defaultRunTTL = 30 * time.Second // the API's minimum: a lost holder blocks others the least
	// attachWait is how long an Attach waits for the environment to be ready.
	attachWait = 5 * time.Second
	// effectBound is how long after its call an operation whose outcome is unknown may
	// still take effect: its deadline, the longest a write the API server accepted may wait
	// for etcd (a pause lasts 3 s), and margin. Later would be a violation.
	effectBound = callTimeout + 7*time.Second
	// retryFor is how long an agent asks again for an outcome it could not learn: longer
	// than most partitions and pauses the scheduler injects.
	retryFor = 20 * time.Second
)

var owner = &executionv1.Owner{Issuer: "https://chaos.example", Subject: "workload"}

// target is what a workload's clients reach: the fault suite's system, through its fault
// proxies, or the chart's release on the real node (upgrade_test.go).
type target interface {
	// Dial connects the identity name (devsystem.Caller, devsystem.Administrator) to
	// gateway i of 2.
	Dial(name string, i int, opts ...grpc.DialOption) (*grpc.ClientConn, error)
	// RESTConfig reaches the API server as its administrator; ExecutorNamespace holds the
	// environments.
	RESTConfig() *rest.Config
	ExecutorNamespace() string
}

// workload is the clients of one run and what they recorded.
type workload struct {
	target target
	// sys is the fault suite's system (nil for another target).
	sys *system
	// profile is the profile the agents ensure their environments with.
	profile string
	// noLifecycle keeps the agents from suspending and resuming: a data call in flight on a
	// Pod they stop ends OUTCOME_UNKNOWN, which the upgrade test must not count as the
	// upgrade's.
	noLifecycle bool
	// runTTL is the run claims' lifetime asked for (defaultRunTTL when 0). A claim that lapses
	// while its holder's call runs, taken over by the binding's other agent, fences the call:
	// OUTCOME_UNKNOWN by design, which the upgrade test must not count as the upgrade's.
	runTTL time.Duration
	// noStaleProbes keeps the agents from calling with the grants of claims they gave up: a
	// probe admitted by a gateway whose view has not yet seen the release is fenced when it
	// does, OUTCOME_UNKNOWN by design (the upgrade test's concern is the upgrade's doing).
	noStaleProbes bool
	rec           *history.Recorder
	// wrong counts answers that break a promise no model covers (a command's output).
	mu    sync.Mutex
	wrong []string
	// stats counts operations by kind and outcome; written, the writes that succeeded, by
	// binding.
	stats   map[string]int
	written map[string]int
	// deleters end their bindings' environments again and again (deleter_test.go);
	// deletedRevs is every revision a delete of theirs answered DELETING or DELETED.
	deleters    []*deleter
	deletedRevs map[string]bool
	// committed is every binding/revision whose CommitReference was answered: never
	// committed again from the intents feed.
	committed map[string]bool
	// eager agents skip their idle pauses; pace, when set, is waited on before each step
	// (the soak's rate).
	eager bool
	pace  func(context.Context)
}

func newWorkload(sys *system) *workload {
	w := newWorkloadOf(sys)
	w.sys = sys
	return w
}

func newWorkloadOf(t target) *workload {
	return &workload{target: t, profile: profiletest.Name, rec: history.NewRecorder(effectBound), stats: map[string]int{},
		written: map[string]int{}, deletedRevs: map[string]bool{}, committed: map[string]bool{}}
}

// claimTTL is the run claims' lifetime the agents ask for.
func (w *workload) claimTTL() time.Duration {
	if w.runTTL > 0 {
		return w.runTTL
	}
	return defaultRunTTL
}

func (w *workload) fault(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wrong = append(w.wrong, fmt.Sprintf(format, args...))
}

// agent is one client of one binding: it ensures, attaches, takes the run claim, reads and
// writes files, runs commands and gives the claim back, over both gateways.
type agent struct {
	w       *workload
	id      int
	rng     *rand.Rand
	binding string
	api     []executionv1grpc.ExecutionProviderServiceClient

	mu       sync.Mutex // env, for the administrator
	env      *executionv1.EnvironmentRef
	envGrant *executionv1.Grant
	// uncommitted: the binding's reference is still PENDING_CREATE (the agent commits it,
	// as the two-phase protocol asks, before anything else).
	uncommitted bool
	// unknown: the binding's last Ensure ended with no answer (it may have created an
	// environment with a pending reference, which the reference intents then show).
	unknown bool

	run    *claim
	stale  []*claim
	seen   [history.MaxPaths]file
	writes int
}

// claim is a run claim the agent held: its id and run grant.
type claim struct {
	id, run string
	grant   *executionv1.Grant
}

// file is what the agent last saw of a file: its content and version.
type file struct{ content, version string }

func (w *workload) agent(t *testing.T, id int, seed uint64, binding string) *agent {
	a := &agent{w: w, id: id, rng: rand.New(rand.NewPCG(seed, uint64(id))), binding: binding}
	for i := range 2 {
		conn, err := w.target.Dial(devsystem.Caller, i, grpc.WithDefaultCallOptions(grpc.WaitForReady(false)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		// Connected now, not at its first call: the soak's baseline holds the connections
		// the load will use (a connection opened later is the workload's cost, not the
		// gateway's growth — 3 goroutines and a descriptor per gateway).
		conn.Connect()
		a.api = append(a.api, executionv1grpc.NewExecutionProviderServiceClient(conn))
	}
	return a
}

// loop runs operations until ctx ends. It starts with a stampede: once every agent holds
// an environment grant (prepared, then start closed), all acquire at once — exactly one
// per binding may win.
func (a *agent) loop(ctx context.Context, prepared *sync.WaitGroup, start <-chan struct{}) {
	for ctx.Err() == nil && (a.env == nil || a.uncommitted || a.envGrant == nil) {
		a.pace(ctx)
		a.step(ctx)
	}
	prepared.Done()
	select {
	case <-ctx.Done():
		return
	case <-start:
	}
	// The load's end stops new steps, not calls in flight: each runs to its own deadline, so
	// that a call's outcome is the system's doing, not the load's clock.
	calls := context.WithoutCancel(ctx)
	a.acquire(calls)
	for a.pace(ctx); ctx.Err() == nil; a.pace(ctx) {
		a.step(calls)
	}
}

// pace waits for the workload's pace, if it has one, or ctx's end.
func (a *agent) pace(ctx context.Context) {
	if a.w.pace != nil {
		a.w.pace(ctx)
	}
}

func (a *agent) step(ctx context.Context) {
	switch {
	case a.env == nil:
		a.ensure(ctx)
		return
	case a.uncommitted:
		a.commit(ctx)
		return
	case a.envGrant == nil:
		a.attach(ctx)
		return
	}
	r := a.rng.IntN(20)
	if a.run == nil {
		switch {
		case r < 14:
			a.acquire(ctx)
		case r < 16 && len(a.stale) > 0 && !a.w.noStaleProbes:
			a.data(ctx, a.stale[a.rng.IntN(len(a.stale))])
		case r < 17:
			a.ensure(ctx)
		case r == 17 && !a.w.noLifecycle && a.rng.IntN(4) == 0:
			a.lifecycle(ctx, history.Suspend)
		case r == 18 && !a.w.noLifecycle && a.rng.IntN(4) == 0:
			a.lifecycle(ctx, history.Resume)
		case !a.w.eager:
			sleep(ctx, time.Duration(a.rng.IntN(300))*time.Millisecond)
		}
		return
	}
	switch {
	case r < 12:
		a.data(ctx, a.run)
	case r < 13:
		a.renew(ctx)
	case r < 16:
		a.release(ctx)
	case r < 17 && len(a.stale) > 0 && !a.w.noStaleProbes:
		a.data(ctx, a.stale[a.rng.IntN(len(a.stale))])
	case !a.w.eager:
		sleep(ctx, time.Duration(a.rng.IntN(200))*time.Millisecond)
	}
}

func (a *agent) gateway() int { return a.rng.IntN(len(a.api)) }

func (a *agent) call(kind history.Kind, gw int, in history.Input) *history.Pending {
	in.Kind, in.Binding, in.Gateway, in.Called = kind, a.binding, gw, a.w.rec.Now()
	return a.w.rec.Call(a.id, in)
}

func (a *agent) done(p *history.Pending, kind history.Kind, out history.Output) {
	out.Returned = a.w.rec.Now()
	p.Done(out)
	a.w.mu.Lock()
	a.w.stats[statKey(kind, out)]++
	if kind == history.Write && out.Result == history.OK {
		a.w.written[a.binding]++
	}
	a.w.mu.Unlock()
}

// statKey names an outcome in the report's counts: kind, result and a refusal's reason.
func statKey(kind history.Kind, out history.Output) string {
	if out.Result == history.OK || out.Reason == "" {
		return kind.String() + " " + out.Result.String()
	}
	return kind.String() + " " + out.Result.String() + " " + out.Reason
}

func opID() string { return fmt.Sprintf("op-%016x", rand.Uint64()) }

func (a *agent) ensure(ctx context.Context) {
	gw := a.gateway()
	p := a.call(history.Ensure, gw, history.Input{})
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := a.api[gw].EnsureEnvironment(c, &executionv1.EnsureEnvironmentRequest{OperationId: opID(), Owner: owner,
		BindingId: a.binding, Profile: a.w.profile})
	out := heard(err)
	if err == nil {
		ref := resp.GetEnvironment().GetRef()
		out.Value = ref.GetId() + "/" + ref.GetRevision()
		a.setEnv(ref)
		a.envGrant = resp.GetEnvironmentGrant()
	}
	a.done(p, history.Ensure, out)
	a.uncommitted = err == nil && pending(resp.GetEnvironment(), a.binding)
	a.unknown = out.Result == history.Unknown
}

// commit publishes the binding's reference; a failure is tried again at the next step.
func (a *agent) commit(ctx context.Context) {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := a.api[a.gateway()].CommitReference(c, &executionv1.CommitReferenceRequest{OperationId: opID(),
		Target: &executionv1.ReferenceTarget{Owner: owner, Environment: a.env, BindingId: a.binding}})
	if err == nil {
		a.uncommitted = false
		a.w.commitAnswered(a.binding, a.env)
		return
	}
	sleep(ctx, 200*time.Millisecond)
}

func (a *agent) setEnv(ref *executionv1.EnvironmentRef) {
	a.mu.Lock()
	a.env = ref
	a.mu.Unlock()
}

// envRef is the environment the agent uses, for the administrator.
func (a *agent) envRef() *executionv1.EnvironmentRef {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.env
}

func pending(env *executionv1.Environment, binding string) bool {
	for _, r := range env.GetReferences() {
		if r.GetBindingId() == binding {
			return r.GetState() == executionv1.ReferenceState_REFERENCE_STATE_PENDING_CREATE
		}
	}
	return false
}

// attach takes a fresh environment grant, waiting a while for the environment to be ready.
func (a *agent) attach(ctx context.Context) {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := a.api[a.gateway()].AttachEnvironment(c, &executionv1.AttachEnvironmentRequest{Owner: owner, BindingId: a.binding,
		Environment: a.env, WaitReady: durationpb.New(attachWait)})
	switch {
	case err == nil:
		a.envGrant = resp.GetEnvironmentGrant()
	case status.Code(err) == codes.NotFound:
		a.setEnv(nil) // ensure again
	default:
		sleep(ctx, 200*time.Millisecond)
	}
}

func (a *agent) acquire(ctx context.Context) {
	gw := a.gateway()
	a.writes++
	run := fmt.Sprintf("a%d-%d", a.id, a.writes)
	p := a.call(history.Acquire, gw, history.Input{Run: run})
	req := &executionv1.AcquireRunRequest{OperationId: opID(), EnvironmentGrant: a.envGrant,
		Environment: a.env, RunId: run, Ttl: durationpb.New(a.w.claimTTL())}
	resp, err := a.acquireOnce(ctx, gw, req)
	out := heard(err)
	// An outcome it could not learn is mostly asked again under the same operation id, as
	// the SDKs do: the server replays the first outcome or acts once. The rest stay unknown,
	// so that the checker still weighs both branches — but not a burst of them for every
	// partition, which the search cannot decide in a long run.
	// A retry that never reached a gateway (it was down) tells nothing of the first attempt:
	// the outcome stays unknown, not refused.
	if out.Result == history.Unknown && a.rng.IntN(4) != 0 {
		for deadline := time.Now().Add(retryFor); out.Result == history.Unknown && ctx.Err() == nil && time.Now().Before(deadline); {
			sleep(ctx, time.Duration(200+a.rng.IntN(300))*time.Millisecond)
			p.Retry()
			if r, e := a.acquireOnce(ctx, gw, req); !neverSent(e) {
				resp, err, out = r, e, heard(e)
			}
		}
	}
	if err == nil {
		rc := resp.GetRun()
		out.Claim, out.Epoch, out.Expires = rc.GetClaimId(), rc.GetEpoch(), a.w.rec.At(rc.GetExpiresAt().AsTime())
		a.run = &claim{id: rc.GetClaimId(), run: run, grant: resp.GetRunGrant()}
	}
	a.done(p, history.Acquire, out)
	a.refused(ctx, err)
}

func (a *agent) acquireOnce(ctx context.Context, gw int, req *executionv1.AcquireRunRequest) (*executionv1.AcquireRunResponse, error) {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return a.api[gw].AcquireRun(c, req)
}

// refused reacts to a refusal: a grant that no longer holds is dropped (the environment
// grant attached again, the run kept to try as stale), a busy or unready one waited out.
func (a *agent) refused(ctx context.Context, err error) {
	switch apierror.Reason(err) {
	case "":
		if status.Code(err) == codes.Unauthenticated {
			a.envGrant = nil
		}
	case "REVOKED", "GRANT_INVALID":
		a.envGrant = nil
		a.dropRun()
	case "STALE_EPOCH":
		a.dropRun()
	case "NOT_READY", "UNAVAILABLE", "RUN_CLAIM_HELD", "RESOURCE_EXHAUSTED":
		sleep(ctx, time.Duration(100+a.rng.IntN(400))*time.Millisecond)
	}
}

func (a *agent) dropRun() {
	if a.run != nil {
		a.stale = append(a.stale, a.run)
		if len(a.stale) > 4 {
			a.stale = a.stale[1:]
		}
		a.run = nil
	}
}

func (a *agent) renew(ctx context.Context) {
	gw := a.gateway()
	p := a.call(history.Renew, gw, history.Input{Claim: a.run.id})
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := a.api[gw].RenewRun(c, &executionv1.RenewRunRequest{OperationId: opID(), RunGrant: a.run.grant, Environment: a.env,
		Ttl: durationpb.New(a.w.claimTTL())})
	out := heard(err)
	if err == nil {
		rc := resp.GetRun()
		out.Claim, out.Epoch, out.Expires = rc.GetClaimId(), rc.GetEpoch(), a.w.rec.At(rc.GetExpiresAt().AsTime())
		a.run.grant = resp.GetRunGrant()
	}
	a.done(p, history.Renew, out)
	a.refused(ctx, err)
}

func (a *agent) release(ctx context.Context) {
	gw := a.gateway()
	p := a.call(history.Release, gw, history.Input{Claim: a.run.id})
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := a.api[gw].ReleaseRun(c, &executionv1.ReleaseRunRequest{OperationId: opID(), RunGrant: a.run.grant, Environment: a.env})
	a.done(p, history.Release, heard(err))
	a.dropRun() // released or not, the agent stops using it as its own
}

// lifecycle suspends or resumes the binding's environment, as its owner. A suspension is
// refused while a claim is held; a suspended environment resumes on the next Acquire too.
func (a *agent) lifecycle(ctx context.Context, kind history.Kind) {
	gw := a.gateway()
	p := a.call(kind, gw, history.Input{})
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	target := &executionv1.ReferenceTarget{Owner: owner, Environment: a.env, BindingId: a.binding}
	var err error
	if kind == history.Suspend {
		_, err = a.api[gw].SuspendEnvironment(c, &executionv1.SuspendEnvironmentRequest{OperationId: opID(), Target: target})
	} else {
		_, err = a.api[gw].ResumeEnvironment(c, &executionv1.ResumeEnvironmentRequest{OperationId: opID(), Target: target})
	}
	a.done(p, kind, heard(err))
	if err == nil && kind == history.Suspend {
		a.envGrant = nil // every grant died with the suspension
	}
}

// data is one data call with claim k: a write (overwrite or compare-and-swap on what the
// agent last saw), a read, or a command that reads a file.
func (a *agent) data(ctx context.Context, k *claim) {
	path := a.rng.IntN(history.MaxPaths)
	switch r := a.rng.IntN(10); {
	case r < 5:
		a.write(ctx, k, path, r < 3)
	case r < 8:
		a.read(ctx, k, path)
	default:
		a.command(ctx, k, path)
	}
}

func fileName(path int) []byte { return fmt.Appendf(nil, "f%d", path) }

func (a *agent) write(ctx context.Context, k *claim, path int, cas bool) {
	gw := a.gateway()
	a.writes++
	value := fmt.Sprintf("a%d-w%d", a.id, a.writes)
	in := history.Input{Claim: k.id, Path: path, Value: value}
	w := &executionv1.WriteFile{Path: fileName(path), Content: []byte(value), Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}
	if cas {
		in.CAS, in.Expect = true, a.seen[path].content
		w.Mode, w.ExpectedVersion = executionv1.WriteMode_WRITE_MODE_COMPARE_AND_SWAP, a.seen[path].version
		if in.Expect == "" {
			w.Mode, w.ExpectedVersion = executionv1.WriteMode_WRITE_MODE_CREATE_ONLY, ""
		}
	}
	p := a.call(history.Write, gw, in)
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := a.api[gw].Files(c, &executionv1.FilesRequest{RunGrant: k.grant, Environment: a.env,
		Operation: &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: w}}})
	out := heard(err)
	switch {
	case err == nil:
		a.seen[path] = file{content: value, version: resp.GetResult().GetWrite().GetInfo().GetVersion()}
	case cas && (apierror.Reason(err) == "VERSION_MISMATCH" || apierror.Reason(err) == "ALREADY_EXISTS" ||
		apierror.Reason(err) == "NOT_FOUND" && strings.Contains(status.Convert(err).Message(), "compare-and-swap on a missing file")):
		out.Result = history.Mismatch
	}
	a.done(p, history.Write, out)
	if k == a.run {
		a.refused(ctx, err)
	}
}

func (a *agent) read(ctx context.Context, k *claim, path int) {
	gw := a.gateway()
	p := a.call(history.Read, gw, history.Input{Claim: k.id, Path: path})
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := a.api[gw].Files(c, &executionv1.FilesRequest{RunGrant: k.grant, Environment: a.env,
		Operation: &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: fileName(path)}}}})
	out := heard(err)
	switch {
	case err == nil:
		r := resp.GetResult().GetRead()
		out.Value = string(r.GetContent())
		if uint64(len(r.GetContent())) != r.GetInfo().GetSize() {
			a.w.fault("client %d: a read of %s via gw%d answered %d bytes of a file of %d (version %s)", a.id, fileName(path), gw,
				len(r.GetContent()), r.GetInfo().GetSize(), r.GetInfo().GetVersion())
		}
		a.seen[path] = file{content: out.Value, version: r.GetInfo().GetVersion()}
	case apierror.Reason(err) == "NOT_FOUND" && strings.Contains(status.Convert(err).Message(), "no such file or directory"):
		out.Result = history.Absent // the helper's answer (an absent environment's says otherwise)
		a.seen[path] = file{}
	}
	a.done(p, history.Read, out)
	if k == a.run {
		a.refused(ctx, err)
	}
}

// command reads a file with cat in the executor: a read through another path of the data
// plane, judged by the same model.
func (a *agent) command(ctx context.Context, k *claim, path int) {
	gw := a.gateway()
	p := a.call(history.Read, gw, history.Input{Claim: k.id, Path: path, Via: "a command"})
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	name := string(fileName(path))
	id := opID()
	stream, err := a.api[gw].RunCommand(c, &executionv1.RunCommandRequest{RunGrant: k.grant, Environment: a.env,
		CommandId: id, Command: &executionv1.CommandSpec{
			Program: &executionv1.CommandSpec_Shell{Shell: "if [ -e " + name + " ]; then cat " + name + "; else echo absent >&2; exit 3; fi"},
			Timeout: durationpb.New(5 * time.Second)}})
	var stdout, stderr strings.Builder
	var result *executionv1.CommandResult
	for err == nil {
		var ev *executionv1.CommandEvent
		if ev, err = stream.Recv(); err != nil {
			break
		}
		if o := ev.GetOutput(); o != nil {
			if o.GetStream() == executionv1.OutputStream_OUTPUT_STREAM_STDOUT {
				stdout.Write(o.GetData())
			} else {
				stderr.Write(o.GetData())
			}
		}
		if e := ev.GetEnded(); e != nil {
			result = e.GetResult()
		}
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	out := heard(err)
	switch {
	case err != nil:
	case result == nil:
		out.Result = history.Unknown // a stream that ended without an end: not a promise kept
		a.w.fault("client %d: a command's stream ended without its result", a.id)
	case result.GetStdout().GetTotalBytes() != uint64(stdout.Len()) || result.GetStderr().GetTotalBytes() != uint64(stderr.Len()):
		// The stream must carry all of a small output: what the result counts.
		out.Result = history.Unknown
		a.w.fault("client %d: command %s via gw%d streamed %d+%d bytes of output, its result counts %d+%d (%s)", a.id, id, gw,
			stdout.Len(), stderr.Len(), result.GetStdout().GetTotalBytes(), result.GetStderr().GetTotalBytes(), result.GetState())
	case result.GetState() == executionv1.CommandState_COMMAND_STATE_SUCCEEDED:
		out.Value = stdout.String()
	case result.GetExitCode() == 3 && stderr.String() == "absent\n":
		out.Result = history.Absent
	default:
		// Started and ended otherwise (a replaced executor killed it): it read nothing.
		out.Result, out.Reason = history.Unknown, result.GetState().String()
	}
	a.done(p, history.Read, out)
	if k == a.run {
		a.refused(ctx, err)
	}
}

// heard classifies a call's error: a definite refusal changed nothing; an error that
// leaves the outcome open (a deadline, an unavailable or restarted gateway, an outcome
// reported unknown) may have taken effect.
func heard(err error) history.Output {
	if err == nil {
		return history.Output{Result: history.OK}
	}
	reason := apierror.Reason(err)
	if reason == "" {
		reason = status.Code(err).String()
	}
	switch status.Code(err) {
	case codes.Unavailable:
		if neverSent(err) {
			return history.Output{Result: history.Refused, Reason: "connection refused"}
		}
		return history.Output{Result: history.Unknown, Reason: reason}
	case codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal:
		return history.Output{Result: history.Unknown, Reason: reason}
	}
	return history.Output{Result: history.Refused, Reason: reason}
}

// neverSent: the call found no connection to its gateway (killed, not yet restarted), so it
// never reached it.
func neverSent(err error) bool {
	return status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), "connect: connection refused")
}

// admin revokes or replaces a random environment now and then, as an operator would.
type admin struct {
	w    *workload
	id   int
	rng  *rand.Rand
	api  []executionv1grpc.ExecutionProviderServiceClient
	envs versioned.Interface
}

func (w *workload) admin(t *testing.T, id int, seed uint64) *admin {
	envs, err := versioned.NewForConfig(w.target.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	a := &admin{w: w, id: id, rng: rand.New(rand.NewPCG(seed, uint64(id))), envs: envs}
	for i := range 2 {
		conn, err := w.target.Dial(devsystem.Administrator, i)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		// Connected now, not at its first call: the soak's baseline holds the connections
		// the load will use (a connection opened later is the workload's cost, not the
		// gateway's growth — 3 goroutines and a descriptor per gateway).
		conn.Connect()
		a.api = append(a.api, executionv1grpc.NewExecutionProviderServiceClient(conn))
	}
	return a
}

// loop picks an environment the agents ensured every few seconds and revokes or replaces it.
func (a *admin) loop(ctx context.Context, envs func() map[string]*executionv1.EnvironmentRef) {
	for ctx.Err() == nil {
		sleep(ctx, time.Duration(3000+a.rng.IntN(4000))*time.Millisecond)
		refs := envs()
		if len(refs) == 0 || ctx.Err() != nil {
			continue
		}
		bindings := make([]string, 0, len(refs))
		for b := range refs {
			bindings = append(bindings, b)
		}
		slices.Sort(bindings)
		b := bindings[a.rng.IntN(len(bindings))]
		ref := refs[b]
		gw := a.rng.IntN(len(a.api))
		kind := history.Revoke
		if a.rng.IntN(3) == 0 {
			kind = history.Replace
		}
		// The preconditions from the environment as the API server has it, as an operator
		// reads them with kubectl.
		c, cancel := context.WithTimeout(ctx, callTimeout)
		env, err := a.envs.ExecutionV1alpha1().ExecutionEnvironments(a.w.target.ExecutorNamespace()).Get(c, ref.GetId(), metav1.GetOptions{})
		if err != nil {
			cancel()
			continue
		}
		st := env.Status
		p := a.w.rec.Call(a.id, history.Input{Kind: kind, Binding: b, Gateway: gw, Called: a.w.rec.Now()})
		if kind == history.Revoke {
			generation := uint64(st.GrantGeneration)
			_, err = a.api[gw].RevokeEnvironment(c, &executionv1.RevokeEnvironmentRequest{OperationId: opID(), Environment: ref, Reason: "chaos",
				Preconditions: &executionv1.AdminPreconditions{GrantGeneration: &generation}})
		} else {
			epoch, pod := uint64(st.Epoch), ""
			if st.Pod != nil {
				pod = string(st.Pod.UID)
			}
			_, err = a.api[gw].ReplaceExecutor(c, &executionv1.ReplaceExecutorRequest{OperationId: opID(), Environment: ref, Reason: "chaos",
				Preconditions: &executionv1.AdminPreconditions{Epoch: &epoch, PodUid: &pod}})
		}
		cancel()
		out := heard(err)
		out.Returned = a.w.rec.Now()
		p.Done(out)
		a.w.mu.Lock()
		a.w.stats[statKey(kind, out)]++
		a.w.mu.Unlock()
	}
}

// commitAnswered records that a commit of binding on env was answered.
func (w *workload) commitAnswered(binding string, env *executionv1.EnvironmentRef) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.committed[binding+"/"+env.GetRevision()] = true
}

// commitIntents publishes the pending references the intents feed lists of binding, as a
// platform reconciles an Ensure whose answer it never had (docs/api.md, ListReferenceIntents).
// The feed is the leader's cache: a caller polls it, and it may list a reference pending
// for a moment after its commit was answered. Such a reference is never committed again
// here: a commit answered and then lost must show in the sweeps, not be repaired.
func (w *workload) commitIntents(ctx context.Context, api executionv1grpc.ExecutionProviderServiceClient, binding string) {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := api.ListReferenceIntents(c, &executionv1.ListReferenceIntentsRequest{Owner: owner, PageSize: 500})
	if err != nil {
		return
	}
	for _, in := range resp.GetIntents() {
		r, env := in.GetReference(), in.GetEnvironment()
		if r.GetBindingId() != binding || r.GetState() != executionv1.ReferenceState_REFERENCE_STATE_PENDING_CREATE {
			continue
		}
		w.mu.Lock()
		answered := w.committed[binding+"/"+env.GetRevision()]
		w.mu.Unlock()
		if answered {
			continue
		}
		_, _ = api.CommitReference(c, &executionv1.CommitReferenceRequest{OperationId: opID(),
			Target: &executionv1.ReferenceTarget{Owner: owner, Environment: env, BindingId: binding}})
	}
}
