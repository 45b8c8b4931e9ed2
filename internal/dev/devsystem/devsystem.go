package devsystem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/kube"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/internal/security/highwater"
)

// Bounds of a system's life.
const (
	// readyTimeout bounds Start's wait for every process to be ready: the controller must win
	// its Lease and sync its caches on a loaded 2-core machine.
	readyTimeout = 90 * time.Second
	// stopGrace is how long a process may drain after SIGTERM before it is killed (above the
	// binaries' own default shutdown grace).
	stopGrace = 15 * time.Second
	// probeTimeout bounds one /readyz or /metrics request.
	probeTimeout = 2 * time.Second
	// HighWaterConfigMap is the name of the security high-water mark (the binaries' default).
	HighWaterConfigMap = "execplane-security-high-water"
)

// Client names of Credentials, beside Options.ExtraClients' names.
const (
	Caller        = "caller"
	Administrator = "admin"
	Gateway       = "gateway"
)

// Options configure Start.
type Options struct {
	// Kubeconfig is the cluster's admin kubeconfig; Namespace an existing namespace, the
	// control plane's (the high-water mark, the Lease).
	Kubeconfig, Namespace string
	// ExecutorNamespace is an existing namespace for the environments, executor Pods and
	// workspace claims, apart from the control plane's as the chart deploys it; empty means
	// Namespace.
	ExecutorNamespace string
	// Dir holds the system's files: the security bundle, profiles, logs. It is created.
	Dir string
	// ControllerBin and GatewayBin are the binaries to run.
	ControllerBin, GatewayBin string
	// Gateways is the number of gateway processes (at least one).
	Gateways int
	// Controllers is the number of controller replicas (at least one): one leads, the
	// others stand by, not ready. With more than one they are named controller-<i> and
	// given that as their --identity.
	Controllers int
	// HelperPath is the helper's path inside executor images.
	HelperPath string
	// Profiles is the profiles YAML.
	Profiles []byte
	// ExtraClients are more client identities in the bundle (see devbundle.ExtraClient).
	ExtraClients []devbundle.ExtraClient
	// ControllerArgs and GatewayArgs are appended to each process's flags; GatewayArgsFor,
	// when set, to gateway i's after them (its own path to the API server or controller).
	ControllerArgs, GatewayArgs []string
	GatewayArgsFor              func(i int) []string
	// ControllerEnv and GatewayEnv are added to the controllers' and the gateways'
	// environment.
	ControllerEnv, GatewayEnv []string
	// Logs, when set, receives each process's output; otherwise Dir/<name>.log does.
	Logs func(name string) io.Writer
}

// System is a running controller and its gateways.
type System struct {
	opts     Options
	Material *devbundle.Result
	Profiles string
	// Controller is the first controller replica; Controllers all of them.
	Controller  *Process
	Controllers []*Process
	Gateways    []*Process

	mu    sync.Mutex
	procs []*Process
}

// Process is one running controller or gateway.
type Process struct {
	// Name is "controller" or the gateway's name; Listen its gRPC address, Diag its
	// diagnostics address (/livez, /readyz, /metrics).
	Name, Listen, Diag string
	// LogPath is the log file, when the output goes to one.
	LogPath string

	bin  string
	args []string
	env  []string // added to this process's environment
	cmd  *exec.Cmd
	log  io.Closer
	done chan struct{}
	err  error
}

