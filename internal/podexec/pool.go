package podexec

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/internal/session"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"

	"github.com/hashicorp/go-hclog"
)

// Bounds of the session pool (docs/sessions.md).
const (
	// DefaultIdle closes a session unused this long: an agent's turn has pauses of
	// seconds, a minute covers them; an idle session costs a stream and a few goroutines.
	DefaultIdle = 60 * time.Second
	// DefaultMaxSessions bounds the sessions one gateway holds; beyond it the least recently
	// used closes. An idle session holds about 280 KiB and 13 goroutines in the gateway,
	// nearly all of it client-go's WebSocket stream (docs/benchmarks.md): 1024 of them are
	// about 290 MiB, well inside the chart's 1 GiB limit beside the calls in flight.
	DefaultMaxSessions = 1024
	// sessionOpenTimeout bounds opening a session (the exec upgrade and the handshake),
	// whatever the first caller's deadline: callers wait under their own.
	sessionOpenTimeout = 15 * time.Second
	// unsupportedMemory is how many executor Pods known not to speak sessions are
	// remembered; a Pod is driven one exec per operation for its whole life.
	unsupportedMemory = 4096
)

// Target is where a data call runs: the environment's executor Pod, under the view of the
// environment that admitted the call.
type Target struct {
	// Environment is the environment's name and UID.
	Environment    string
	EnvironmentUID types.UID
	// Pod is the executor Pod the environment records.
	Pod PodRef
	// Epoch and Generation are the environment's, as the call was admitted.
	Epoch, Generation int64
}

// TargetOf is the target of a call admitted on env.
func TargetOf(env *executionv1alpha1.ExecutionEnvironment) Target {
	t := Target{Environment: env.Name, EnvironmentUID: env.UID, Epoch: env.Status.Epoch, Generation: env.Status.GrantGeneration}
	if env.Status.Pod != nil {
		t.Pod = PodRef{Name: env.Status.Pod.Name, UID: env.Status.Pod.UID}
	}
	return t
}

// PoolConfig configures the pool.
type PoolConfig struct {
	// Disabled drives every call one exec per operation.
	Disabled bool
	// Idle closes a session unused this long (DefaultIdle).
	Idle time.Duration
	// Max bounds the open sessions (DefaultMaxSessions).
	Max int
	// Session bounds each session.
	Session session.Config
	Logger  hclog.Logger
	Metrics *Metrics
}

// sessionOpener opens sessions and runs single execs: the Exec.
type sessionOpener interface {
	openSession(ctx context.Context, pod PodRef, cfg session.Config) (*session.Session, error)
	Execute(ctx context.Context, pod PodRef, req *helperv1.Request, responseCap int) (*helperv1.Response, error)
}

// Pool is what the gateway's handlers execute through: each call goes over a session to its
// target's executor Pod — at most one per (environment, Pod UID), opened by the first call —
// or, for a helper that does not speak sessions (or with sessions disabled), one exec per
// operation.
//
// A session is bound to the view it was opened under: when this gateway's view of its
// environment shows another epoch, grant generation, UID or executor Pod, or the
// environment unusable or gone, the session closes (its helper kills what it runs), so no
// request of a superseded run or a revoked grant reaches the Pod through it. It authorises
// nothing itself: every call was admitted before it gets here.
type Pool struct {
	cfg     PoolConfig
	exec    sessionOpener
	lookup  func(name string) *executionv1alpha1.ExecutionEnvironment
	opening singleflight.Group

	mu          sync.Mutex
	open        map[sessionKey]*pooled
	unsupported map[types.UID]bool
	drained     bool
}

// sessionKey identifies a session: one per environment and executor Pod.
type sessionKey struct {
	env, pod types.UID
}

// pooled is an open session and the view it is bound to.
type pooled struct {
	s      *session.Session
	target Target
}

// NewPool returns the pool over exec. lookup reads this gateway's view of an
// environment (nil when absent).
func NewPool(cfg PoolConfig, exec *Exec, lookup func(string) *executionv1alpha1.ExecutionEnvironment) *Pool {
	return newPool(cfg, exec, lookup)
}

