package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/execplane/execplane/internal/dev/devsystem"
	"github.com/execplane/execplane/internal/dev/history"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// Bounds of the deleters' calls and pacing.
const (
	// deleteWait is how long a DeleteEnvironment waits for DELETED: an executor stops and
	// its claim goes in a few seconds; under a fault it may answer DELETING instead.
	deleteWait = 10 * time.Second
	// deleteTimeout is a delete's deadline: its wait, and an ordinary call's bound beyond it.
	deleteTimeout = deleteWait + callTimeout
	// deleteRetryFor is how long a delete whose outcome the deleter could not learn is sent
	// again under its operation id (the server replays the first outcome or acts once):
	// longer than any fault the scheduler holds and a leader's takeover after it.
	deleteRetryFor = time.Minute
	// deleterRetryPause is the pause before a step refused for now is tried again (Ensure
	// answers NOT_READY until the previous incarnation's delete completed).
	deleterRetryPause = 300 * time.Millisecond
	// deleterIdle bounds the pause between incarnations.
	deleterIdle = time.Second
	// dataAttempts is how often the deleter tries a data call (the marker's read and write,
	// the detached command's start) before it goes on without its answer.
	dataAttempts = 3
	// markerFile names the file a deleter writes into each incarnation: its revision.
	markerFile = "marker"
)

// deleter is a client of a binding of its own that ends its environment again and again:
// Ensure, CommitReference, Attach (until Ready), AcquireRun, a read and a write of the
// marker, now and then a detached command, then DeleteEnvironment. Its operations stay out
// of the histories (whose models track a binding's claim and files, not its incarnations);
// it checks what a delete promises itself, and each broken promise is a wrong answer:
//
//   - an Ensure never answers a revision a delete answered DELETING or DELETED;
//   - a new incarnation's workspace is fresh: its marker is absent, never an earlier
//     revision's (and a marker written in a revision stays until it is deleted);
//   - a delete answers DELETING or DELETED, and so does another delete of that revision
//     under a new operation id (NOT_FOUND once the next Ensure replaced it) — never READY.
type deleter struct {
	w       *workload
	id      int
	rng     *rand.Rand
	binding string
	api     []executionv1grpc.ExecutionProviderServiceClient

	mu sync.Mutex // env and uncommitted, for the run's end
	// env is the incarnation the deleter uses; uncommitted: its reference is still
	// PENDING_CREATE.
	env         *executionv1.EnvironmentRef
	uncommitted bool
	// unknown: the last Ensure ended with no answer (as the agent's).
	unknown bool

	// written: the revisions whose marker write was answered ok.
	written map[string]bool
	runs    int
}

func (w *workload) deleter(t *testing.T, id int, seed uint64, binding string) *deleter {
	d := &deleter{w: w, id: id, rng: rand.New(rand.NewPCG(seed, uint64(id))), binding: binding, written: map[string]bool{}}
	for i := range 2 {
		conn, err := w.target.Dial(devsystem.Caller, i, grpc.WithDefaultCallOptions(grpc.WaitForReady(false)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conn.Connect()
		d.api = append(d.api, executionv1grpc.NewExecutionProviderServiceClient(conn))
	}
	w.deleters = append(w.deleters, d)
	return d
}

// deleted records a revision a delete answered DELETING or DELETED.
func (w *workload) deleted(rev string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deletedRevs[rev] = true
}

// wasDeleted reports a revision a delete answered DELETING or DELETED.
func (w *workload) wasDeleted(rev string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deletedRevs[rev]
}

// deletedRevisions is every revision a delete answered DELETING or DELETED, for the sweep.
func (w *workload) deletedRevisions() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	revs := make(map[string]bool, len(w.deletedRevs))
	for r := range w.deletedRevs {
		revs[r] = true
	}
	return revs
}

// count adds an outcome of the deleter's name (delete, delete again, marker read, detached
// start) to the report's counts.
func (d *deleter) count(name string, out history.Output) {
	key := name + " " + out.Result.String()
	if out.Result != history.OK && out.Reason != "" {
		key += " " + out.Reason
	}
	d.w.mu.Lock()
	d.w.stats[key]++
	d.w.mu.Unlock()
}

func (d *deleter) gateway() int { return d.rng.IntN(len(d.api)) }

// loop runs incarnations until ctx ends. The load's end stops new steps, not calls in
// flight; an incarnation in which a detached command may run is carried to its delete.
func (d *deleter) loop(ctx context.Context) {
	calls := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		d.incarnation(ctx, calls)
		sleep(ctx, time.Duration(d.rng.Int64N(int64(deleterIdle))))
	}
}

