package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/execplane/execplane/internal/controller"
	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/security/highwater"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	execinformers "github.com/execplane/execplane/pkg/generated/informers/externalversions"
	"github.com/execplane/execplane/pkg/profile"
)

// The benchmark's profile: tiny requests, so that node capacity never limits the fleet.
const profilesYAML = `profiles:
  bench:
    image: registry.example/bench:1
    storageClass: kwok-volume
    storageSize: 1Gi
    memoryLimit: 16Mi
    tmpSizeLimit: 16Mi
    maxFileBytes: 1048576
    maxCommandBytes: 65536
    maxCommandDuration: 1m
    maxEnvironments: 100000
`

type options struct {
	n, nodes, workers, burst, creators int
	qps                                float64
	idle, timeout                      time.Duration
	baseline                           bool
	heapProfile                        string
}

func run(ctx context.Context, args []string) error {
	var o options
	fs := flag.NewFlagSet("controllerscale", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 10000, "environments")
	fs.IntVar(&o.nodes, "nodes", 2, "KWOK nodes")
	fs.IntVar(&o.workers, "workers", 16, "controller reconcile workers")
	fs.Float64Var(&o.qps, "qps", 1000, "client-side QPS for the controller and for the creating client")
	fs.IntVar(&o.burst, "burst", 2000, "client-side burst for the controller and for the creating client")
	fs.IntVar(&o.creators, "creators", 32, "concurrent creating goroutines")
	fs.DurationVar(&o.idle, "idle", time.Minute, "idle window over which writes are counted")
	fs.DurationVar(&o.timeout, "timeout", time.Hour, "give up after this long per phase")
	fs.BoolVar(&o.baseline, "baseline", true, "also measure raw claim+Pod creation on a fresh cluster")
	fs.StringVar(&o.heapProfile, "heap-profile", "", "when set, the controller serves profiles (--profiling) and its heap profile when all are Ready is written to this file (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	reg, err := profile.Parse([]byte(profilesYAML))
	if err != nil {
		return err
	}
	if reg, err = reg.WithExecutorServiceAccount("default"); err != nil {
		return err
	}
	entry, _ := reg.Get("bench")

	bin, err := buildController(ctx)
	if err != nil {
		return err
	}
	if os.Getenv("BENCH_KEEP") == "" {
		defer os.RemoveAll(filepath.Dir(bin))
	} else {
		logf("keeping %s", filepath.Dir(bin))
	}

	var base time.Duration
	if o.baseline {
		if base, err = measureBaseline(ctx, o, entry); err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
	}
	res, err := measureController(ctx, o, bin, entry)
	if err != nil {
		return err
	}
	fmt.Printf("\nenvironments                 %d on %d KWOK node(s), %d workers, client QPS %.0f\n", o.n, o.nodes, o.workers, o.qps)
	fmt.Printf("all Ready after              %s (%.0f environments/s)\n", res.ready.Round(time.Millisecond), float64(o.n)/res.ready.Seconds())
	if o.baseline {
		fmt.Printf("baseline: raw claims+Pods    %s  → ratio %.2f\n", base.Round(time.Millisecond), res.ready.Seconds()/base.Seconds())
	}
	fmt.Printf("controller RSS at Ready      %.1f MiB (peak %.1f MiB)\n", res.rssReady, res.peak)
	fmt.Printf("controller RSS after idle    %.1f MiB\n", res.rssIdle)
	fmt.Printf("API writes during idle       %d over %s (%.1f/min)\n", res.idleWrites, o.idle, float64(res.idleWrites)/o.idle.Minutes())
	fmt.Printf("API writes to reach Ready    %d (%.2f per environment)\n", res.writes, float64(res.writes)/float64(o.n))
	fmt.Printf("usage ledger writes to Ready %d (%.2f per environment); while idle %d (%.2f/s)\n", res.usageReady,
		float64(res.usageReady)/float64(o.n), res.usageIdle, float64(res.usageIdle)/o.idle.Seconds())
	fmt.Printf("suspended and idle           %d API writes, %d of them usage ledgers, over %s\n", res.suspendedWrites, res.usageSuspended, o.idle)
	if res.idleWrites != 0 || res.suspendedWrites != 0 {
		return fmt.Errorf("the controller wrote %d times while idle, %d while suspended and idle", res.idleWrites, res.suspendedWrites)
	}
	return nil
}

func buildController(ctx context.Context) (string, error) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "controllerscale-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "controller")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/controller")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the controller: %w\n%s", err, out)
	}
	return bin, nil
}