func newPool(cfg PoolConfig, exec sessionOpener, lookup func(string) *executionv1alpha1.ExecutionEnvironment) *Pool {
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultIdle
	}
	if cfg.Max <= 0 {
		cfg.Max = DefaultMaxSessions
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Pool{cfg: cfg, exec: exec, lookup: lookup, open: map[sessionKey]*pooled{}, unsupported: map[types.UID]bool{}}
}

// Execute runs req, a call admitted under the view t records, at t's Pod and returns the
// helper's response.
func (p *Pool) Execute(ctx context.Context, t Target, req *helperv1.Request, responseCap int) (*helperv1.Response, error) {
	if p.cfg.Disabled || p.perExec(t.Pod.UID) {
		return p.exec.Execute(ctx, t.Pod, req, responseCap)
	}
	for attempt := 0; ; attempt++ {
		s, err := p.session(ctx, t)
		switch {
		case errors.Is(err, session.ErrUnsupported):
			return p.exec.Execute(ctx, t.Pod, req, responseCap)
		case err != nil:
			return nil, err
		}
		resp, err := s.Do(ctx, req, responseCap)
		if err == nil {
			p.cfg.Metrics.sessionRequest(s.Served() == 1)
			return resp, nil
		}
		// One more try on a new session, only where it cannot act twice: a request that
		// surely did not run, or a read whose answer the stream lost. Never when the caller
		// is gone, nor after a violation or a change of view (the call's authority moved).
		retry := ctx.Err() == nil && attempt == 0 && retryOn(s.Reason()) &&
			(errors.Is(err, session.ErrNotSent) || (errors.Is(err, session.ErrLost) && protocol.ReadOnly(req)))
		if !retry {
			return nil, sessionError(err)
		}
	}
}

// ExecuteOnce runs req at t by one exec of its own, never on a session: for a call that
// must reach an executor whose environment is no longer usable (a session to it closes at
// once), such as the revocation of its durable commands.
func (p *Pool) ExecuteOnce(ctx context.Context, t Target, req *helperv1.Request, responseCap int) (*helperv1.Response, error) {
	return p.exec.Execute(ctx, t.Pod, req, responseCap)
}

// Stream runs a call with a body at t, its content carried as it goes. A helper without
// bodies — one exec per operation, or a session helper without them — gets the whole
// request. A write is not retried (its body is the caller's, consumed as it went); a read
// is, once, as long as none of its content reached the caller.
func (p *Pool) Stream(ctx context.Context, t Target, req *helperv1.Request, responseCap int, tr session.Transfer) (*helperv1.Response, error) {
	perExec := func(ctx context.Context, t Target, req *helperv1.Request, responseCap int) (*helperv1.Response, error) {
		return p.exec.Execute(ctx, t.Pod, req, responseCap)
	}
	if p.cfg.Disabled || p.perExec(t.Pod.UID) {
		return Whole(ctx, perExec, t, req, responseCap, tr)
	}
	handed := false // a read's content reached the caller: it cannot be sent again
	if take := tr.Download; take != nil {
		tr.Download = func(b []byte) error { handed = true; return take(b) }
	}
	for attempt := 0; ; attempt++ {
		s, err := p.session(ctx, t)
		switch {
		case errors.Is(err, session.ErrUnsupported):
			return Whole(ctx, perExec, t, req, responseCap, tr)
		case err != nil:
			return nil, err
		case !s.Bodies():
			return Whole(ctx, p.Execute, t, req, responseCap, tr)
		}
		resp, err := s.Stream(ctx, req, responseCap, tr)
		if err == nil {
			p.cfg.Metrics.sessionRequest(s.Served() == 1)
			return resp, nil
		}
		lost := errors.Is(err, session.ErrNotSent) || errors.Is(err, session.ErrLost)
		if tr.Download == nil || !lost {
			return nil, sessionError(err)
		}
		// A read changes nothing: one more try while none of it reached the caller, as
		// Execute retries; else the stream broke under it — unreachable, not unknown.
		if handed || ctx.Err() != nil || attempt > 0 || !retryOn(s.Reason()) {
			return nil, fmt.Errorf("%w: %v", ErrExecutorUnreachable, err)
		}
	}
}

