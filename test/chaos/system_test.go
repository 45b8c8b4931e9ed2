package chaos_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/devsystem"
	"github.com/execplane/execplane/internal/dev/faultproxy"
	"github.com/execplane/execplane/pkg/profile/profiletest"
)

// Leader election of the replicas: short, so that a fault's failover fits a short budget.
const (
	leaseDuration = 8 * time.Second
	renewDeadline = 5 * time.Second
	retryPeriod   = time.Second
	// restartDelay is how long a dead process stays down before it is started again, as a
	// Deployment's restart would.
	restartDelay = time.Second
	// viewFreshnessBound is the gateways' --view-freshness-bound (their default).
	viewFreshnessBound = 2 * time.Second
)

// keepEnv names a directory that keeps each test's system files and logs.
const keepEnv = "EXECPLANE_CHAOS_KEEP"

// system is the deployment under test: two controller replicas and two gateways, each
// gateway reaching the API server and the controllers through its own fault proxies.
type system struct {
	*devsystem.System
	c         *devcluster.Cluster
	ns        string
	executors string
	dir       string
	// api[i] and control[i] are gateway i's paths to the API server and to the leader.
	api, control []*faultproxy.Proxy

	leader atomic.Pointer[string] // the ready controller's listen address
	// started is the System once Start returned, for the watch that runs during Start.
	started atomic.Pointer[devsystem.System]
	// halt stops the supervisor and the watches, before the system stops for good.
	halt context.CancelFunc

	mu       sync.Mutex
	held     map[string]bool // processes a fault keeps down or paused
	restarts map[string]int
	exits    []string        // why each process that was restarted had ended
	podUIDs  map[string]bool // every executor Pod this system had
}

// RESTConfig reaches the cluster's API server as its administrator.
func (s *system) RESTConfig() *rest.Config { return s.c.RESTConfig() }

// options shape a system: controllerEnv and gatewayEnv are added to the controllers' and
// the gateways' environment, gatewayArgs to the gateways' flags; helperPath, when set, is
// the helper the gateways run in executors (clustertest.HelperPath otherwise).
type options struct {
	controllerEnv, gatewayEnv, gatewayArgs []string
	helperPath                             string
}

