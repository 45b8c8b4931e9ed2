package usage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/logging"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	execinformers "github.com/execplane/execplane/pkg/generated/informers/externalversions"
	execlisters "github.com/execplane/execplane/pkg/generated/listers/execution/v1alpha1"
)

// Defaults and bounds of a Recorder (docs/usage.md).
const (
	// DefaultSampleInterval is how often each node's kubelet is read: the kubelet reads the
	// containers' cgroups on request (CRI stats), so the interval alone bounds the memory
	// integral's resolution.
	DefaultSampleInterval = 15 * time.Second
	// DefaultCheckpointInterval is how often changed ledgers are written: at most one write
	// per environment per interval.
	DefaultCheckpointInterval = time.Minute
	// DefaultRetention is how long hourly windows are kept (and ended ledgers after their
	// end): two days, a day of slack for a billing export that runs daily; a busy ledger is
	// then ~12 KB. Up to 35 days (--usage-retention) at ~200 KB a ledger.
	DefaultRetention = 48 * time.Hour
	// maxPendingSamples bounds one environment's samples between checkpoints (a checkpoint
	// interval of 64 sample intervals); past it the oldest go, which only coarsens the
	// memory integral (the CPU counter is cumulative).
	maxPendingSamples = 64
	// scrapeParallelism bounds the kubelets read at once.
	scrapeParallelism = 8
	// settleNew is how long a new environment's ledger waits for it to leave its first
	// state (provisioning): Ensure to Ready takes seconds, so most ledgers are created
	// ready, in one write.
	settleNew = 2 * time.Minute
	// scrapeErrorLogEvery rate-limits the log of one node's failing scrapes.
	scrapeErrorLogEvery = 10 * time.Minute
)

// Scraper reads a node's executor container samples (Kubelet does).
type Scraper interface {
	Scrape(ctx context.Context, node *corev1.Node, keep func(namespace string) bool) ([]Sample, error)
}

// RecorderConfig configures NewRecorder.
type RecorderConfig struct {
	Execution versioned.Interface
	// Namespace is the environments' (and their executor Pods', claims' and ledgers').
	Namespace    string
	Environments execlisters.ExecutionEnvironmentLister
	Pods         corelisters.PodLister
	Claims       corelisters.PersistentVolumeClaimLister
	// Node returns a node by name (cached by the caller); Scraper reads it. Without a
	// Scraper, CPU and memory are not measured (the rest is).
	Node    func(ctx context.Context, name string) (*corev1.Node, error)
	Scraper Scraper
	// Intervals and retention; 0 means the default.
	SampleInterval, CheckpointInterval, Retention time.Duration
	Logger                                        hclog.Logger
	Now                                           func() time.Time
	Metrics                                       *Metrics
}

// Recorder keeps the usage ledgers of the leader's environments: it samples kubelets,
// takes the gateways' reports, observes lifecycle states, and writes each changed ledger at
// most once per checkpoint interval. Only the leader runs one; every fold is idempotent, so
// a new leader continues from the written ledgers without counting anything twice.
type Recorder struct {
	cfg    RecorderConfig
	log    hclog.Logger
	usages execlisters.ExecutionUsageLister
	// snaps are the snapshots, whose storage ledgers of their own count.
	snaps  execlisters.ExecutionSnapshotLister
	synced []cache.InformerSynced
	start  func(<-chan struct{})

	mu      sync.Mutex
	pending map[string]*pendingLedger // by ledger name
	// scrapeFailedAt rate-limits scrape error logs per node.
	scrapeFailedAt map[string]time.Time
}

// pendingLedger is what was observed of one environment since its ledger's last write.
type pendingLedger struct {
	samples []PodSample
	series  map[string]SeriesReport
}