func startCluster(ctx context.Context, nodes int) (*devcluster.Cluster, func(), error) {
	dir, err := os.MkdirTemp("", "controllerscale-cluster-")
	if err != nil {
		return nil, nil, err
	}
	c, err := devcluster.Start(ctx, devcluster.Options{StateDir: dir, Nodes: nodes, Logf: logf})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return c, func() { _ = c.Stop(); os.RemoveAll(dir) }, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func clientConfig(c *devcluster.Cluster, o options) *rest.Config {
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	return cfg
}

// createAll runs create(i) for i in [0,n) on o.creators goroutines.
func createAll(ctx context.Context, o options, create func(ctx context.Context, i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, o.creators)
	for range o.creators {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= o.n || ctx.Err() != nil {
					return
				}
				if err := create(ctx, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(<-errs)
}

// readyCounter counts objects whose readiness predicate holds, from an informer.
type readyCounter struct {
	mu    sync.Mutex
	ready map[types.UID]bool
	count atomic.Int64
}

func (r *readyCounter) observe(uid types.UID, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok && !r.ready[uid] {
		r.ready[uid] = true
		r.count.Add(1)
	}
}

func (r *readyCounter) wait(ctx context.Context, n int, timeout time.Duration, what string) error {
	deadline := time.Now().Add(timeout)
	last := time.Now()
	for int(r.count.Load()) < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d %s ready after %s", r.count.Load(), n, what, timeout)
		}
		if time.Since(last) > 10*time.Second {
			logf("%d/%d %s ready", r.count.Load(), n, what)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func measureBaseline(ctx context.Context, o options, entry profile.Entry) (time.Duration, error) {
	logf("baseline: %d raw claims and Pods", o.n)
	c, stop, err := startCluster(ctx, o.nodes)
	if err != nil {
		return 0, err
	}
	defer stop()
	ns, err := c.CreateNamespace(ctx, "baseline")
	if err != nil {
		return 0, err
	}
	kube, err := kubernetes.NewForConfig(clientConfig(c, o))
	if err != nil {
		return 0, err
	}
	counter := &readyCounter{ready: map[types.UID]bool{}}
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	observe := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			counter.observe(pod.UID, podReady(pod))
		}
	}
	if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: observe, UpdateFunc: func(_, n any) { observe(n) }}); err != nil {
		return 0, err
	}
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory.Start(ictx.Done())
	factory.WaitForCacheSync(ictx.Done())

	start := time.Now()
	err = createAll(ctx, o, func(ctx context.Context, i int) error {
		env := benchEnvironment(ns, i, entry)
		env.UID = types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
		pvc, err := executor.PVC(env, entry)
		if err != nil {
			return err
		}
		pod, err := executor.Pod(env, entry, executor.PodOptions{ServiceAccount: "default"})
		if err != nil {
			return err
		}
		pod.OwnerReferences, pod.Finalizers = nil, nil // no environment exists to own it
		if _, err := kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err = kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return 0, err
	}
	if err := counter.wait(ctx, o.n, o.timeout, "Pods"); err != nil {
		return 0, err
	}
	d := time.Since(start)
	logf("baseline: %d Pods running after %s", o.n, d.Round(time.Millisecond))
	return d, nil
}

func benchEnvironment(ns string, i int, entry profile.Entry) *v1alpha1.ExecutionEnvironment {
	hex := strings.Repeat("0b", 32)
	return &v1alpha1.ExecutionEnvironment{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("env-%05d", i), Namespace: ns,
			// The store creates environments already protected.
			Finalizers: []string{controller.EnvironmentFinalizer}},
		Spec: v1alpha1.ExecutionEnvironmentSpec{SchemaVersion: v1alpha1.CurrentSchemaVersion, OwnerHash: hex, ClientHash: hex,
			BindingID: fmt.Sprintf("binding-%05d", i), RequestFingerprint: hex, Profile: "bench", ProfileDigest: entry.Digest},
	}
}

