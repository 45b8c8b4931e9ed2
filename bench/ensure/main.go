// Command ensure measures how long a caller waits for a ready environment, each figure a
// ratio against a baseline measured in the same run on the same local cluster:
//
//   - cold: EnsureEnvironment of a new binding through the gateway until Ready (the Go SDK's
//     Ensure: the call, then WaitReady's long-polled AttachEnvironment) ÷ raw: creating the
//     very claim and Pod the controller would build (the same objects from the same profile,
//     without our labels and finalizer) straight at the API server and watching until the
//     Pod is Ready;
//   - resume: ResumeEnvironment of a suspended environment until Ready ÷ cold;
//   - pool hit: EnsureEnvironment of a new binding of a profile with a warm pool until
//     Ready, at concurrency 1 and at concurrency 50 (p50, p99); and claims per second:
//     a full pool of -pool members drained by Ensures at concurrency 50, from the first
//     call until every environment is Ready (the controller's hit and miss counters say
//     how many came from the pool).
//
// The fake node is given a real cluster's pace (devcluster's VolumeBindDelay and
// PodStartDelay: by default 1 s to bind a volume and 2 s to start a Pod), so that the
// controller's share is measured against the delays it must wait for anyway, not against
// an instant. Samples alternate between the sides so that drift weighs on all alike.
//
//	go run ./bench/ensure        (or: make bench-ensure)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/dev/devsystem"
	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/kube"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/client"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	"github.com/execplane/execplane/pkg/profile"
)

const (
	profileName = "bench"
	pooledName  = "pooled"
	// poolConcurrency is the concurrency of the pool's second latency figure and of the
	// drain.
	poolConcurrency = 50
)

// Node kinds the executors run on.
const (
	nodeFake = "fake"
	nodeReal = "real"
)

// profilesYAML is the two profiles for the node kind: on the fake node the image is a name
// (the node exec endpoint runs the helper as a local process); on the real node, the
// example executor image in a container.
func profilesYAML(node string, pool int) string {
	image, placement := "registry.example/bench:1", ""
	if node == nodeReal {
		image, placement = devimage.ExecutorRef, devcluster.RealNodePlacement
	}
	shape := func(name string, extra string) string {
		return fmt.Sprintf(`  %s:
    image: %s
    storageClass: %s
    storageSize: 1Gi
    memoryLimit: 256Mi
    tmpSizeLimit: 16Mi
    maxFileBytes: 1048576
    maxCommandBytes: 65536
    maxCommandDuration: 1m
    maxEnvironments: 5000
%s%s`, name, image, devcluster.StorageClassName, extra, placement)
	}
	return "profiles:\n" + shape(profileName, "") + shape(pooledName, fmt.Sprintf("    warmPool:\n      size: %d\n", pool))
}