// NewRecorder builds a Recorder; Run starts it.
func NewRecorder(cfg RecorderConfig) (*Recorder, error) {
	if cfg.Execution == nil || cfg.Namespace == "" || cfg.Environments == nil || cfg.Pods == nil || cfg.Claims == nil {
		return nil, errors.New("usage: Execution, Namespace, Environments, Pods and Claims are required")
	}
	if cfg.Scraper != nil && cfg.Node == nil {
		return nil, errors.New("usage: a Scraper needs Node")
	}
	cfg.SampleInterval = cmpOr(cfg.SampleInterval, DefaultSampleInterval)
	cfg.CheckpointInterval = cmpOr(cfg.CheckpointInterval, DefaultCheckpointInterval)
	cfg.Retention = cmpOr(cfg.Retention, DefaultRetention)
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	factory := execinformers.NewSharedInformerFactoryWithOptions(cfg.Execution, 0, execinformers.WithNamespace(cfg.Namespace))
	inf := factory.Execution().V1alpha1().ExecutionUsages()
	snaps := factory.Execution().V1alpha1().ExecutionSnapshots()
	return &Recorder{
		cfg: cfg, log: cfg.Logger.Named("usage"), usages: inf.Lister(), snaps: snaps.Lister(),
		synced: []cache.InformerSynced{inf.Informer().HasSynced, snaps.Informer().HasSynced},
		start:  factory.Start, pending: map[string]*pendingLedger{}, scrapeFailedAt: map[string]time.Time{},
	}, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// LedgerName is the name of an environment's ledger: its name and UID, so that an
// environment made again under the same name starts a ledger of its own.
func LedgerName(env string, uid types.UID) string { return env + "-" + string(uid) }

// Start starts the ledgers' cache and waits for it: a recorder answers nothing before
// (a new leader's reads and quotas would see no usage).
func (r *Recorder) Start(ctx context.Context) error {
	r.start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), r.synced...) {
		return ctx.Err()
	}
	return nil
}

// Run samples and checkpoints until ctx ends (after Start).
func (r *Recorder) Run(ctx context.Context) error {
	if err := r.Start(ctx); err != nil {
		return err
	}
	sample := time.NewTicker(r.cfg.SampleInterval)
	defer sample.Stop()
	checkpoint := time.NewTicker(r.cfg.CheckpointInterval)
	defer checkpoint.Stop()
	r.Checkpoint(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sample.C:
			r.Sample(ctx)
		case <-checkpoint.C:
			r.Checkpoint(ctx)
		}
	}
}

// Synced reports whether the ledgers' cache (and the snapshots') is synced (reads answer
// from it).
func (r *Recorder) Synced() bool {
	for _, synced := range r.synced {
		if !synced() {
			return false
		}
	}
	return true
}