// incarnation takes the binding's environment to its delete. A step that cannot go on (the
// environment gone, a grant revoked) ends it: the next Ensure starts over.
func (d *deleter) incarnation(ctx, calls context.Context) {
	env := d.ensure(ctx, calls)
	if env == nil || !d.commit(ctx, calls) {
		return
	}
	grant := d.attach(ctx, calls, env)
	if grant == nil {
		return
	}
	run := d.acquire(ctx, calls, env, grant)
	if run == nil {
		return
	}
	d.checkMarker(calls, env, run)
	d.writeMarker(calls, env, run)
	detached := d.rng.IntN(2) == 0 && d.startSleep(calls, env, run)
	if ctx.Err() != nil && !detached {
		return
	}
	d.delete(calls, env)
}

// ensure asks for the binding's environment until it answers (NOT_READY while the previous
// incarnation's delete completes) and checks that it is not a deleted revision. Its grant
// is not used: Attach waits for the environment to be ready and answers a fresh one.
func (d *deleter) ensure(ctx, calls context.Context) *executionv1.EnvironmentRef {
	for ctx.Err() == nil {
		gw := d.gateway()
		c, cancel := context.WithTimeout(calls, callTimeout)
		resp, err := d.api[gw].EnsureEnvironment(c, &executionv1.EnsureEnvironmentRequest{OperationId: opID(), Owner: owner,
			BindingId: d.binding, Profile: d.w.profile})
		cancel()
		d.mu.Lock()
		d.unknown = err != nil && heard(err).Result == history.Unknown
		d.mu.Unlock()
		if err != nil {
			sleep(ctx, deleterRetryPause)
			continue
		}
		env := resp.GetEnvironment()
		ref := env.GetRef()
		if d.w.wasDeleted(ref.GetRevision()) {
			d.w.fault("deleter %d: Ensure of %s via gw%d answered revision %s (%s), which a delete answered deleting or deleted",
				d.id, d.binding, gw, ref.GetRevision(), env.GetLifecycle())
		}
		d.mu.Lock()
		d.env, d.uncommitted = ref, pending(env, d.binding)
		d.mu.Unlock()
		return ref
	}
	return nil
}

// commit publishes a pending reference, as the two-phase protocol asks; false when it
// could not (the environment gone, or the load's end).
func (d *deleter) commit(ctx, calls context.Context) bool {
	for {
		d.mu.Lock()
		env, uncommitted := d.env, d.uncommitted
		d.mu.Unlock()
		if env == nil || !uncommitted {
			return env != nil
		}
		if ctx.Err() != nil {
			return false
		}
		c, cancel := context.WithTimeout(calls, callTimeout)
		_, err := d.api[d.gateway()].CommitReference(c, &executionv1.CommitReferenceRequest{OperationId: opID(),
			Target: &executionv1.ReferenceTarget{Owner: owner, Environment: env, BindingId: d.binding}})
		cancel()
		switch {
		case err == nil:
			d.mu.Lock()
			d.uncommitted = false
			d.mu.Unlock()
			d.w.commitAnswered(d.binding, env)
		case status.Code(err) == codes.NotFound:
			return false
		default:
			sleep(ctx, deleterRetryPause)
		}
	}
}

// attach waits for the environment to be ready and answers an environment grant.
func (d *deleter) attach(ctx, calls context.Context, env *executionv1.EnvironmentRef) *executionv1.Grant {
	for ctx.Err() == nil {
		c, cancel := context.WithTimeout(calls, callTimeout)
		resp, err := d.api[d.gateway()].AttachEnvironment(c, &executionv1.AttachEnvironmentRequest{Owner: owner, BindingId: d.binding,
			Environment: env, WaitReady: durationpb.New(attachWait)})
		cancel()
		switch {
		case err == nil:
			return resp.GetEnvironmentGrant()
		case status.Code(err) == codes.NotFound:
			return nil
		default:
			sleep(ctx, deleterRetryPause)
		}
	}
	return nil
}