type options struct {
	n, pool                     int
	poolOnly                    bool
	qps                         int
	node, pause                 string
	volumeDelay, podDelay       time.Duration
	controller, gateway, helper string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench/ensure:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return err
	}
	var o options
	fs := flag.NewFlagSet("bench/ensure", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 20, "samples per side")
	fs.StringVar(&o.node, "node", nodeFake, "where executors run: fake (KWOK with the delays below) or real (kubelet, containerd, runc; no delays added)")
	fs.StringVar(&o.pause, "pause", filepath.Join(root, "bin/pause"), "the real node's sandbox binary (make bin/pause)")
	fs.IntVar(&o.qps, "controller-qps", 1000, "the controller's client-side limit towards the API server (--kube-api-qps; burst twice that), as make bench-controller runs it")
	fs.BoolVar(&o.poolOnly, "pool-only", false, "measure the warm pool only (no raw, cold or resume samples)")
	fs.IntVar(&o.pool, "pool", 500, "the pooled profile's warm pool size (and how many Ensures drain it)")
	fs.DurationVar(&o.volumeDelay, "volume-bind-delay", time.Second, "the fake node's delay before a claim's volume is provisioned")
	fs.DurationVar(&o.podDelay, "pod-start-delay", 2*time.Second, "the fake node's delay before a scheduled Pod is Ready")
	fs.StringVar(&o.controller, "controller", filepath.Join(root, "bin/controller"), "controller binary (make build)")
	fs.StringVar(&o.gateway, "gateway", filepath.Join(root, "bin/gateway"), "gateway binary (make build)")
	fs.StringVar(&o.helper, "helper", filepath.Join(root, "bin/helper"), "static helper binary (make build)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, bin := range []string{o.controller, o.gateway, o.helper} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%w (run make build first)", err)
		}
	}
	dir, err := os.MkdirTemp("", "bench-ensure-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	copts := devcluster.Options{StateDir: filepath.Join(dir, "cluster"), ImageFiles: map[string]string{devcluster.HelperImagePath: o.helper}}
	switch o.node {
	case nodeFake:
		copts.VolumeBindDelay, copts.PodStartDelay = o.volumeDelay, o.podDelay
		logf("starting the local cluster (volume bind delay %s, Pod start delay %s)", o.volumeDelay, o.podDelay)
	case nodeReal:
		archive := filepath.Join(dir, "images.tar")
		if err := devimage.WriteStack(archive, devimage.Binaries{Helper: o.helper, Pause: o.pause, Busybox: devimage.BusyboxPath}); err != nil {
			return err
		}
		copts.RealNode = &devcluster.RealNodeOptions{Images: archive, SandboxImage: devimage.PauseRef}
		o.volumeDelay, o.podDelay = 0, 0
		logf("starting the local cluster with the real node (executors run there)")
	default:
		return fmt.Errorf("-node: %q is neither %s nor %s", o.node, nodeFake, nodeReal)
	}
	c, err := devcluster.Start(ctx, copts)
	if err != nil {
		return err
	}
	defer c.Stop()
	if _, err := c.InstallCRDs(ctx, filepath.Join(root, "deploy/helm/execplane/files/crds")); err != nil {
		return err
	}
	ns, err := c.CreateNamespace(ctx, "bench")
	if err != nil {
		return err
	}
	sys, err := devsystem.Start(ctx, devsystem.Options{Kubeconfig: c.Kubeconfig(), Namespace: ns, Dir: filepath.Join(dir, "system"),
		ControllerBin: o.controller, GatewayBin: o.gateway, Gateways: 1, HelperPath: devcluster.HelperImagePath,
		Profiles:       []byte(profilesYAML(o.node, o.pool)),
		ControllerArgs: []string{"--kube-api-qps", strconv.Itoa(o.qps), "--kube-api-burst", strconv.Itoa(2 * o.qps)}})
	if err != nil {
		return err
	}
	defer sys.Stop()
	if err := sys.WaitReady(ctx, time.Minute); err != nil {
		return err
	}
	conn, err := sys.Dial(devsystem.Caller, 0)
	if err != nil {
		return err
	}
	defer conn.Close()
	sdk := client.NewFromConn(conn, client.Config{})
	clients, err := kube.NewClients(kube.ClientOptions{Kubeconfig: c.Kubeconfig(), UserAgent: "bench-ensure", QPS: 1000, Burst: 2000})
	if err != nil {
		return err
	}
	reg, err := profile.Parse([]byte(profilesYAML(o.node, o.pool)))
	if err != nil {
		return err
	}
	if reg, err = reg.WithExecutorServiceAccount("default"); err != nil {
		return err
	}
	entry, _ := reg.Get(profileName)
	b := &bench{sdk: sdk, kube: clients.Kube, exec: clients.Execution, ns: sys.ExecutorNamespace(), entry: entry,
		owner: client.Owner{Issuer: "https://idp.example", Subject: "bench"}}

	// One environment to suspend and resume, again and again.
	resumed, err := b.sdk.Ensure(ctx, client.EnsureRequest{Owner: b.owner, BindingID: "resumed", Profile: profileName})
	if err != nil {
		return err
	}
	logf("measuring %d samples per side", o.n)
	var raw, cold, resume latencies
	for i := range o.n + 1 { // the first round warms up and is not counted
		if o.poolOnly {
			break
		}
		sides := []func() (time.Duration, error){
			func() (time.Duration, error) { return b.raw(ctx, i) },
			func() (time.Duration, error) { return b.cold(ctx, i) },
			func() (time.Duration, error) { return b.resume(ctx, resumed) },
		}
		out := []*latencies{&raw, &cold, &resume}
		for j := range sides {
			k := (i + j) % len(sides)
			d, err := sides[k]()
			if err != nil {
				return err
			}
			if i > 0 {
				*out[k] = append(*out[k], d)
			}
		}
	}
	pool, err := b.measurePool(ctx, sys, o)
	if err != nil {
		return err
	}
	report(os.Stdout, o, raw, cold, resume, pool)
	return nil
}