// Sample reads every kubelet that runs an executor Pod of an environment and keeps the
// samples for the next checkpoint.
func (r *Recorder) Sample(ctx context.Context) {
	if r.cfg.Scraper == nil {
		return
	}
	pods, err := r.cfg.Pods.Pods(r.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	byName := make(map[string]*corev1.Pod, len(pods))
	nodes := map[string]bool{}
	for _, p := range pods {
		if p.Labels[executor.LabelEnvironment] == "" || p.Spec.NodeName == "" {
			continue
		}
		byName[p.Name] = p
		nodes[p.Spec.NodeName] = true
	}
	var mu sync.Mutex
	var samples []Sample
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(scrapeParallelism)
	keep := func(ns string) bool { return ns == r.cfg.Namespace }
	for name := range nodes {
		g.Go(func() error {
			got, err := r.scrape(gctx, name, keep)
			if err != nil {
				r.scrapeFailed(name, err)
				return nil
			}
			mu.Lock()
			samples = append(samples, got...)
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	r.keepSamples(byName, samples)
}

func (r *Recorder) scrape(ctx context.Context, name string, keep func(string) bool) ([]Sample, error) {
	node, err := r.cfg.Node(ctx, name)
	if err != nil {
		return nil, err
	}
	start := r.cfg.Now()
	got, err := r.cfg.Scraper.Scrape(ctx, node, keep)
	r.cfg.Metrics.scraped(err, r.cfg.Now().Sub(start))
	return got, err
}

func (r *Recorder) scrapeFailed(node string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Now()
	if now.Sub(r.scrapeFailedAt[node]) < scrapeErrorLogEvery {
		return
	}
	r.scrapeFailedAt[node] = now
	r.log.Warn("a kubelet's resource metrics cannot be read: its executors' CPU and memory are not measured meanwhile",
		logging.KeyNode, node, logging.KeyError, err)
}

// keepSamples sums each Pod's containers and keeps the sum as the Pod's sample.
func (r *Recorder) keepSamples(pods map[string]*corev1.Pod, samples []Sample) {
	sums := map[string]*PodSample{}
	for _, s := range samples {
		p := pods[s.Pod]
		if p == nil {
			continue // a warm pool's Pod, or one the cache does not have yet
		}
		sum := sums[s.Pod]
		if sum == nil {
			sum = &PodSample{Name: p.Name, UID: p.UID}
			sums[s.Pod] = sum
		}
		sum.CPU += s.CPU
		sum.WorkingSet += s.WorkingSet
		if s.At.After(sum.At) {
			sum.At = s.At
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, sum := range sums {
		p := pods[name]
		env, uid := p.Labels[executor.LabelEnvironment], types.UID(p.Labels[executor.LabelEnvironmentUID])
		if uid == "" {
			continue
		}
		pl := r.pendingFor(LedgerName(env, uid))
		pl.samples = append(pl.samples, *sum)
		if n := len(pl.samples) - maxPendingSamples; n > 0 {
			pl.samples = slices.Delete(pl.samples, 0, n)
		}
	}
}

func (r *Recorder) pendingFor(name string) *pendingLedger {
	pl := r.pending[name]
	if pl == nil {
		pl = &pendingLedger{series: map[string]SeriesReport{}}
		r.pending[name] = pl
	}
	return pl
}

// Report keeps a gateway series' cumulative counts of an environment for the next
// checkpoint. Reports of environments the leader does not know are dropped.
func (r *Recorder) Report(env string, uid types.UID, rep SeriesReport) error {
	name := LedgerName(env, uid)
	if cur, err := r.cfg.Environments.ExecutionEnvironments(r.cfg.Namespace).Get(env); err != nil || cur.UID != uid {
		if _, err := r.usages.ExecutionUsages(r.cfg.Namespace).Get(name); err != nil {
			return fmt.Errorf("usage: no environment %s of UID %s", env, uid)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	pl := r.pendingFor(name)
	if prev, ok := pl.series[rep.ID]; !ok || rep.At.After(prev.At) {
		pl.series[rep.ID] = rep
	}
	return nil
}

// Checkpoint writes every ledger that changed: samples and reports folded, lifecycle
// transitions recorded, time accrued to now, old windows pruned; creates the ledgers of new
// environments and deletes those ended longer ago than the retention.
func (r *Recorder) Checkpoint(ctx context.Context) {
	defer r.cfg.Metrics.checkpointed()
	now := r.cfg.Now()
	envs, err := r.cfg.Environments.ExecutionEnvironments(r.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	seen := map[string]bool{}
	for _, env := range envs {
		name := LedgerName(env.Name, env.UID)
		seen[name] = true
		state, at := r.stateOf(env)
		if state == executionv1alpha1.UsageOther && now.Sub(env.CreationTimestamp.Time) < settleNew && !r.hasLedgerOrPending(name) {
			// A new environment still starting: its ledger is written once it is ready (or
			// settleNew has passed), one write rather than two. Nothing is lost: its
			// accrual starts at the environment's creation either way.
			continue
		}
		if err := r.write(ctx, name, func() *executionv1alpha1.ExecutionUsage { return newLedger(name, env) }, r.storageOf(env), state, at, now); err != nil && ctx.Err() == nil {
			r.log.Warn("a usage ledger cannot be written; retried at the next checkpoint", logging.KeyEnvironment, env.Name, logging.KeyError, err)
		}
	}
	r.checkpointSnapshots(ctx, seen, now)
	ledgers, err := r.usages.ExecutionUsages(r.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, u := range ledgers {
		if seen[u.Name] {
			continue
		}
		var err error
		if u.Status.EndedAt != nil && now.Sub(u.Status.EndedAt.Time) > r.cfg.Retention {
			err = r.cfg.Execution.ExecutionV1alpha1().ExecutionUsages(r.cfg.Namespace).Delete(ctx, u.Name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &u.UID, ResourceVersion: &u.ResourceVersion}})
		} else if u.Status.EndedAt == nil && r.goneLive(ctx, u) {
			// The environment is gone (the cache says, and so does the API server: a
			// leader whose cache stalled ends nothing): it ended when it was seen gone.
			err = r.write(ctx, u.Name, nil, 0, executionv1alpha1.UsageEnded, now, now)
		}
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			r.log.Warn("an ended usage ledger cannot be written", logging.KeyName, u.Name, logging.KeyError, err)
		}
	}
}

// hasLedgerOrPending reports whether the ledger name is written or has samples or reports
// waiting.
func (r *Recorder) hasLedgerOrPending(name string) bool {
	if _, err := r.usages.ExecutionUsages(r.cfg.Namespace).Get(name); err == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.pending[name]
	return ok
}

// goneLive confirms with the API server that a ledger's environment incarnation (or
// snapshot) is gone.
func (r *Recorder) goneLive(ctx context.Context, u *executionv1alpha1.ExecutionUsage) bool {
	if sn := u.Spec.Snapshot; sn != nil {
		return r.snapshotGone(ctx, sn.Object)
	}
	env, err := r.cfg.Execution.ExecutionV1alpha1().ExecutionEnvironments(r.cfg.Namespace).Get(ctx, u.Spec.Environment.Name, metav1.GetOptions{})
	return apierrors.IsNotFound(err) || (err == nil && env.UID != u.Spec.Environment.UID)
}

// stateOf is what env accrues as, and since when its status says it does (zero: unknown).
func (r *Recorder) stateOf(env *executionv1alpha1.ExecutionEnvironment) (executionv1alpha1.UsageState, time.Time) {
	st := &env.Status
	if st.Deleted() {
		if op := st.LifecycleOperation; op.CompletedAt != nil {
			return executionv1alpha1.UsageEnded, op.CompletedAt.Time
		}
		return executionv1alpha1.UsageEnded, time.Time{}
	}
	if op := st.LifecycleOperation; op != nil && op.Kind == executionv1alpha1.LifecycleSuspend && op.Phase == executionv1alpha1.PhaseCompleted {
		if op.CompletedAt != nil {
			return executionv1alpha1.UsageSuspended, op.CompletedAt.Time
		}
		return executionv1alpha1.UsageSuspended, time.Time{}
	}
	for _, c := range st.Conditions {
		if c.Type == executionv1alpha1.ConditionReady && c.Status == metav1.ConditionTrue {
			return executionv1alpha1.UsageReady, c.LastTransitionTime.Time
		}
	}
	return executionv1alpha1.UsageOther, time.Time{}
}

// storageOf is the requested size of env's workspace claim, 0 when it has none.
func (r *Recorder) storageOf(env *executionv1alpha1.ExecutionEnvironment) int64 {
	if env == nil || env.Status.PVC == nil {
		return 0
	}
	pvc, err := r.cfg.Claims.PersistentVolumeClaims(r.cfg.Namespace).Get(env.Status.PVC.Name)
	if err != nil {
		return 0
	}
	q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	return q.Value()
}

// write folds what is pending for the ledger name and writes it when it changed; create
// makes the ledger when it does not exist (nil: its subject is gone, nothing is created),
// storage is its subject's requested size now. The transition to state is recorded at the
// time the status gives, bounded by what the ledger already holds and now.
func (r *Recorder) write(ctx context.Context, name string, create func() *executionv1alpha1.ExecutionUsage, storage int64, state executionv1alpha1.UsageState, at, now time.Time) error {
	cur, err := r.usages.ExecutionUsages(r.cfg.Namespace).Get(name)
	var u *executionv1alpha1.ExecutionUsage
	switch {
	case apierrors.IsNotFound(err) && create != nil:
		u = create()
	case err != nil:
		return err
	default:
		u = cur.DeepCopy()
	}
	r.mu.Lock()
	pl := r.pending[name]
	var samples []PodSample
	var series []SeriesReport
	if pl != nil {
		samples = slices.Clone(pl.samples)
		for _, s := range pl.series {
			series = append(series, s)
		}
	}
	r.mu.Unlock()
	// In time order: a series' idleness is judged against the report being folded.
	slices.SortFunc(series, func(a, b SeriesReport) int { return a.At.Compare(b.At) })

	l := Ledger{Status: &u.Status, Retention: r.cfg.Retention}
	before := u.Status.DeepCopy()
	for _, s := range samples {
		l.FoldPod(s)
	}
	for _, s := range series {
		l.FoldSeries(s)
	}
	folded := !apiequality.Semantic.DeepEqual(before, &u.Status)
	if state != u.Status.Accrual.State || storage != u.Status.Accrual.StorageBytes {
		if at.IsZero() || at.After(now) || state == u.Status.Accrual.State {
			// A size change (or a state whose time the status does not give) counts from
			// now: the ledger's last write may be days old.
			at = now
		}
		l.Transition(state, storage, at)
	}
	if folded || cur == nil {
		l.Accrue(now) // a written ledger is current to its write; an idle one is not written
	}
	l.Prune(now)
	client := r.cfg.Execution.ExecutionV1alpha1().ExecutionUsages(r.cfg.Namespace)
	switch {
	case cur == nil:
		_, err = client.Create(ctx, u, metav1.CreateOptions{})
		r.cfg.Metrics.wrote(true, err)
		if apierrors.IsAlreadyExists(err) {
			return nil // the cache is behind: the next checkpoint folds into the existing one
		}
	case apiequality.Semantic.DeepEqual(cur.Status, u.Status):
		err = nil
	default:
		_, err = client.Update(ctx, u, metav1.UpdateOptions{})
		r.cfg.Metrics.wrote(false, err)
	}
	if err != nil {
		return err
	}
	r.forget(name, samples, series)
	return nil
}

// forget drops the folded samples and reports (the ones that arrived meanwhile stay).
func (r *Recorder) forget(name string, samples []PodSample, series []SeriesReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pl := r.pending[name]
	if pl == nil {
		return
	}
	pl.samples = pl.samples[min(len(samples), len(pl.samples)):]
	for _, s := range series {
		if cur, ok := pl.series[s.ID]; ok && !cur.At.After(s.At) {
			delete(pl.series, s.ID)
		}
	}
	if len(pl.samples) == 0 && len(pl.series) == 0 {
		delete(r.pending, name)
	}
}

// newLedger is the ledger of an environment first seen: everything accrues from the
// environment's creation.
func newLedger(name string, env *executionv1alpha1.ExecutionEnvironment) *executionv1alpha1.ExecutionUsage {
	return &executionv1alpha1.ExecutionUsage{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: env.Namespace, Labels: map[string]string{
			executor.LabelEnvironment: env.Name, executor.LabelEnvironmentUID: string(env.UID),
		}},
		Spec: executionv1alpha1.ExecutionUsageSpec{
			Environment: executionv1alpha1.ObjectIdentity{Name: env.Name, UID: env.UID},
			OwnerHash:   env.Spec.OwnerHash, ClientHash: env.Spec.ClientHash, BindingID: env.Spec.BindingID, Profile: env.Spec.Profile,
		},
		Status: executionv1alpha1.ExecutionUsageStatus{Accrual: executionv1alpha1.UsageAccrual{
			State: executionv1alpha1.UsageOther, Since: metav1.NewMicroTime(env.CreationTimestamp.Time),
		}},
	}
}
