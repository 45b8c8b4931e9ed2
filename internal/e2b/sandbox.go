package e2b

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// A sandbox is the environment of (the API key's owner, binding = the sandbox id): the id is
// minted at create, so it is stable across pause and resume, and another key's sandbox is
// simply not found (another owner's binding).
const (
	// sandboxIDLength: E2B's ids are 20 lowercase letters and digits; so are ours, "i" and
	// 19 random base-32 characters (95 bits).
	sandboxIDLength = 20
	// runID names the run every replica of the front end shares in a sandbox.
	runID = "e2b"
	// runTTL is the shared claim's TTL: renewed every third of it by each replica that
	// holds it; it lapses this long after the last replica stopped using the sandbox.
	runTTL = 2 * time.Minute
	// idleAfter is how long a replica keeps a sandbox it does not use open (its handle,
	// grant and a renewed claim).
	idleAfter = 5 * time.Minute
)

// sandboxAlphabet is base-32 in lowercase, without the easily confused letters.
const sandboxAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// newSandboxID mints a sandbox id.
func newSandboxID() string {
	var b [sandboxIDLength - 1]byte
	_, _ = rand.Read(b[:])
	id := []byte{'i'}
	for _, c := range b {
		id = append(id, sandboxAlphabet[c&31])
	}
	return string(id)
}

