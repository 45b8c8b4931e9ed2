package gateway

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/security"
)

// DefaultMaxEnvironmentCalls is the default bound on concurrent data calls into one
// environment on one replica: room for an agent that reads files while a command runs, far
// from the helpers an executor Pod's pid and memory limits could hold.
const DefaultMaxEnvironmentCalls = 16

// callSlots counts in-flight data calls per environment (by UID, so a re-created
// environment starts afresh) and refuses the call over the bound at once: a busy environment
// answers RESOURCE_EXHAUSTED (retryable) rather than queueing helpers in its Pod.
type callSlots struct {
	limit int
	mu    sync.Mutex
	busy  map[types.UID]int
}

func newCallSlots(limit int) *callSlots {
	return &callSlots{limit: limit, busy: map[types.UID]int{}}
}

// acquire takes a slot for env, or refuses; release gives it back.
func (s *callSlots) acquire(env types.UID) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[env] >= s.limit {
		return nil, fmt.Errorf("%w: %d data calls already run in this environment (on this gateway)", security.ErrResourceExhausted, s.limit)
	}
	s.busy[env]++
	return sync.OnceFunc(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.busy[env]--; s.busy[env] == 0 {
			delete(s.busy, env)
		}
	}), nil
}