// acquire takes the run claim (the binding's only run: a retry under the same run id
// re-acquires it).
func (d *deleter) acquire(ctx, calls context.Context, env *executionv1.EnvironmentRef, grant *executionv1.Grant) *executionv1.Grant {
	d.runs++
	run := fmt.Sprintf("d%d-%d", d.id, d.runs)
	for ctx.Err() == nil {
		c, cancel := context.WithTimeout(calls, callTimeout)
		resp, err := d.api[d.gateway()].AcquireRun(c, &executionv1.AcquireRunRequest{OperationId: opID(), EnvironmentGrant: grant,
			Environment: env, RunId: run, Ttl: durationpb.New(defaultRunTTL)})
		cancel()
		switch reason := apierror.Reason(err); {
		case err == nil:
			return resp.GetRunGrant()
		case status.Code(err) == codes.NotFound || status.Code(err) == codes.Unauthenticated || reason == "REVOKED" || reason == "GRANT_INVALID":
			return nil
		default:
			sleep(ctx, deleterRetryPause)
		}
	}
	return nil
}

// files sends one file operation, up to dataAttempts times while its outcome is unknown.
func (d *deleter) files(calls context.Context, env *executionv1.EnvironmentRef, run *executionv1.Grant, op *executionv1.FileOperation) (*executionv1.FilesResponse, error) {
	var err error
	for range dataAttempts {
		c, cancel := context.WithTimeout(calls, callTimeout)
		var resp *executionv1.FilesResponse
		resp, err = d.api[d.gateway()].Files(c, &executionv1.FilesRequest{RunGrant: run, Environment: env, Operation: op})
		cancel()
		if heard(err).Result != history.Unknown && !neverSent(err) {
			return resp, err
		}
		sleep(calls, deleterRetryPause)
	}
	return nil, err
}

// checkMarker reads the marker: a new incarnation's workspace has none; one written in this
// revision holds it. Any other revision's content is a workspace that outlived its delete.
func (d *deleter) checkMarker(calls context.Context, env *executionv1.EnvironmentRef, run *executionv1.Grant) {
	resp, err := d.files(calls, env, run, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{
		Read: &executionv1.ReadFile{Path: []byte(markerFile)}}})
	rev := env.GetRevision()
	out := heard(err)
	defer func() { d.count("marker read", out) }()
	switch {
	case err == nil:
		if got := string(resp.GetResult().GetRead().GetContent()); got != rev {
			d.w.fault("deleter %d: in revision %s of %s the %s file holds %q: an earlier incarnation's workspace (deleted: %t)",
				d.id, rev, env.GetId(), markerFile, got, d.w.wasDeleted(got))
		}
	case apierror.Reason(err) == "NOT_FOUND" && strings.Contains(status.Convert(err).Message(), "no such file or directory"):
		out = history.Output{Result: history.Absent}
		if d.written[rev] {
			d.w.fault("deleter %d: the %s file written in revision %s of %s (answered ok) is absent, and no delete of it was answered",
				d.id, markerFile, rev, env.GetId())
		}
	}
}

// writeMarker writes the incarnation's revision into the marker.
func (d *deleter) writeMarker(calls context.Context, env *executionv1.EnvironmentRef, run *executionv1.Grant) {
	rev := env.GetRevision()
	_, err := d.files(calls, env, run, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
		Path: []byte(markerFile), Content: []byte(rev), Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}}})
	if err == nil {
		d.written[rev] = true
	}
}

// startSleep starts a detached command that outlives the call, for the delete to end (the
// node's check finds any process of it left). True when it may be running.
func (d *deleter) startSleep(calls context.Context, env *executionv1.EnvironmentRef, run *executionv1.Grant) bool {
	req := &executionv1.StartCommandRequest{RunGrant: run, Environment: env, Detach: true, CommandId: fmt.Sprintf("d%d-%d-sleep", d.id, d.runs),
		Command: &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: []string{"sleep", "600"}}}}}
	started := false
	for range dataAttempts {
		c, cancel := context.WithTimeout(calls, callTimeout)
		_, err := d.api[d.gateway()].StartCommand(c, req) // the same command id: started at most once
		cancel()
		out := heard(err)
		switch {
		case err == nil:
			d.count("detached start", out)
			return true
		case out.Result == history.Unknown:
			started = true
		case !neverSent(err):
			return started
		}
		sleep(calls, deleterRetryPause)
	}
	return started
}