// Start writes the system's files, starts the controller and opts.Gateways gateways and
// waits until all are ready.
func Start(ctx context.Context, opts Options) (_ *System, err error) {
	if opts.Kubeconfig == "" || opts.Namespace == "" || opts.Dir == "" || opts.ControllerBin == "" || opts.GatewayBin == "" || opts.HelperPath == "" || len(opts.Profiles) == 0 {
		return nil, errors.New("devsystem: kubeconfig, namespace, dir, binaries, helper path and profiles are required")
	}
	opts.Gateways = max(opts.Gateways, 1)
	opts.Controllers = max(opts.Controllers, 1)
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	s := &System{opts: opts, Profiles: filepath.Join(opts.Dir, "profiles.yaml")}
	if s.Material, err = devbundle.Generate(filepath.Join(opts.Dir, "security"), devbundle.Options{Extra: opts.ExtraClients}); err != nil {
		return nil, err
	}
	if err := os.WriteFile(s.Profiles, opts.Profiles, 0o600); err != nil {
		return nil, err
	}
	clients, err := kube.NewClients(kube.ClientOptions{Kubeconfig: opts.Kubeconfig, UserAgent: "execplane-devsystem"})
	if err != nil {
		return nil, err
	}
	if err := highwater.CreateInitial(ctx, clients.Kube, opts.Namespace, HighWaterConfigMap); err != nil {
		return nil, fmt.Errorf("devsystem: the high-water ConfigMap: %w", err)
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	for i := range opts.Controllers {
		name, args := "controller", append([]string{
			"--gateway-identity", s.Material.Gateway.Identity, "--executor-service-account", "default"},
			opts.ControllerArgs...)
		if opts.Controllers > 1 {
			name = fmt.Sprintf("controller-%d", i)
			args = append(args, "--identity", name)
		}
		p, err := s.start(name, opts.ControllerBin, opts.ControllerEnv, args...)
		if err != nil {
			return nil, err
		}
		s.Controllers = append(s.Controllers, p)
	}
	s.Controller = s.Controllers[0]
	for i := range opts.Gateways {
		var extra []string
		if opts.GatewayArgsFor != nil {
			extra = opts.GatewayArgsFor(i)
		}
		if _, err := s.StartGateway(fmt.Sprintf("gateway-%d", i), opts.HelperPath, extra...); err != nil {
			return nil, err
		}
	}
	if err := s.WaitReady(ctx, readyTimeout); err != nil {
		return nil, err
	}
	return s, nil
}

// StartGateway starts one more gateway whose executors run helperPath (which may differ
// from Options.HelperPath, for hostile executors) and returns without waiting for it.
func (s *System) StartGateway(name, helperPath string, extra ...string) (*Process, error) {
	args := []string{"--controller-address", s.Controller.Listen, "--controller-server-name", "localhost",
		"--controller-client-cert", s.Material.Gateway.CertFile, "--controller-client-key", s.Material.Gateway.KeyFile,
		"--controller-ca", s.Material.CACert, "--helper-path", helperPath}
	args = append(append(args, s.opts.GatewayArgs...), extra...)
	p, err := s.start(name, s.opts.GatewayBin, s.opts.GatewayEnv, args...)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.Gateways = append(s.Gateways, p)
	s.mu.Unlock()
	return p, nil
}

func (s *System) start(name, bin string, env []string, args ...string) (*Process, error) {
	addrs, err := devcluster.FreeAddrs(2)
	if err != nil {
		return nil, err
	}
	p := &Process{Name: name, Diag: addrs[0], Listen: addrs[1], bin: bin, args: args, env: env}
	if err := s.run(p); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p, nil
}

// Restart starts a process again, as its Deployment would, with its name, flags and
// addresses, killing it first if it still runs; the System's slices name the new one.
func (s *System) Restart(old *Process) (*Process, error) {
	old.Kill()
	old.closeLog()
	p := &Process{Name: old.Name, Diag: old.Diag, Listen: old.Listen, bin: old.bin, args: old.args, env: old.env}
	if err := s.run(p); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, list := range [][]*Process{s.procs, s.Controllers, s.Gateways} {
		for i := range list {
			if list[i] == old {
				list[i] = p
			}
		}
	}
	if s.Controller == old {
		s.Controller = p
	}
	return p, nil
}

// run starts p's command.
func (s *System) run(p *Process) error {
	p.done = make(chan struct{})
	name, bin, args := p.Name, p.bin, p.args
	var out io.Writer
	if s.opts.Logs != nil {
		out = s.opts.Logs(name)
	} else {
		p.LogPath = filepath.Join(s.opts.Dir, name+".log")
		f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		out, p.log = f, f
	}
	p.cmd = exec.Command(bin, append([]string{"--namespace", s.opts.Namespace, "--executor-namespace", s.ExecutorNamespace(),
		"--kubeconfig", s.opts.Kubeconfig, "--profiles", s.Profiles, "--security-manifest", s.Material.Manifest,
		"--listen-address", p.Listen, "--diagnostics-address", p.Diag}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if len(p.env) > 0 {
		p.cmd.Env = append(os.Environ(), p.env...)
	}
	if err := p.cmd.Start(); err != nil {
		p.closeLog()
		return fmt.Errorf("devsystem: starting %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return nil
}

// WaitReady waits until every gateway and every controller report ready and one controller
// leads (a standby is ready too: it can take over), failing fast when a process exits.
func (s *System) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		s.mu.Lock()
		procs := append([]*Process(nil), s.procs...)
		controllers := append([]*Process(nil), s.Controllers...)
		s.mu.Unlock()
		ready, leading := true, false
		for _, p := range procs {
			if err := p.Exited(); err != nil {
				return err
			}
			ready = ready && p.Ready(ctx)
			if ready && slices.Contains(controllers, p) {
				leading = leading || p.Leads(ctx)
			}
		}
		if ready && leading {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devsystem: waiting for the controller and gateways to be ready: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Processes returns the current controller and gateway processes (Restart replaces them).
func (s *System) Processes() (controllers, gateways []*Process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Process(nil), s.Controllers...), append([]*Process(nil), s.Gateways...)
}

// Namespace is the system's (control plane's) namespace.
func (s *System) Namespace() string { return s.opts.Namespace }

// ExecutorNamespace is the namespace of the system's environments and executor Pods.
func (s *System) ExecutorNamespace() string {
	if s.opts.ExecutorNamespace != "" {
		return s.opts.ExecutorNamespace
	}
	return s.opts.Namespace
}

// Exited returns an error when a process of the system has exited.
func (s *System) Exited() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if err := p.Exited(); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops every process (gateways first, so they drain while the controller serves).
func (s *System) Stop() {
	s.mu.Lock()
	procs := append([]*Process(nil), s.procs...)
	s.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop()
	}
}

// Credentials returns the files of a named client: Caller, Administrator, Gateway or one of
// Options.ExtraClients.
func (s *System) Credentials(name string) (devbundle.Client, bool) {
	switch name {
	case Caller:
		return s.Material.Caller, true
	case Administrator:
		return s.Material.Administrator, true
	case Gateway:
		return s.Material.Gateway, true
	}
	c, ok := s.Material.Extra[name]
	return c, ok
}

// ClientFiles returns the mTLS files of a named client for dialling the gateways.
func (s *System) ClientFiles(name string) (security.ClientFiles, error) {
	c, ok := s.Credentials(name)
	if !ok {
		return security.ClientFiles{}, fmt.Errorf("devsystem: no client %q", name)
	}
	return security.ClientFiles{CertFile: c.CertFile, KeyFile: c.KeyFile, CAFile: s.Material.CACert, ServerName: "localhost"}, nil
}

// Dial connects a named client to gateway i.
func (s *System) Dial(name string, i int, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	files, err := s.ClientFiles(name)
	if err != nil {
		return nil, err
	}
	cfg, err := security.LoadClientTLSConfig(files)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	addr := s.Gateways[i].Listen
	s.mu.Unlock()
	return grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}, opts...)...)
}

// Stop sends SIGTERM, waits for the drain and kills the process after stopGrace.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.closeLog()
}