// validSandboxID reports whether id could have been minted here: anything else is not
// found without a call.
func validSandboxID(id string) bool {
	if len(id) != sandboxIDLength || id[0] != 'i' {
		return false
	}
	for i := 1; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// errSandboxNotFound: absent, deleted, or another key's.
var errSandboxNotFound = errors.New("sandbox not found")

// errSandboxNotRunning: paused (or pausing, or being deleted): envd calls answer 502 as
// E2B's edge does for a sandbox that is not running.
var errSandboxNotRunning = errors.New("sandbox is not running")

// sandbox is one sandbox as this replica holds it open: the attached environment and the
// run it shares with the other replicas.
type sandbox struct {
	id     string
	tenant *Tenant
	env    *client.Environment
	s      *sandboxes

	// used (unix nanoseconds) and inUse (requests in flight, streams included) keep a
	// sandbox open while it serves; read by sweep without a lock.
	used  atomic.Int64
	inUse atomic.Int32
	// dropped: forgotten (killed, paused, found not running, swept); a request that still
	// holds it acquires nothing more on it.
	dropped atomic.Bool

	// mu serialises the run's acquisition (network calls, held only by this sandbox's
	// callers).
	mu  sync.Mutex
	run *client.Run
}

type sandboxKey struct{ tenant, id string }

// sandboxes are the sandboxes this replica holds open. Nothing here is the truth: every
// entry can be rebuilt from the API (ListEnvironments, AttachEnvironment), by any replica,
// and an entry is only a cache of a running sandbox: a call that finds its run lost looks
// at the API again.
type sandboxes struct {
	c     *client.Client
	now   func() time.Time
	group singleflight.Group

	mu   sync.Mutex
	open map[sandboxKey]*sandbox
}

func newSandboxes(c *client.Client) *sandboxes {
	return &sandboxes{c: c, now: time.Now, open: map[sandboxKey]*sandbox{}}
}

// lookup returns the sandbox's environment as the API answers now, without attaching (an
// attach resumes a suspended environment; a look must not).
func (s *sandboxes) lookup(ctx context.Context, t *Tenant, id string) (*executionv1.Environment, error) {
	if !validSandboxID(id) {
		return nil, errSandboxNotFound
	}
	for env, err := range s.c.ListEnvironments(ctx, t.Owner, client.ListOptions{BindingID: id}) {
		if err != nil {
			return nil, err
		}
		return env, nil
	}
	return nil, errSandboxNotFound
}

// get returns the sandbox held open, opening it when it is running: the calls of envd
// (commands, files) act on a running sandbox only.
func (s *sandboxes) get(ctx context.Context, t *Tenant, id string) (*sandbox, error) {
	key := sandboxKey{t.Hash, id}
	s.mu.Lock()
	sb := s.open[key]
	s.mu.Unlock()
	if sb != nil && !sb.dropped.Load() {
		sb.touch(s.now())
		return sb, nil
	}
	v, err, _ := s.group.Do(key.tenant+"\x00"+key.id, func() (any, error) {
		env, err := s.lookup(ctx, t, id)
		if err != nil {
			return nil, err
		}
		if !running(env.GetLifecycle()) {
			return nil, errSandboxNotRunning
		}
		h, err := s.c.Attach(ctx, client.AttachRequest{Owner: t.Owner, BindingID: id, ID: env.GetRef().GetId(), Revision: env.GetRef().GetRevision()})
		if err != nil {
			return nil, err
		}
		return s.add(t, id, h), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*sandbox), nil
}

// add holds an environment open as the sandbox (after create or connect), or returns the
// entry that holds it already (whose run requests in flight may be using).
func (s *sandboxes) add(t *Tenant, id string, env *client.Environment) *sandbox {
	key := sandboxKey{t.Hash, id}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.open[key]; old != nil && !old.dropped.Load() {
		old.touch(s.now())
		return old
	}
	sb := &sandbox{id: id, tenant: t, env: env, s: s}
	sb.touch(s.now())
	s.open[key] = sb
	return sb
}

// drop forgets a sandbox (killed, paused, not running): its run is left to lapse, or was
// released.
func (s *sandboxes) drop(t *Tenant, id string) {
	s.mu.Lock()
	sb := s.open[sandboxKey{t.Hash, id}]
	delete(s.open, sandboxKey{t.Hash, id})
	s.mu.Unlock()
	if sb != nil {
		sb.leave()
	}
}

// unlist removes this entry from the open ones, unless another has replaced it.
func (sb *sandbox) unlist() {
	key := sandboxKey{sb.tenant.Hash, sb.id}
	sb.s.mu.Lock()
	if sb.s.open[key] == sb {
		delete(sb.s.open, key)
	}
	sb.s.mu.Unlock()
}

// sweep forgets the sandboxes not used for idleAfter and serving nothing, so that their
// claims lapse and the profile's idle policy and the sandbox's own timeout see them as they
// are.
func (s *sandboxes) sweep() {
	now := s.now()
	s.mu.Lock()
	var idle []*sandbox
	for k, sb := range s.open {
		if sb.inUse.Load() == 0 && now.Sub(time.Unix(0, sb.used.Load())) > idleAfter {
			idle = append(idle, sb)
			delete(s.open, k)
		}
	}
	s.mu.Unlock()
	for _, sb := range idle {
		sb.leave()
	}
}

// count is how many sandboxes are open.
func (s *sandboxes) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// closeAll leaves every run (at shutdown: the claims lapse or another replica renews them).
func (s *sandboxes) closeAll() {
	s.mu.Lock()
	open := s.open
	s.open = map[sandboxKey]*sandbox{}
	s.mu.Unlock()
	for _, sb := range open {
		sb.leave()
	}
}

func (sb *sandbox) touch(now time.Time) { sb.used.Store(now.UnixNano()) }

// hold marks a request in flight on the sandbox until the returned function is called.
func (sb *sandbox) hold() func() {
	sb.inUse.Add(1)
	return func() {
		sb.touch(sb.s.now())
		sb.inUse.Add(-1)
	}
}

// leave marks the sandbox dropped and leaves its run (the claim lapses unless another
// replica renews it).
func (sb *sandbox) leave() {
	sb.dropped.Store(true)
	sb.mu.Lock()
	run := sb.run
	sb.run = nil
	sb.mu.Unlock()
	if run != nil {
		run.Leave()
	}
}

// release ends the shared claim (before a pause: a suspension waits for no claim).
func (sb *sandbox) release(ctx context.Context) error {
	sb.mu.Lock()
	run := sb.run
	sb.run = nil
	sb.mu.Unlock()
	if run != nil {
		return run.Close(ctx)
	}
	return nil
}

// runFor returns the sandbox's run, joining the shared claim when this replica holds none
// that is alive: AcquireRun with join answers the binding's live claim of the front end's
// run id instead of replacing it, so replicas never fence each other. A sandbox that is no
// longer running (paused, killed, by a timeout or another replica) is found so here, from
// the API, and forgotten: nothing here resumes it.
func (sb *sandbox) runFor(ctx context.Context) (*client.Run, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.dropped.Load() {
		return nil, errSandboxNotRunning
	}
	if sb.run != nil && sb.run.Err() == nil {
		return sb.run, nil
	}
	if sb.run != nil {
		sb.run.Leave()
		sb.run = nil
	}
	env, err := sb.s.lookup(ctx, sb.tenant, sb.id)
	if err == nil && !running(env.GetLifecycle()) {
		err = errSandboxNotRunning
	}
	if errors.Is(err, errSandboxNotRunning) || errors.Is(err, errSandboxNotFound) {
		sb.dropped.Store(true) // no run is held (above)
		sb.unlist()
	}
	if err != nil {
		return nil, err
	}
	if err := sb.env.Refresh(ctx); err != nil {
		return nil, err
	}
	run, err := sb.env.Acquire(ctx, client.AcquireOptions{RunID: runID, TTL: runTTL, Join: true, NoResume: true})
	if err != nil {
		return nil, err
	}
	sb.run = run
	return run, nil
}

// lost forgets a run a call found ended (superseded, revoked, lapsed), so that the next
// call joins the claim again or finds the sandbox not running.
func (sb *sandbox) lost(run *client.Run) {
	sb.mu.Lock()
	if sb.run == run {
		sb.run = nil
	}
	sb.mu.Unlock()
	run.Leave()
}

// runLost reports an answer that proves the run used is over: another call under a fresh
// one may succeed.
func runLost(run *client.Run, err error) bool {
	if err == nil {
		return false
	}
	if run.Err() != nil {
		return true
	}
	for _, k := range []error{client.ErrStaleEpoch, client.ErrRevoked, client.ErrGrantInvalid} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// running reports the states in which a sandbox is "running" for E2B: its calls are served
// (or will be in a moment: a replacement, a resume the SDK's connect started).
func running(l executionv1.LifecycleState) bool {
	switch l {
	case executionv1.LifecycleState_LIFECYCLE_STATE_PROVISIONING, executionv1.LifecycleState_LIFECYCLE_STATE_READY,
		executionv1.LifecycleState_LIFECYCLE_STATE_REPLACING, executionv1.LifecycleState_LIFECYCLE_STATE_RESUMING:
		return true
	}
	return false
}

// paused reports the states E2B calls "paused": the executor stopped or stopping, the
// workspace kept — suspended by the owner or a timeout, and also retired or degraded by an
// operator (a connect resumes only the suspended ones).
func paused(l executionv1.LifecycleState) bool {
	return !running(l) && !gone(l)
}

// gone reports the states in which a sandbox no longer exists for E2B: being deleted or
// deleted (killed, or ended by its timeout).
func gone(l executionv1.LifecycleState) bool {
	switch l {
	case executionv1.LifecycleState_LIFECYCLE_STATE_DELETING, executionv1.LifecycleState_LIFECYCLE_STATE_DELETED,
		executionv1.LifecycleState_LIFECYCLE_STATE_UNSPECIFIED:
		return true
	}
	return false
}