type controllerResult struct {
	ready                   time.Duration
	rssReady, peak, rssIdle float64
	writes, idleWrites      int64
	// usageReady are the ledger writes to reach Ready; usageIdle over the idle window of
	// ready environments; suspendedWrites and usageSuspended over one of suspended ones.
	usageReady, usageIdle, suspendedWrites, usageSuspended int64
}

func measureController(ctx context.Context, o options, bin string, entry profile.Entry) (controllerResult, error) {
	var res controllerResult
	logf("controller: %d environments", o.n)
	c, stop, err := startCluster(ctx, o.nodes)
	if err != nil {
		return res, err
	}
	defer stop()
	root, err := devcluster.RepoRoot()
	if err != nil {
		return res, err
	}
	if _, err := c.InstallCRDs(ctx, filepath.Join(root, "deploy/helm/execplane/files/crds")); err != nil {
		return res, err
	}
	ns, err := c.CreateNamespace(ctx, "fleet")
	if err != nil {
		return res, err
	}
	dir := filepath.Dir(bin)
	material, err := devbundle.Generate(filepath.Join(dir, "security"), devbundle.Options{})
	if err != nil {
		return res, err
	}
	if err := highwater.CreateInitial(ctx, c.Kube(), ns, "execplane-security-high-water"); err != nil {
		return res, err
	}
	profiles := filepath.Join(dir, "profiles.yaml")
	if err := os.WriteFile(profiles, []byte(profilesYAML), 0o600); err != nil {
		return res, err
	}
	diag, err := freeAddr()
	if err != nil {
		return res, err
	}
	listen, err := freeAddr()
	if err != nil {
		return res, err
	}
	logFile, err := os.Create(filepath.Join(dir, "controller.log"))
	if err != nil {
		return res, err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, bin, "--namespace", ns, "--kubeconfig", c.Kubeconfig(), "--identity", "bench",
		"--profiles", profiles, "--executor-service-account", "default", "--workers", strconv.Itoa(o.workers),
		"--kube-api-qps", strconv.FormatFloat(o.qps, 'f', -1, 64), "--kube-api-burst", strconv.Itoa(o.burst),
		"--security-manifest", material.Manifest, "--gateway-identity", material.Gateway.Identity,
		"--listen-address", listen, "--diagnostics-address", diag,
		// Ledgers checkpointed within the quiet wait, so that the idle windows count them.
		"--usage-sample-interval", "5s", "--usage-checkpoint-interval", "5s", "--log-level", envOr("BENCH_LOG_LEVEL", "warn"), "--profiling="+strconv.FormatBool(o.heapProfile != ""))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return res, err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	if err := waitHTTP(ctx, "http://"+diag+"/readyz", time.Minute); err != nil {
		return res, fmt.Errorf("controller not ready: %w", err)
	}

	execClient, err := versioned.NewForConfig(clientConfig(c, o))
	if err != nil {
		return res, err
	}
	counter := &readyCounter{ready: map[types.UID]bool{}}
	factory := execinformers.NewSharedInformerFactoryWithOptions(execClient, 0, execinformers.WithNamespace(ns))
	observe := func(obj any) {
		if env, ok := obj.(*v1alpha1.ExecutionEnvironment); ok {
			counter.observe(env.UID, meta.IsStatusConditionTrue(env.Status.Conditions, v1alpha1.ConditionReady))
		}
	}
	if _, err := factory.Execution().V1alpha1().ExecutionEnvironments().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: observe, UpdateFunc: func(_, n any) { observe(n) }}); err != nil {
		return res, err
	}
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory.Start(ictx.Done())
	factory.WaitForCacheSync(ictx.Done())

	writes0, err := scrapeWrites(ctx, diag)
	if err != nil {
		return res, err
	}
	peak := &peakRSS{pid: cmd.Process.Pid}
	go peak.sample(ictx)
	start := time.Now()
	err = createAll(ctx, o, func(ctx context.Context, i int) error {
		_, err := execClient.ExecutionV1alpha1().ExecutionEnvironments(ns).Create(ctx, benchEnvironment(ns, i, entry), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return res, err
	}
	logf("controller: %d environments created after %s", o.n, time.Since(start).Round(time.Millisecond))
	if err := counter.wait(ctx, o.n, o.timeout, "environments"); err != nil {
		return res, err
	}
	res.ready = time.Since(start)
	logf("controller: all Ready after %s", res.ready.Round(time.Millisecond))
	if res.rssReady, err = rss(cmd.Process.Pid); err != nil {
		return res, err
	}
	if o.heapProfile != "" {
		if err := saveHeapProfile(ctx, diag, o.heapProfile); err != nil {
			return res, err
		}
		logf("controller: heap profile in %s", o.heapProfile)
	}
	// Let the last passes (Events, trailing condition updates) settle before counting.
	if err := waitQuiet(ctx, diag, 5*time.Second, 2*time.Minute); err != nil {
		return res, err
	}
	writes1, err := scrapeWrites(ctx, diag)
	if err != nil {
		return res, err
	}
	res.writes = writes1 - writes0
	usage1, err := scrapeSum(ctx, diag, "execplane_usage_ledger_writes_total")
	if err != nil {
		return res, err
	}
	res.usageReady = usage1
	logf("controller: idle for %s", o.idle)
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(o.idle):
	}
	writes2, err := scrapeWrites(ctx, diag)
	if err != nil {
		return res, err
	}
	res.idleWrites = writes2 - writes1
	usage2, err := scrapeSum(ctx, diag, "execplane_usage_ledger_writes_total")
	if err != nil {
		return res, err
	}
	res.usageIdle = usage2 - usage1
	if res.rssIdle, err = rss(cmd.Process.Pid); err != nil {
		return res, err
	}
	res.peak = peak.max()
	if err := suspendAll(ctx, execClient, ns, o); err != nil {
		return res, err
	}
	if err := waitQuiet(ctx, diag, 5*time.Second, 5*time.Minute); err != nil {
		return res, err
	}
	writes3, err := scrapeWrites(ctx, diag)
	if err != nil {
		return res, err
	}
	usage3, err := scrapeSum(ctx, diag, "execplane_usage_ledger_writes_total")
	if err != nil {
		return res, err
	}
	logf("controller: %d suspended environments idle for %s", o.n, o.idle)
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(o.idle):
	}
	writes4, err := scrapeWrites(ctx, diag)
	if err != nil {
		return res, err
	}
	usage4, err := scrapeSum(ctx, diag, "execplane_usage_ledger_writes_total")
	if err != nil {
		return res, err
	}
	res.suspendedWrites, res.usageSuspended = writes4-writes3, usage4-usage3
	return res, nil
}