// Kill kills the process at once (SIGKILL) and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// PID is the process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited returns an error when the process has exited, nil while it runs.
func (p *Process) Exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("devsystem: %s exited: %v", p.Name, p.err)
	default:
		return nil
	}
}

func (p *Process) closeLog() {
	if p.log != nil {
		p.log.Close()
	}
}

// Leads reports whether the process is a controller that leads (execplane_controller_leader
// is 1): every controller replica that can take over is ready, the leader alone leads.
func (p *Process) Leads(ctx context.Context) bool {
	v, err := p.Metric(ctx, "execplane_controller_leader ")
	return err == nil && v == 1
}

// Ready reports the process's /readyz status.
func (p *Process) Ready(ctx context.Context) bool {
	_, code, err := p.get(ctx, "/readyz")
	return err == nil && code == http.StatusOK
}

// AwaitLeaderMetric waits until the leading controller's metric prefix (as Metric reads
// it) has grown by at least by since the call, under one leader: the observable a test
// waits on instead of a pause ("four checkpoints later"). A change of leader starts the
// count again.
func (s *System) AwaitLeaderMetric(ctx context.Context, prefix string, by float64) error {
	var leader *Process
	var from float64
	for {
		if leader == nil || !leader.Leads(ctx) {
			leader = nil
			for _, c := range s.Controllers {
				if v, err := c.Metric(ctx, prefix); err == nil && c.Leads(ctx) {
					leader, from = c, v
					break
				}
			}
		} else if v, err := leader.Metric(ctx, prefix); err == nil && v >= from+by {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devsystem: waiting for %s to grow by %v: %w", prefix, by, context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Metric returns the sum of the samples of the metric lines that start with prefix (a
// metric name, optionally with the opening of its labels).
func (p *Process) Metric(ctx context.Context, prefix string) (float64, error) {
	body, code, err := p.get(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("devsystem: %s /metrics answered %d", p.Name, code)
	}
	total := 0.0
	for line := range strings.SplitSeq(body, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("devsystem: %s /metrics: %q: %w", p.Name, line, err)
		}
		total += v
	}
	return total, nil
}

// CollectGarbage runs a garbage collection in the process (its heap profile with gc=1), so
// that the heap its metrics report next is what is live. It needs --profiling.
func (p *Process) CollectGarbage(ctx context.Context) error {
	_, code, err := p.get(ctx, "/debug/pprof/heap?gc=1")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("devsystem: %s /debug/pprof/heap answered %d (is --profiling on?)", p.Name, code)
	}
	return err
}

// Goroutines returns the process's goroutines counted by stack (the functions of each
// stack, innermost first, joined by " < "), from its goroutine profile. It needs
// --profiling. Two readings' difference names what a leak holds.
func (p *Process) Goroutines(ctx context.Context) (map[string]int, error) {
	body, code, err := p.get(ctx, "/debug/pprof/goroutine?debug=1")
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("devsystem: %s /debug/pprof/goroutine answered %d (is --profiling on?)", p.Name, code)
	}
	if err != nil {
		return nil, err
	}
	return ParseGoroutines(body), nil
}

