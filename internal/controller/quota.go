package controller

import (
	"fmt"
	"maps"
	"sync"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// The operation id and Event reason of a Suspend a time quota starts (docs/usage.md
// "Quotas").
const (
	quotaSuspendOperation = "quota-suspend"
	EventQuotaExceeded    = "QuotaExceeded"
)

// quotaSuspensions are the environments of scopes over a time quota whose action is
// suspend, as the allocations' last sync found them.
type quotaSuspensions struct {
	mu    sync.Mutex
	names map[string]string // environment → the scope's allocation
}

// quotaSuspend records the sync's environments to suspend (by scope) and queues a pass of
// each newly named one.
func (r *Reconciler) quotaSuspend(byScope map[string][]string) {
	next := map[string]string{}
	for scope, envs := range byScope {
		for _, name := range envs {
			next[name] = scope
		}
	}
	r.quota.mu.Lock()
	prev := r.quota.names
	r.quota.names = next
	r.quota.mu.Unlock()
	for name := range maps.Keys(next) {
		if _, ok := prev[name]; !ok {
			r.queue.Add(r.cfg.Namespace + "/" + name)
		}
	}
}

// applyQuota starts the Suspend of an environment whose scope is over a time quota with
// the suspend action: like an owner's Suspend deadline, whatever the environment is doing
// (a held run claim ends with it); its workspace is kept.
func (p *pass) applyQuota() {
	p.r.quota.mu.Lock()
	scope, over := p.r.quota.names[p.env.Name]
	p.r.quota.mu.Unlock()
	st := p.status
	if !over || !p.settled() || st.Suspended() || st.Retired() || st.Deleted() {
		return
	}
	p.startPolicyOperation(executionv1alpha1.LifecycleSuspend, quotaSuspendOperation, EventQuotaExceeded,
		fmt.Sprintf("the time quota of %s is exceeded: suspended", scope))
}
