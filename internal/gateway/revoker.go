package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/podexec"
	"github.com/execplane/execplane/internal/protocol"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Revocation of durable commands (docs/commands.md "Revocation"): a detached command
// outlives its call and its run, but not its grants. Every gateway that observes an
// environment's grant generation raised asks the environment's executor to end the durable
// commands started under an earlier one; the helper's revoke is idempotent, so several
// gateways asking end each command once.
const (
	// revokeWorkers bound the executor calls revocations make at once: a storm of revokes
	// queues instead of taking the replica's exec capacity.
	revokeWorkers = 2
	// revokeTimeout bounds one revocation: the exec, the helper's grace (2 s) and the wait
	// for each final record.
	revokeTimeout = 30 * time.Second
	// maxPendingRevocations bounds the queue: beyond, the oldest is dropped (a later start
	// in that environment still ends what it missed).
	maxPendingRevocations = 4096
	// revokeAgain is when each revocation is asked for a second time: a start admitted just
	// before the raise may reach the executor after the first (its call is fenced as soon
	// as the raise is seen, but a supervisor it had started outlives its call).
	revokeAgain = 15 * time.Second
	// maxRevokedAnswer bounds a revoke's answer: the commands it ended, each one record.
	maxRevokedAnswer = protocol.MaxListCommands
)

// revoker queues the environments whose grants this replica saw revoked and asks their
// executors to end the commands of the earlier generations.
type revoker struct {
	h   *Handler
	log hclog.Logger
	// exec reaches the executor by one exec of its own (podexec.Pool.ExecuteOnce): a
	// session to an environment that is no longer usable — suspending, deleting — closes at
	// once, and those are revocations too.
	exec podexec.ExecuteFunc

	mu      sync.Mutex
	pending map[string]*executionv1alpha1.ExecutionEnvironment // by name, the latest seen
	order   []string
	wake    chan struct{}
	// again are the second passes to come, by name; stopped when Run ends.
	again map[string]*time.Timer
}

func newRevoker(h *Handler, exec podexec.ExecuteFunc) *revoker {
	return &revoker{h: h, exec: exec, log: h.log.Named("revoker"), pending: map[string]*executionv1alpha1.ExecutionEnvironment{}, wake: make(chan struct{}, 1),
		again: map[string]*time.Timer{}}
}

// Observe is the view's hook for an environment whose grant generation was raised: it
// queues it, and its second pass, and returns at once (it runs on the informer's
// goroutine).
func (r *revoker) Observe(env *executionv1alpha1.ExecutionEnvironment) {
	r.queue(env)
	r.second(env)
}

// queue adds env to the revocations to make (the latest version of it, once).
func (r *revoker) queue(env *executionv1alpha1.ExecutionEnvironment) {
	r.mu.Lock()
	if _, queued := r.pending[env.Name]; !queued {
		if len(r.order) >= maxPendingRevocations {
			delete(r.pending, r.order[0])
			r.order = r.order[1:]
		}
		r.order = append(r.order, env.Name)
	}
	r.pending[env.Name] = env
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// next takes the oldest queued environment, nil when none is.
func (r *revoker) next() *executionv1alpha1.ExecutionEnvironment {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.order) == 0 {
		return nil
	}
	name := r.order[0]
	r.order = r.order[1:]
	env := r.pending[name]
	delete(r.pending, name)
	return env
}

// Run serves the queue until ctx ends.
func (r *revoker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range revokeWorkers {
		wg.Go(func() {
			for {
				for env := r.next(); env != nil; env = r.next() {
					r.revoke(ctx, env)
				}
				select {
				case <-ctx.Done():
					return
				case <-r.wake:
				}
			}
		})
	}
	wg.Wait()
	r.mu.Lock()
	for _, t := range r.again {
		t.Stop()
	}
	r.again = map[string]*time.Timer{}
	r.mu.Unlock()
}

// second asks for env's revocation once more after revokeAgain (once per raise seen).
func (r *revoker) second(env *executionv1alpha1.ExecutionEnvironment) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.again[env.Name]; ok {
		t.Stop()
	}
	r.again[env.Name] = time.AfterFunc(revokeAgain, func() {
		r.mu.Lock()
		delete(r.again, env.Name)
		r.mu.Unlock()
		r.queue(env)
	})
}

// revoke asks env's executor to end the commands started under a generation below env's.
func (r *revoker) revoke(ctx context.Context, env *executionv1alpha1.ExecutionEnvironment) {
	gen := env.Status.GrantGeneration
	p, ok := r.h.b.Profiles.Profile(env.Spec.Profile)
	if env.Status.Pod == nil || !ok {
		r.h.cfg.Metrics.revocation("skipped", 0)
		return
	}
	keys, err := r.h.recordKeys(env)
	if err != nil {
		r.h.cfg.Metrics.revocation("failed", 0)
		r.log.Warn("cannot revoke durable commands", logging.KeyEnvironment, env.Name, logging.KeyGeneration, gen, logging.KeyError, err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, revokeTimeout)
	defer cancel()
	limits := limitsOf(p)
	req := &helperv1.Request{
		Version: helperv1.ProtocolVersion_PROTOCOL_VERSION_1, RequestId: fmt.Sprintf("revoke-%d", gen), Limits: limits,
		Operation: &helperv1.Request_Durable{Durable: &helperv1.Durable{
			Op:         &helperv1.Durable_Revoke{Revoke: &helperv1.DurableRevoke{BelowGeneration: uint64(gen)}},
			RecordKeys: keys, GrantGeneration: uint64(gen),
		}},
	}
	resp, err := r.exec(ctx, podexec.TargetOf(env), req, maxRevokedAnswer*recordBytes+durableOverhead)
	if err == nil {
		err = podexec.Refused(resp)
	}
	if err == nil {
		err = checkRevoked(resp.GetDurable(), maxRevokedAnswer)
	}
	if err != nil {
		r.h.cfg.Metrics.revocation("failed", 0)
		r.log.Warn("durable commands not revoked", logging.KeyEnvironment, env.Name, logging.KeyGeneration, gen, logging.KeyError, err)
		return
	}
	ended := len(resp.GetDurable().GetCommands())
	r.h.cfg.Metrics.revocation("ok", ended)
	if ended > 0 {
		r.log.Info("durable commands revoked", logging.KeyEnvironment, env.Name, logging.KeyGeneration, gen, logging.KeyCount, ended)
	}
}

// checkRevoked validates a revoke's answer, which the executor produced: records only, at
// most as many as may run, each a record a helper writes.
func checkRevoked(res *helperv1.DurableResult, most int) error {
	if res == nil || len(res.GetOutput()) > 0 || res.GetMore() || res.GetComplete() || len(res.GetCommands()) > most {
		return fmt.Errorf("%w: a revoke answered with more than its records", podexec.ErrProtocol)
	}
	for _, c := range res.GetCommands() {
		if err := checkInfo(c); err != nil {
			return fmt.Errorf("%w: %v", podexec.ErrProtocol, err)
		}
	}
	return nil
}
