package usage

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// The recorder's reads: what GetUsage, ListUsage, the time quotas and the metrics see.

// View is a ledger as of now: the written one with what is pending folded in and time
// accrued to now. Nothing is written.
func (r *Recorder) View(u *executionv1alpha1.ExecutionUsage, now time.Time) *executionv1alpha1.ExecutionUsage {
	u = u.DeepCopy()
	r.mu.Lock()
	pl := r.pending[u.Name]
	l := Ledger{Status: &u.Status, Retention: r.cfg.Retention}
	var series []SeriesReport
	if pl != nil {
		for _, s := range pl.samples {
			l.FoldPod(s)
		}
		for _, s := range pl.series {
			series = append(series, s)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(series, func(a, b SeriesReport) int { return a.At.Compare(b.At) })
	for _, s := range series {
		l.FoldSeries(s)
	}
	l.Accrue(now)
	return u
}

// Ledgers lists the written ledgers (from the cache).
func (r *Recorder) Ledgers() ([]*executionv1alpha1.ExecutionUsage, error) {
	return r.usages.ExecutionUsages(r.cfg.Namespace).List(labels.Everything())
}

// Now is the recorder's clock.
func (r *Recorder) Now() time.Time { return r.cfg.Now() }

// ReportInterval is how often gateways report their series (the gateway's default): part of
// the time a window takes to settle.
const ReportInterval = 10 * time.Second

// Retention is how long windows are kept.
func (r *Recorder) Retention() time.Duration { return r.cfg.Retention }

// Settle is how long after its end a window may still grow: a report or a sample of its
// last moments reaches the ledger within a report or sample interval and a checkpoint (two
// when the first write loses its compare-and-swap).
func (r *Recorder) Settle() time.Duration {
	return ReportInterval + r.cfg.SampleInterval + 2*r.cfg.CheckpointInterval
}

// Lookup is the ledger of an environment (of revision, when given): the written one, or
// the one a new environment's first checkpoint will write; nil when there is neither.
func (r *Recorder) Lookup(name, revision string) (*executionv1alpha1.ExecutionUsage, error) {
	ledgers, err := r.Ledgers()
	if err != nil {
		return nil, err
	}
	if u := Newest(ledgers, name, revision); u != nil {
		return u, nil
	}
	env, err := r.cfg.Environments.ExecutionEnvironments(r.cfg.Namespace).Get(name)
	if err != nil || (revision != "" && string(env.UID) != revision) {
		return nil, nil //nolint:nilerr // absent: answered as not found
	}
	return newLedger(LedgerName(env.Name, env.UID), env), nil
}

// Views are the ledgers in scope as of now (Lookup's unwritten ones included).
func (r *Recorder) Views(s Scope, now time.Time) ([]*executionv1alpha1.ExecutionUsage, error) {
	ledgers, err := r.Ledgers()
	if err != nil {
		return nil, err
	}
	have := make(map[string]bool, len(ledgers))
	var out []*executionv1alpha1.ExecutionUsage
	for _, u := range ledgers {
		have[u.Name] = true
		if s.admits(u) {
			out = append(out, r.View(u, now))
		}
	}
	envs, err := r.cfg.Environments.ExecutionEnvironments(r.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, env := range envs {
		if u := newLedger(LedgerName(env.Name, env.UID), env); !have[u.Name] && s.admits(u) {
			out = append(out, r.View(u, now))
		}
	}
	return out, nil
}

// Use sums the CPU and memory of a client's environments (of one owner, when ownerHash is
// set) over the hourly windows of the last window: what the written ledgers hold, a
// checkpoint behind at most (quotas need no more, and a read stays cheap).
func (r *Recorder) Use(clientHash, ownerHash string, window time.Duration) (cpuNanoseconds, memoryKiBSeconds int64) {
	ledgers, err := r.Ledgers()
	if err != nil {
		return 0, 0
	}
	from := r.cfg.Now().Add(-window).UTC().Truncate(Window)
	for _, u := range ledgers {
		if u.Spec.ClientHash != clientHash || (ownerHash != "" && u.Spec.OwnerHash != ownerHash) {
			continue
		}
		// Windows are oldest first: read back from the newest to the window's start.
		for i := len(u.Status.Windows) - 1; i >= 0 && !u.Status.Windows[i].Start.Time.Before(from); i-- {
			cpuNanoseconds += u.Status.Windows[i].CPUNanoseconds
			memoryKiBSeconds += u.Status.Windows[i].MemoryKiBSeconds
		}
	}
	return cpuNanoseconds, memoryKiBSeconds
}