// delete ends the incarnation: sent again under its operation id while its outcome is
// unknown (up to deleteRetryFor), under a new one after a refusal for now. An answered
// delete is checked, recorded, and asked again under a new operation id.
func (d *deleter) delete(calls context.Context, env *executionv1.EnvironmentRef) {
	target := &executionv1.ReferenceTarget{Owner: owner, Environment: env, BindingId: d.binding}
	req := &executionv1.DeleteEnvironmentRequest{OperationId: opID(), Target: target, Wait: durationpb.New(deleteWait)}
	gw := d.gateway()
	for deadline := time.Now().Add(deleteRetryFor); ; {
		c, cancel := context.WithTimeout(calls, deleteTimeout)
		resp, err := d.api[gw].DeleteEnvironment(c, req)
		cancel()
		out := heard(err)
		retry := time.Now().Before(deadline)
		switch reason := apierror.Reason(err); {
		case err == nil:
			d.count("delete", out)
			lc := resp.GetEnvironment().GetLifecycle()
			if !endedState(lc) {
				d.w.fault("deleter %d: a delete of revision %s of %s via gw%d answered %s", d.id, env.GetRevision(), env.GetId(), gw, lc)
				return
			}
			d.w.deleted(env.GetRevision())
			d.again(calls, env, lc)
			return
		case (out.Result == history.Unknown || neverSent(err)) && retry:
			// The same request: the server replays the first outcome or acts once.
		case (reason == "NOT_READY" || reason == "RUN_CLAIM_HELD" || reason == "RESOURCE_EXHAUSTED") && retry:
			// Refused for now, nothing done: a new operation.
			d.count("delete", out)
			req = &executionv1.DeleteEnvironmentRequest{OperationId: opID(), Target: target, Wait: durationpb.New(deleteWait)}
		default:
			d.count("delete", out)
			return
		}
		sleep(calls, deleterRetryPause)
		gw = d.gateway()
	}
}

// again deletes a deleted revision once more under a new operation id: it must be answered
// as it is, DELETING or DELETED (or NOT_FOUND, once the next Ensure replaced it).
func (d *deleter) again(calls context.Context, env *executionv1.EnvironmentRef, first executionv1.LifecycleState) {
	target := &executionv1.ReferenceTarget{Owner: owner, Environment: env, BindingId: d.binding}
	for deadline := time.Now().Add(retryFor); ; {
		gw := d.gateway()
		c, cancel := context.WithTimeout(calls, callTimeout)
		resp, err := d.api[gw].DeleteEnvironment(c, &executionv1.DeleteEnvironmentRequest{OperationId: opID(), Target: target})
		cancel()
		out := heard(err)
		switch {
		case err == nil:
			d.count("delete again", out)
			if lc := resp.GetEnvironment().GetLifecycle(); !endedState(lc) || resp.GetEnvironment().GetRef().GetRevision() != env.GetRevision() {
				d.w.fault("deleter %d: revision %s of %s, deleted (%s), deleted again via gw%d answered revision %s %s",
					d.id, env.GetRevision(), env.GetId(), first, gw, resp.GetEnvironment().GetRef().GetRevision(), lc)
			}
			return
		case status.Code(err) == codes.NotFound:
			d.count("delete again", out)
			return
		case (out.Result == history.Unknown || neverSent(err) || apierror.Reason(err) == "RESOURCE_EXHAUSTED") && time.Now().Before(deadline):
			sleep(calls, deleterRetryPause)
		case out.Result == history.Unknown || neverSent(err):
			d.count("delete again", out)
			return
		default:
			d.count("delete again", out)
			d.w.fault("deleter %d: revision %s of %s, deleted (%s), deleted again via gw%d was refused: %v",
				d.id, env.GetRevision(), env.GetId(), first, gw, err)
			return
		}
	}
}

// endedState: what a delete answers, and a deleted environment is.
func endedState(lc executionv1.LifecycleState) bool {
	return lc == executionv1.LifecycleState_LIFECYCLE_STATE_DELETING || lc == executionv1.LifecycleState_LIFECYCLE_STATE_DELETED
}

// settle publishes the deleter's pending reference after the load, as the agents' are.
func (d *deleter) settle(ctx context.Context) {
	d.commit(ctx, ctx)
}

// reconcile publishes, from the intents feed, a reference the deleter's last Ensure may have
// left pending without an answer.
func (d *deleter) reconcile(ctx context.Context) {
	d.mu.Lock()
	unknown := d.unknown
	d.mu.Unlock()
	if unknown {
		d.w.commitIntents(ctx, d.api[0], d.binding)
	}
}