// poolFigures are the warm pool's measurements.
type poolFigures struct {
	one, fifty   latencies
	drained      int
	drain        time.Duration
	hits, misses float64
	// drainCost is the API server's requests from the drain's first call until the pool
	// is full again: the claims and their refill.
	drainCost requestCost
	// events are the namespace's Events by source and reason, at the end.
	events string
}

// measurePool measures Ensure → Ready from the warm pool: n samples at concurrency 1,
// then 4n at concurrency 50, each with the pool full (waited for between the phases), then
// the drain of a full pool.
func (b *bench) measurePool(ctx context.Context, sys *devsystem.System, o options) (poolFigures, error) {
	var f poolFigures
	seq := 0
	ensure := func() (time.Duration, error) {
		seq++
		id := "pooled-" + strconv.Itoa(seq)
		start := time.Now()
		env, err := b.sdk.Ensure(ctx, client.EnsureRequest{Owner: b.owner, BindingID: id, Profile: pooledName})
		if err != nil {
			return 0, err
		}
		if !env.Status().GetReady() {
			return 0, errors.New("the ensured environment is not ready")
		}
		return time.Since(start), nil
	}
	parallel := func(total int) (latencies, time.Duration, error) {
		ids := make(chan struct{}, total)
		for range total {
			ids <- struct{}{}
		}
		close(ids)
		var mu sync.Mutex
		var out latencies
		g, gctx := errgroup.WithContext(ctx)
		start := time.Now()
		for range poolConcurrency {
			g.Go(func() error {
				for range ids {
					if gctx.Err() != nil {
						return gctx.Err()
					}
					mu.Lock()
					seq++
					id := "pooled-" + strconv.Itoa(seq)
					mu.Unlock()
					t0 := time.Now()
					env, err := b.sdk.Ensure(gctx, client.EnsureRequest{Owner: b.owner, BindingID: id, Profile: pooledName})
					if err != nil {
						return err
					}
					if !env.Status().GetReady() {
						return errors.New("the ensured environment is not ready")
					}
					mu.Lock()
					out = append(out, time.Since(t0))
					mu.Unlock()
				}
				return nil
			})
		}
		err := g.Wait()
		return out, time.Since(start), err
	}
	// full waits until the API server shows the whole pool ready: o.pool Pods labelled with
	// the pool, running and ready, each with its claim bound (the controller's gauge lags
	// the adoptions of the phase before by up to a pass).
	full := func() error {
		logf("waiting for a full pool of %d", o.pool)
		deadline := time.Now().Add(10 * time.Minute)
		sel := metav1.ListOptions{LabelSelector: executor.LabelPool + "=" + pooledName}
		for {
			pods, err := b.kube.CoreV1().Pods(b.ns).List(ctx, sel)
			if err != nil {
				return err
			}
			claims, err := b.kube.CoreV1().PersistentVolumeClaims(b.ns).List(ctx, sel)
			if err != nil {
				return err
			}
			bound := map[string]bool{}
			for _, c := range claims.Items {
				bound[c.Name] = c.Status.Phase == corev1.ClaimBound
			}
			ready := 0
			for i := range pods.Items {
				if p := &pods.Items[i]; p.DeletionTimestamp == nil && podReady(p) && bound[p.Name] {
					ready++
				}
			}
			if ready >= o.pool {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the pool has %d of %d members ready", ready, o.pool)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if err := full(); err != nil {
		return f, err
	}
	logf("pool hit at concurrency 1: %d samples", o.n)
	for range o.n + 1 {
		d, err := ensure()
		if err != nil {
			return f, err
		}
		if seq > 1 {
			f.one = append(f.one, d)
		}
	}
	if err := full(); err != nil {
		return f, err
	}
	logf("pool hit at concurrency %d: %d samples", poolConcurrency, min(4*o.n, o.pool))
	var err error
	if f.fifty, _, err = parallel(min(4*o.n, o.pool)); err != nil {
		return f, err
	}
	if err := full(); err != nil {
		return f, err
	}
	// adoptions reads the controller's hit and miss counters of the pooled profile.
	adoptions := func() (hits, misses float64, err error) {
		read := func(result string) float64 {
			v, rerr := sys.Controller.Metric(ctx, fmt.Sprintf(`execplane_controller_pool_adoptions_total{profile="%s",result="%s"}`, pooledName, result))
			err = errors.Join(err, rerr)
			return v
		}
		return read("hit"), read("miss"), err
	}
	h0, m0, err := adoptions()
	if err != nil {
		return f, err
	}
	before, err := devcluster.RequestCounts(ctx, b.kube)
	if err != nil {
		return f, err
	}
	logf("draining the pool: %d Ensures at concurrency %d", o.pool, poolConcurrency)
	if _, f.drain, err = parallel(o.pool); err != nil {
		return f, err
	}
	f.drained = o.pool
	h1, m1, err := adoptions()
	if err != nil {
		return f, err
	}
	f.hits, f.misses = h1-h0, m1-m0
	if err := full(); err != nil {
		return f, err
	}
	after, err := devcluster.RequestCounts(ctx, b.kube)
	if err != nil {
		return f, err
	}
	f.drainCost = costBetween(before, after, o.pool)
	if f.events, err = eventSources(ctx, b.kube, b.ns); err != nil {
		return f, err
	}
	return f, nil
}

type bench struct {
	sdk   *client.Client
	kube  kubernetes.Interface
	exec  versioned.Interface
	ns    string
	entry profile.Entry
	owner client.Owner
}

// readyPoll is how often the raw side looks at its Pod: small against the delays measured.
const readyPoll = 10 * time.Millisecond

// raw creates the claim and the Pod the controller would build for an environment and waits
// until the Pod is Ready; then deletes both, outside the measurement.
func (b *bench) raw(ctx context.Context, i int) (time.Duration, error) {
	name := "raw-" + strconv.Itoa(i)
	env := &executionv1alpha1.ExecutionEnvironment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.ns,
		UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))}}
	pvc, err := executor.PVC(env, b.entry)
	if err != nil {
		return 0, err
	}
	pod, err := executor.Pod(env, b.entry, executor.PodOptions{ServiceAccount: "default"})
	if err != nil {
		return 0, err
	}
	// Neither our labels nor the finalizer (the controller must not take them for orphans),
	// nor the owner reference (the garbage collector would delete a Pod whose owner, this
	// synthetic environment, does not exist).
	pvc.Labels, pod.Labels, pod.Finalizers, pod.OwnerReferences = map[string]string{"bench": "raw"}, map[string]string{"bench": "raw"}, nil, nil
	start := time.Now()
	if _, err := b.kube.CoreV1().PersistentVolumeClaims(b.ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	if _, err := b.kube.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	for {
		p, err := b.kube.CoreV1().Pods(b.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		if podReady(p) {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(readyPoll):
		}
	}
	d := time.Since(start)
	zero := int64(0)
	if err := b.kube.CoreV1().Pods(b.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		return 0, err
	}
	return d, b.kube.CoreV1().PersistentVolumeClaims(b.ns).Delete(ctx, pvc.Name, metav1.DeleteOptions{})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// cold ensures a new binding's environment and waits until it is Ready.
func (b *bench) cold(ctx context.Context, i int) (time.Duration, error) {
	start := time.Now()
	env, err := b.sdk.Ensure(ctx, client.EnsureRequest{Owner: b.owner, BindingID: "cold-" + strconv.Itoa(i), Profile: profileName})
	if err != nil {
		return 0, err
	}
	if !env.Status().GetReady() {
		return 0, errors.New("the ensured environment is not ready")
	}
	return time.Since(start), nil
}

// resume suspends the environment (outside the measurement, waiting until the resource
// says it is suspended), then resumes it and waits until it is Ready.
func (b *bench) resume(ctx context.Context, env *client.Environment) (time.Duration, error) {
	if err := env.Suspend(ctx); err != nil {
		return 0, err
	}
	for {
		cur, err := b.exec.ExecutionV1alpha1().ExecutionEnvironments(b.ns).Get(ctx, env.ID(), metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		if cur.Status.Suspended() {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(readyPoll):
		}
	}
	start := time.Now()
	if err := env.Resume(ctx); err != nil {
		return 0, err
	}
	if err := env.WaitReady(ctx); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

type latencies []time.Duration

func (l latencies) quantile(q float64) time.Duration {
	s := slices.Clone(l)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

func report(w io.Writer, o options, raw, cold, resume latencies, pool poolFigures) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }
	if o.node == nodeReal {
		fmt.Fprintf(w, "\nEnsure → Ready on the real node (kubelet, containerd, runc), concurrency 1, %d samples per side\n\n", o.n)
	} else {
		fmt.Fprintf(w, "\nEnsure → Ready on the fake node with a volume bind delay of %s and a Pod start delay of %s, concurrency 1, %d samples per side\n\n", o.volumeDelay, o.podDelay, o.n)
	}
	fmt.Fprintln(w, "| path | p50 ms | p99 ms |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, r := range []struct {
		name string
		l    latencies
	}{{"raw: create the claim and the Pod, watch until Ready", raw}, {"cold: EnsureEnvironment → Ready (Go SDK)", cold}, {"resume: ResumeEnvironment → Ready (Go SDK)", resume},
		{"pool hit, concurrency 1: EnsureEnvironment → Ready (Go SDK)", pool.one},
		{fmt.Sprintf("pool hit, concurrency %d: EnsureEnvironment → Ready (Go SDK)", poolConcurrency), pool.fifty}} {
		if len(r.l) > 0 {
			fmt.Fprintf(w, "| %s | %s | %s |\n", r.name, ms(r.l.quantile(0.5)), ms(r.l.quantile(0.99)))
		}
	}
	ratio := func(a, b latencies) float64 {
		if len(a) == 0 || len(b) == 0 {
			return 0
		}
		return float64(a.quantile(0.5)) / float64(b.quantile(0.5))
	}
	if len(cold) > 0 {
		fmt.Fprintf(w, "\n**cold ÷ raw (p50): %.2f**   resume ÷ cold (p50): %.2f   pool hit ÷ cold (p50): %.3f\n", ratio(cold, raw), ratio(resume, cold), ratio(pool.one, cold))
	}
	fmt.Fprintf(w, "\n**drain: %d Ensures at concurrency %d from a full pool of %d, all Ready in %s: %.0f claims/s** (controller: %.0f hits, %.0f misses)\n",
		pool.drained, poolConcurrency, o.pool, pool.drain.Round(time.Millisecond), float64(pool.drained)/pool.drain.Seconds(), pool.hits, pool.misses)
	pool.drainCost.write(w, "the drain and the refill to a full pool (the full-pool check's own lists included)")
	if pool.events != "" {
		fmt.Fprintf(w, "\nEvents in the namespace at the end, by source and reason: %s\n", pool.events)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}
