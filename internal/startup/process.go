package startup

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/diagnostics"
	"github.com/execplane/execplane/internal/kube"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/internal/version"
	"github.com/execplane/execplane/pkg/profile"
)

// Process is a server's process once opened: what both servers build before anything of
// their own.
type Process struct {
	cfg Config
	// Logger is the process's logger; klog (client-go) is routed into it.
	Logger hclog.Logger
	// Clients reach the API server, rate-limited and counted.
	Clients kube.Clients
	// Profiles are the operator's profiles.
	Profiles *profile.Registry
	// Security holds the current security material (not running until Serve).
	Security *security.Manager
	// Registry serves /metrics: Go and process collectors and the API request counter, and
	// whatever the server adds.
	Registry *prometheus.Registry
	// Listener is the API's, every handshake bounded.
	Listener net.Listener
}

// Loadable is a server's configuration: its flags, its validation and the shared part it
// embeds.
type Loadable interface {
	cli.Config
	Shared() Config
}

// Begin loads a server's configuration from args into cfg (which holds the defaults) and
// opens its process. When the flags asked for the version or a configuration check, it
// answers them and returns no Process: the server returns the error at once.
func Begin(cfg Loadable, args []string, stdout, stderr io.Writer) (*Process, error) {
	shared := cfg.Shared()
	if done, err := cli.Load(shared.server.Name, cfg, args, stdout, stderr); done {
		return nil, err
	}
	return Open(cfg.Shared(), stderr)
}

// Open builds the process cfg describes; its logs go to stderr. It listens, but serves
// nothing until Serve.
func Open(cfg Config, stderr io.Writer) (*Process, error) {
	s := cfg.server
	if s.Name == "" || s.MaxKubeQPS <= 0 {
		return nil, errors.New("startup: a Config made by Defaults is required (it names its server)")
	}
	cfg.Log.Name, cfg.Log.Output = s.Name, stderr
	logger, err := logging.New(cfg.Log)
	if err != nil {
		return nil, err
	}
	logging.RouteKlog(logger)
	requests := kube.RequestsCounter("execplane_" + s.Name)
	clients, err := kube.NewClients(kube.ClientOptions{
		Kubeconfig: cfg.Kubeconfig, UserAgent: "execplane-" + s.Name + "/" + version.Get().Version,
		QPS: float32(cfg.KubeQPS), Burst: cfg.KubeBurst, Requests: requests,
	})
	if err != nil {
		return nil, err
	}
	profiles, err := profile.LoadProfiles(cfg.ProfilesFile)
	if err != nil {
		return nil, err
	}
	manager, err := security.NewManager(security.ManagerConfig{
		ManifestPath: cfg.SecurityManifest, Namespace: cfg.Namespace, HighWaterConfigMap: cfg.HighWaterConfigMap,
		RaiseMark: s.RaiseMark, Kube: clients.Kube, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	listener, err := net.Listen("tcp", cfg.ListenAddress)
	if err != nil {
		return nil, err
	}
	if listener, err = security.HandshakeDeadlineListener(listener, security.HandshakeTimeout); err != nil {
		listener.Close()
		return nil, err
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), requests)
	return &Process{cfg: cfg, Logger: logger, Clients: clients, Profiles: profiles, Security: manager, Registry: registry, Listener: listener}, nil
}

// Close releases what Open took and Serve has not: the listener. A server defers it once
// opened, for the errors on its way to Serve; after Serve it is a no-op.
func (p *Process) Close() {
	_ = p.Listener.Close() // after Serve, already closed by the stop
}

// Serving is what a server serves once opened.
type Serving struct {
	// GRPC is the server's API, served on the process's listener.
	GRPC *grpc.Server
	// Ready says why the process is not ready, "" when it is: a reason from a bounded set
	// (/readyz).
	Ready func() string
	// Grace bounds the drain of in-flight calls at the stop; what is left is then cut.
	Grace time.Duration
	// Work runs while the servers serve (the gateway's readiness and session upkeep, the
	// controller's election); its end, or ctx's, stops them, and its error is the process's.
	Work func(ctx context.Context) error
	// Stopping, if set, runs as the stop begins, before the drain; Stopped after it.
	Stopping, Stopped func()
	// Log are more key/value pairs for the "serving" line.
	Log []any
}

// Serve serves s until ctx ends, Work returns or a server fails, then drains and stops. It
// returns the first error.
func (p *Process) Serve(ctx context.Context, s Serving) error {
	diag := diagnostics.New(p.cfg.DiagnosticsAddress, diagnostics.Checks{Ready: s.Ready, Profiling: p.cfg.Profiling}, p.Registry)
	// The first part to fail ends Work, and Work's end ends the servers: they outlive it,
	// so that on shutdown what Work holds (the controller's Lease) is given back before the
	// probes and the API go away.
	g, ctx := errgroup.WithContext(ctx)
	serving, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	g.Go(func() error { return diag.Serve(serving) })
	g.Go(func() error { p.Security.Run(serving); return nil })
	g.Go(func() error {
		// ErrServerStopped: the drain ran before Serve began, so nothing failed.
		if err := s.GRPC.Serve(p.Listener); !errors.Is(err, grpc.ErrServerStopped) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-serving.Done()
		if s.Stopping != nil {
			s.Stopping()
		}
		drain(s.GRPC, s.Grace)
		if s.Stopped != nil {
			s.Stopped()
		}
		return nil
	})
	p.Logger.Info("serving", append([]any{logging.KeyVersion, version.Get().Version, logging.KeyNamespace, p.cfg.Namespace,
		logging.KeyExecutors, p.cfg.Executors(), logging.KeyAddress, p.Listener.Addr().String()}, s.Log...)...)
	g.Go(func() error {
		defer stopServing()
		return s.Work(ctx)
	})
	err := g.Wait()
	p.Logger.Info("stopped")
	return err
}

// cutReturn bounds how long the handlers of calls cut at the end of the grace may take to
// return: their contexts are cancelled, so they normally return at once, and what the server
// does after the drain (the gateway closes its sessions) should come after them; a handler
// that ignores its context must not hold the process forever.
const cutReturn = 5 * time.Second

// drain lets in-flight calls end for at most grace, then cuts what is left and waits (at
// most cutReturn) for their handlers to return.
func drain(s *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		s.Stop()
		select {
		case <-done:
		case <-time.After(cutReturn):
		}
	}
}