// retryOn reports whether a call that failed on a session closed for r may go to a new
// one: not when the view moved (its authority did), nor when the helper broke the protocol
// (it would again).
func retryOn(r session.Reason) bool {
	return r != session.ReasonView && r != session.ReasonPod && r != session.ReasonViolation
}

// sessionError translates a session call's failure into the data plane's vocabulary.
func sessionError(err error) error {
	switch {
	case errors.Is(err, session.ErrViolation):
		return err // protocol.ErrViolation is ErrProtocol
	case errors.Is(err, session.ErrNotSent):
		return fmt.Errorf("%w: %v", ErrExecutorUnreachable, err)
	case errors.Is(err, session.ErrLost):
		return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
	}
	return err
}

// errSupersededView: a call admitted under an older view than the session in use; the
// newer view wins, and this call's authority is gone. Nothing ran.
var errSupersededView = fmt.Errorf("%w: the environment's epoch or grant generation moved while the call was admitted", apierror.ErrStaleEpoch)

// session returns the open session for t, opening it when there is none.
func (p *Pool) session(ctx context.Context, t Target) (*session.Session, error) {
	key := sessionKey{env: t.EnvironmentUID, pod: t.Pod.UID}
	p.mu.Lock()
	if cur := p.open[key]; cur != nil && cur.s.Reason() != "" {
		delete(p.open, key) // closed, not forgotten yet
	}
	if cur := p.open[key]; cur != nil {
		switch {
		case cur.target == t:
			p.mu.Unlock()
			return cur.s, nil
		case cur.target.Epoch > t.Epoch || cur.target.Generation > t.Generation:
			p.mu.Unlock()
			return nil, errSupersededView
		}
		// The call's view is newer: the session's is superseded.
		delete(p.open, key)
		p.mu.Unlock()
		cur.s.Close(session.ReasonView)
	} else {
		p.mu.Unlock()
	}
	flight := fmt.Sprintf("%s/%s/%d/%d", t.EnvironmentUID, t.Pod.UID, t.Epoch, t.Generation)
	ch := p.opening.DoChan(flight, func() (any, error) {
		// Looked up again inside the flight: one that finished since this caller's look-up
		// has pooled the session this caller wants (dial pools it before its flight ends).
		p.mu.Lock()
		if cur := p.open[key]; cur != nil && cur.target == t && cur.s.Reason() == "" {
			p.mu.Unlock()
			return cur.s, nil
		}
		p.mu.Unlock()
		return p.dial(t)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*session.Session), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dial opens a session for t and adds it to the pool.
func (p *Pool) dial(t Target) (*session.Session, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sessionOpenTimeout)
	defer cancel()
	s, err := p.exec.openSession(ctx, t.Pod, p.cfg.Session)
	if errors.Is(err, session.ErrUnsupported) {
		p.markUnsupported(t.Pod.UID)
		p.cfg.Logger.Info("executor helper does not speak sessions: one exec per operation", logging.KeyEnvironment, t.Environment, logging.KeyPod, t.Pod.Name)
	}
	if err != nil {
		return nil, err
	}
	p.cfg.Metrics.sessionOpened()
	key := sessionKey{env: t.EnvironmentUID, pod: t.Pod.UID}
	p.mu.Lock()
	if old := p.open[key]; old != nil && old.target == t && old.s.Reason() == "" {
		// Another flight for the same view finished between this caller's look-up and its
		// flight: that session may carry calls already, so it stays and this one, which
		// carries none, goes.
		p.mu.Unlock()
		s.Close(session.ReasonEvicted)
		return old.s, nil
	}
	var evict []*pooled
	if old := p.open[key]; old != nil {
		evict = append(evict, old) // opened under an older view meanwhile
	}
	p.open[key] = &pooled{s: s, target: t}
	for len(p.open) > p.cfg.Max {
		evict = append(evict, p.leastRecent())
	}
	p.mu.Unlock()
	for _, e := range evict {
		e.s.Close(session.ReasonEvicted)
	}
	go p.forget(key, s)
	// The view may have moved while the session opened.
	p.check(key)
	return s, nil
}

// leastRecent removes and returns the least recently used session. The caller holds mu.
func (p *Pool) leastRecent() *pooled {
	var oldKey sessionKey
	var old *pooled
	for k, c := range p.open {
		if old == nil || c.s.LastUsed().Before(old.s.LastUsed()) {
			oldKey, old = k, c
		}
	}
	delete(p.open, oldKey)
	return old
}

// forget removes a session from the pool once it has closed, for whatever reason.
// The close is counted before the session leaves the pool here, so with no other call on
// the pool a closed session is counted by the time the pool no longer holds it. (A new call
// may take a closed session out first, and a drain takes them all.)
func (p *Pool) forget(key sessionKey, s *session.Session) {
	<-s.Done()
	p.cfg.Metrics.sessionClosed(s.Reason(), s.Served())
	p.mu.Lock()
	if cur := p.open[key]; cur != nil && cur.s == s {
		delete(p.open, key)
	}
	p.mu.Unlock()
}

// perExec reports whether calls to pod go one exec per operation: its helper does not
// speak sessions, or the pool has drained.
func (p *Pool) perExec(pod types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drained || p.unsupported[pod]
}

func (p *Pool) markUnsupported(pod types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.unsupported) >= unsupportedMemory {
		clear(p.unsupported) // forgetting costs one failed open per Pod, nothing more
	}
	p.unsupported[pod] = true
}