// startSystem starts the system in fresh namespaces.
func startSystem(t *testing.T, o options) *system {
	t.Helper()
	c := clustertest.Cluster(t)
	if _, err := c.InstallCRDs(t.Context(), "../../deploy/helm/execplane/files/crds"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if keep := os.Getenv(keepEnv); keep != "" {
		dir = filepath.Join(keep, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s := &system{c: c, ns: clustertest.Namespace(t), executors: clustertest.Namespace(t), dir: dir,
		held: map[string]bool{}, restarts: map[string]int{}, podUIDs: map[string]bool{}}
	none := ""
	s.leader.Store(&none)
	var kubeconfigs []string
	for range 2 {
		var api *faultproxy.Proxy
		kubeconfigs = append(kubeconfigs, clustertest.ProxiedKubeconfig(t, c.Kubeconfig(), func(target string) string {
			var err error
			if api, err = faultproxy.To(target); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(api.Close)
			return api.Addr()
		}))
		ctl, err := faultproxy.Start(func() string { return *s.leader.Load() })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ctl.Close)
		s.api, s.control = append(s.api, api), append(s.control, ctl)
	}
	// Profiling lets the soak collect garbage before it reads a process's heap.
	verbose := []string{"--log-format", "text", "--log-level", "debug", "--profiling"}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	t.Cleanup(cancel)
	go s.watchLeader(ctx)
	go s.recordPods(ctx, t)
	sys, err := devsystem.Start(t.Context(), devsystem.Options{
		Kubeconfig: c.Kubeconfig(), Namespace: s.ns, ExecutorNamespace: s.executors, Dir: s.dir,
		ControllerBin: controllerBin, GatewayBin: gatewayBin, Controllers: 2, Gateways: 2,
		HelperPath: cmp.Or(o.helperPath, clustertest.HelperPath), Profiles: []byte(profiletest.YAML(100)),
		ControllerArgs: append([]string{"--lease-duration", leaseDuration.String(), "--renew-deadline", renewDeadline.String(),
			"--retry-period", retryPeriod.String(), "--resync-period", resyncPeriod.String(),
			// Usage ledgers checkpointed often, so that the run's end checks what it did.
			"--usage-sample-interval", "2s", "--usage-checkpoint-interval", "5s"}, verbose...),
		ControllerEnv: o.controllerEnv,
		GatewayEnv:    o.gatewayEnv,
		GatewayArgs:   append(append(verbose, "--view-freshness-bound", viewFreshnessBound.String()), o.gatewayArgs...),
		GatewayArgsFor: func(i int) []string {
			return []string{"--kubeconfig", kubeconfigs[i], "--controller-address", s.control[i].Addr()}
		},
	})
	t.Cleanup(func() {
		if sys != nil {
			sys.Stop()
		}
		if t.Failed() {
			s.printLogs(t)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	s.System, s.halt = sys, cancel
	s.started.Store(sys)
	go s.supervise(ctx)
	return s
}

// watchLeader points the control proxies at the leading controller, as the chart's Service
// reaches only the leader (through the endpoint the leader publishes; every replica is
// ready).
func (s *system) watchLeader(ctx context.Context) {
	for ctx.Err() == nil {
		if sys := s.started.Load(); sys != nil {
			controllers, _ := sys.Processes()
			addr := ""
			for _, p := range controllers {
				if p.Exited() == nil && p.Leads(ctx) && p.Ready(ctx) {
					addr = p.Listen
					break
				}
			}
			s.leader.Store(&addr)
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// supervise starts again every process that died and no fault holds down, as a
// Deployment's kubelet would, after restartDelay.
func (s *system) supervise(ctx context.Context) {
	dead := map[*devsystem.Process]time.Time{}
	for ctx.Err() == nil {
		controllers, gateways := s.Processes()
		for _, p := range append(controllers, gateways...) {
			if p.Exited() == nil {
				continue
			}
			s.mu.Lock()
			held := s.held[p.Name]
			s.mu.Unlock()
			if held {
				continue
			}
			since, ok := dead[p]
			if !ok {
				dead[p] = time.Now()
				continue
			}
			if time.Since(since) < restartDelay {
				continue
			}
			delete(dead, p)
			why := p.Exited()
			if _, err := s.Restart(p); err == nil {
				s.mu.Lock()
				s.restarts[p.Name]++
				s.exits = append(s.exits, fmt.Sprintf("%s: %v: %s", p.Name, why, lastLine(p.LogPath)))
				s.mu.Unlock()
			}
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// hold keeps a process from being restarted (or marks it paused) until release.
func (s *system) hold(name string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.held[name] = true
	} else {
		delete(s.held, name)
	}
}

// recordPods remembers the UID of every executor Pod, for the sweep of processes.
func (s *system) recordPods(ctx context.Context, t *testing.T) {
	factory := informers.NewSharedInformerFactoryWithOptions(s.c.Kube(), 0, informers.WithNamespace(s.executors))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			s.mu.Lock()
			s.podUIDs[string(p.UID)] = true
			s.mu.Unlock()
		}
	}})
	if err != nil {
		t.Error(err)
		return
	}
	factory.Start(ctx.Done())
}

// ready waits until a controller leads and both gateways are ready again.
func (s *system) ready(t *testing.T, d time.Duration) {
	t.Helper()
	clustertest.Eventually(t, d, "a leader and ready gateways", func() bool {
		controllers, gateways := s.Processes()
		leading := false
		for _, p := range controllers {
			leading = leading || (p.Exited() == nil && p.Leads(t.Context()) && p.Ready(t.Context()))
		}
		for _, g := range gateways {
			if g.Exited() != nil || !g.Ready(t.Context()) {
				return false
			}
		}
		return leading
	})
}

func (s *system) printLogs(t *testing.T) {
	entries, _ := filepath.Glob(filepath.Join(s.dir, "*.log"))
	for _, path := range entries {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		const tail = 6000
		if len(data) > tail {
			data = data[len(data)-tail:]
		}
		t.Logf("--- %s (tail) ---\n%s", filepath.Base(path), strings.TrimSpace(string(data)))
	}
}

// lastLine is the last line a process logged.
func lastLine(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return lines[len(lines)-1]
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (s *system) String() string {
	return fmt.Sprintf("namespaces %s (control plane) and %s (executors)", s.ns, s.executors)
}