// ParseGoroutines reads a goroutine profile in its debug=1 text form: blocks of a count line
// ("3 @ 0x… 0x…") and frame lines ("#\t0x…\tpkg.fn+0x…\tfile:line").
func ParseGoroutines(profile string) map[string]int {
	out := map[string]int{}
	for block := range strings.SplitSeq(profile, "\n\n") {
		var n int
		var frames []string
		for line := range strings.SplitSeq(strings.TrimSpace(block), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[1] == "@" {
				n, _ = strconv.Atoi(f[0])
			} else if len(f) >= 3 && f[0] == "#" {
				fn, _, _ := strings.Cut(f[2], "+0x")
				frames = append(frames, fn)
			}
		}
		if n > 0 && len(frames) > 0 {
			out[strings.Join(frames, " < ")] += n
		}
	}
	return out
}

func (p *Process) get(ctx context.Context, path string) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Diag+path, nil)
	if err != nil {
		return "", 0, err
	}
	// Uncompressed: a gzip'd /metrics answer leaves promhttp's pooled gzip writer (about
	// 2 MiB of flate state) in the process's heap until later collections, so a reading of
	// the heap just after a scrape would count the scrape itself (the soak's heap figure
	// swung by 2 MiB with no change in the process).
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return string(body), resp.StatusCode, err
}