// reasonFor says why a session bound to t must close under the current view of its
// environment, or "" when it may stay.
func reasonFor(t Target, env *executionv1alpha1.ExecutionEnvironment) session.Reason {
	switch {
	case env == nil || env.UID != t.EnvironmentUID || env.Status.Epoch != t.Epoch || env.Status.GrantGeneration != t.Generation ||
		authority.Usable(env) != nil:
		return session.ReasonView
	case env.Status.Pod == nil || env.Status.Pod.UID != t.Pod.UID:
		return session.ReasonPod
	}
	return ""
}

// check closes the session of key if the view has moved away from it.
func (p *Pool) check(key sessionKey) {
	p.mu.Lock()
	cur := p.open[key]
	p.mu.Unlock()
	if cur == nil {
		return
	}
	if r := reasonFor(cur.target, p.lookup(cur.target.Environment)); r != "" {
		cur.s.Close(r)
	}
}

// Run follows the view until ctx ends, closing the sessions it supersedes and the idle
// ones. changes yields after every change of the view.
func (p *Pool) Run(ctx context.Context, changes func() <-chan struct{}) {
	idle := time.NewTicker(p.cfg.Idle / 4)
	defer idle.Stop()
	for {
		changed := changes()
		p.sweep(false)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-idle.C:
			p.sweep(true)
		}
	}
}

// sweep closes what the view supersedes and, with idle, what has not been used within the
// idle bound.
func (p *Pool) sweep(idle bool) {
	p.mu.Lock()
	all := make([]*pooled, 0, len(p.open))
	for _, c := range p.open {
		all = append(all, c)
	}
	p.mu.Unlock()
	for _, c := range all {
		if r := reasonFor(c.target, p.lookup(c.target.Environment)); r != "" {
			c.s.Close(r)
		} else if idle && c.s.Idle(p.cfg.Idle) {
			c.s.Close(session.ReasonIdle)
		}
	}
}

// Drain closes every session: the gateway has stopped serving, once its in-flight calls
// ended. A call after it goes one exec per operation.
func (p *Pool) Drain() {
	p.mu.Lock()
	all := p.open
	p.open = map[sessionKey]*pooled{}
	p.drained = true
	p.mu.Unlock()
	for _, c := range all {
		c.s.Close(session.ReasonDrain)
	}
}

// Open counts the open sessions.
func (p *Pool) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.open)
}