// suspendAll starts every environment's Suspend as the store's SuspendEnvironment records
// it (a Suspend requested in its status; no run claim is held here) and waits until all
// are suspended.
func suspendAll(ctx context.Context, client versioned.Interface, ns string, o options) error {
	envs := client.ExecutionV1alpha1().ExecutionEnvironments(ns)
	list, err := envs.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	start := time.Now()
	err = createAll(ctx, o, func(ctx context.Context, i int) error {
		for {
			env, err := envs.Get(ctx, list.Items[i].Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.Now()
			op := &v1alpha1.LifecycleOperation{Kind: v1alpha1.LifecycleSuspend, Phase: v1alpha1.PhaseRequested,
				OperationID: fmt.Sprintf("bench-suspend-%d", i), Reason: "bench", StartedAt: now}
			if env.Status.Pod != nil {
				op.ExpectedPodUID = env.Status.Pod.UID
			}
			if env.Status.PVC != nil {
				op.ExpectedPVCUID = env.Status.PVC.UID
			}
			env.Status.LifecycleOperation = op
			if _, err = envs.UpdateStatus(ctx, env, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
				return err
			}
		}
	})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(o.timeout)
	for {
		list, err := envs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		n := 0
		for i := range list.Items {
			if list.Items[i].Status.Suspended() {
				n++
			}
		}
		if n == len(list.Items) {
			logf("controller: all suspended after %s", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d environments suspended", n, len(list.Items))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not OK after %s", url, timeout)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
