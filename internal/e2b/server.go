package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/diagnostics"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/pkg/client"
	"github.com/execplane/execplane/proto/envd/filesystem/envdfilesystemconnect"
	"github.com/execplane/execplane/proto/envd/process/envdprocessconnect"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Server bounds. The SDK holds one connection per running command for its whole life, so
// there is no write timeout; headers and idle connections are bounded.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
	shutdownTimeout   = 10 * time.Second
	// maxConnectMessage bounds an envd request message (a command line with its
	// environment, a path): far above what the SDK sends, far below memory.
	maxConnectMessage = 4 << 20
	// prepareRunTimeout bounds the background acquisition of a new sandbox's run.
	prepareRunTimeout = 30 * time.Second
	// profileCacheFor is how long a profile's limits are reused before asked again.
	profileCacheFor = time.Minute
)

// frontEnd is one replica of the E2B front end: stateless beyond caches that any replica
// rebuilds from the API.
type frontEnd struct {
	cfg       Config
	log       hclog.Logger
	api       *client.Client
	keys      atomic.Pointer[Keys]
	sandboxes *sandboxes

	profilesMu sync.Mutex
	profiles   map[string]cachedProfile

	slots   tenantSlots
	metrics *metrics
}

// tenantSlots counts each API key's requests in flight on this replica.
type tenantSlots struct {
	mu   sync.Mutex
	used map[string]int
}

// errTooManyRequests: a key's requests in flight are at --max-tenant-requests.
var errTooManyRequests = &problem{http.StatusTooManyRequests, connect.CodeResourceExhausted, "too many requests in flight for this API key"}

// take counts a request of t in, or refuses it at max.
func (s *tenantSlots) take(t *Tenant, max int) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used[t.Hash] >= max {
		return nil, errTooManyRequests
	}
	s.used[t.Hash]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.used[t.Hash]--; s.used[t.Hash] == 0 {
			delete(s.used, t.Hash)
		}
	}, nil
}

type cachedProfile struct {
	profile client.Profile
	at      time.Time
}

// callerKey carries the caller of an envd request: the sandbox its token opens.
type callerKey struct{}

type caller struct {
	tenant  *Tenant
	sandbox *sandbox
}

func callerOf(ctx context.Context) *caller { return ctx.Value(callerKey{}).(*caller) }

// Run is the front end's main: flags, the key file, the client of the gateway, then the
// server until ctx ends.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	if done, err := cli.Load("e2b", &cfg, args, stdout, stderr); done {
		return err
	}
	cfg.Log.Output = stderr
	log, err := logging.New(cfg.Log)
	if err != nil {
		return err
	}
	keys, err := LoadKeys(cfg.KeysFile)
	if err != nil {
		return err
	}
	// The client certificate is read again for every new connection to the gateway, so
	// that its renewal in place (cert-manager) needs no restart.
	files := security.ClientFiles{CertFile: cfg.ClientCert, KeyFile: cfg.ClientKey, CAFile: cfg.GatewayCA, ServerName: cfg.GatewayServerName}
	tlsCfg, err := security.LoadClientTLSConfig(files)
	if err != nil {
		return err // refused at start, what would fail on every connection
	}
	api, err := client.Dial(client.Config{Address: cfg.Gateway, TLS: tlsCfg,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(security.ReloadingClientCredentials(files))}})
	if err != nil {
		return err
	}
	defer api.Close() //nolint:errcheck // closing on exit
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := newFrontEnd(cfg, log, api, keys, registry)
	defer f.sandboxes.closeAll()

	l, err := net.Listen("tcp", cfg.ListenAddress)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: f.routes(), ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout,
		ErrorLog: log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})}
	diag := diagnostics.New(cfg.DiagnosticsAddress, diagnostics.Checks{Ready: func() string { return "" }}, registry)
	log.Info("serving", logging.KeyAddress, l.Addr().String(), logging.KeyCount, len(cfg.Templates))

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		if cfg.TLSCertFile != "" {
			err = srv.ServeTLS(l, cfg.TLSCertFile, cfg.TLSKeyFile)
		} else {
			err = srv.Serve(l)
		}
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	})
	g.Go(func() error { return diag.Serve(ctx) })
	g.Go(func() error { f.maintain(ctx); return nil })
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			// Streams still open at the bound (a command followed, a long upload) are cut:
			// their commands run on, durable; the SDK reconnects through another replica.
			log.Info("streams still open at shutdown were cut", logging.KeyError, err)
			_ = srv.Close()
		}
		return nil
	})
	return g.Wait()
}

func newFrontEnd(cfg Config, log hclog.Logger, api *client.Client, keys *Keys, reg prometheus.Registerer) *frontEnd {
	f := &frontEnd{cfg: cfg, log: log, api: api, sandboxes: newSandboxes(api), profiles: map[string]cachedProfile{}, slots: tenantSlots{used: map[string]int{}}}
	f.metrics = newMetrics(reg, f.sandboxes.count)
	f.keys.Store(keys)
	return f
}

// maintain reloads the key file when it changes (a rotation: a key added, one dropped) and
// lets idle sandboxes go, until ctx ends.
func (f *frontEnd) maintain(ctx context.Context) {
	reload := time.NewTicker(keysReloadEvery)
	defer reload.Stop()
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
	var last time.Time
	if st, err := os.Stat(f.cfg.KeysFile); err == nil {
		last = st.ModTime() // the file Run loaded
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			f.sandboxes.sweep()
		case <-reload.C:
			last = f.reloadKeys(last)
		}
	}
}

// reloadKeys loads the key file again when its modification time is not last, and returns
// the time of the file in use. A file that does not load leaves the keys in use (a broken
// file is the operator's to fix, not a reason to lock every tenant out) and is tried again
// at the next change.
func (f *frontEnd) reloadKeys(last time.Time) time.Time {
	st, err := os.Stat(f.cfg.KeysFile)
	if err != nil || st.ModTime().Equal(last) {
		return last
	}
	keys, err := LoadKeys(f.cfg.KeysFile)
	if err != nil {
		f.log.Error("the key file could not be reloaded; the previous keys stay", logging.KeyError, err)
		return st.ModTime()
	}
	f.keys.Store(keys)
	f.log.Info("key file reloaded", logging.KeyCount, len(keys.byID))
	return st.ModTime()
}

// routes is the one handler of both APIs: the control API by the SDK's paths, envd's by
// its (the Connect services' paths, /files, /health), which never collide.
func (f *frontEnd) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/sandboxes", f.tenantHandler(f.create))
	mux.HandleFunc("GET /v2/sandboxes", f.tenantHandler(f.list))
	mux.HandleFunc("GET /sandboxes", f.tenantHandler(f.list))
	mux.HandleFunc("GET /sandboxes/{id}", f.tenantHandler(f.getInfo))
	mux.HandleFunc("DELETE /sandboxes/{id}", f.tenantHandler(f.kill))
	mux.HandleFunc("POST /sandboxes/{id}/timeout", f.tenantHandler(f.setTimeout))
	mux.HandleFunc("POST /sandboxes/{id}/pause", f.tenantHandler(f.pause))
	mux.HandleFunc("POST /v2/sandboxes/{id}/connect", f.tenantHandler(f.connect))
	mux.HandleFunc("POST /sandboxes/{id}/resume", f.tenantHandler(f.connect))
	mux.HandleFunc("GET /sandboxes/{id}/metrics", f.tenantHandler(f.sandboxMetrics))

	opts := []connect.HandlerOption{connect.WithReadMaxBytes(maxConnectMessage), connect.WithInterceptors(errorLog{f.log})}
	path, h := envdprocessconnect.NewProcessHandler(processService{f}, opts...)
	mux.Handle(path, f.envd(h, true))
	path, h = envdfilesystemconnect.NewFilesystemHandler(filesystemService{f}, opts...)
	mux.Handle(path, f.envd(h, true))
	mux.Handle("GET /files", f.envd(http.HandlerFunc(f.readFile), false))
	mux.Handle("POST /files", f.envd(http.HandlerFunc(f.writeFiles), false))
	mux.Handle("GET /health", f.envd(http.HandlerFunc(f.health), false))
	return f.metrics.observe(mux)
}

// envd authenticates an envd request — the sandbox in E2b-Sandbox-Id, its access token in
// X-Access-Token — and opens the sandbox for it: 401 for a token that is not that
// sandbox's, 502 (E2B's edge's answer) for a sandbox that is not running or not there.
func (f *frontEnd) envd(next http.Handler, rpc bool) http.Handler {
	errs := connect.NewErrorWriter()
	fail := func(w http.ResponseWriter, r *http.Request, err error) {
		if rpc {
			_ = errs.Write(w, r, connectError(err))
			return
		}
		f.fail(w, r, err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("E2b-Sandbox-Id")
		if id == "" {
			fail(w, r, errSandboxNotRunning)
			return
		}
		t := f.keys.Load().Verify(r.Header.Get("X-Access-Token"), id)
		if t == nil {
			fail(w, r, errBadToken)
			return
		}
		done, err := f.slots.take(t, f.cfg.MaxTenantRequests)
		if err != nil {
			f.metrics.refused.Inc()
			fail(w, r, err)
			return
		}
		defer done()
		sb, err := f.sandboxes.get(r.Context(), t, id)
		if errors.Is(err, errSandboxNotFound) {
			err = errSandboxNotRunning
		}
		if err != nil {
			fail(w, r, err)
			return
		}
		defer sb.hold()() // open while it serves, streams included
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, &caller{tenant: t, sandbox: sb})))
	})
}

// run is the sandbox's shared run (joined when this replica holds none alive).
func (f *frontEnd) run(ctx context.Context, sb *sandbox) (*client.Run, error) {
	return sb.runFor(ctx)
}

// withRun calls op under the request's sandbox's run, and once more under a fresh one when
// the first turns out over (superseded by a replacement or a resume, revoked, lapsed): then
// the API is asked again, and a sandbox no longer running answers as one (502).
func (f *frontEnd) withRun(ctx context.Context, op func(*client.Run) error) error {
	sb := callerOf(ctx).sandbox
	for attempt := 0; ; attempt++ {
		run, err := sb.runFor(ctx)
		if err != nil {
			return err
		}
		err = op(run)
		if attempt == 0 && runLost(run, err) {
			sb.lost(run)
			continue
		}
		return err
	}
}

// health serves GET /health from the API, not from the cache: 204 while the sandbox runs,
// 502 (the SDK's "not running") otherwise.
func (f *frontEnd) health(w http.ResponseWriter, r *http.Request) {
	cl := callerOf(r.Context())
	env, err := f.sandboxes.lookup(r.Context(), cl.tenant, cl.sandbox.id)
	if err == nil && !running(env.GetLifecycle()) {
		err = errSandboxNotRunning
	}
	if errors.Is(err, errSandboxNotRunning) || errors.Is(err, errSandboxNotFound) {
		cl.sandbox.leave()
		cl.sandbox.unlist()
		err = errSandboxNotRunning
	}
	if err != nil {
		f.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// prepareRun commits the binding's reference if it is pending (a new sandbox's) and
// acquires the sandbox's run, in the background: the SDK's first envd call follows its
// create or connect at once, and finds the run held (or waits for this acquisition, which
// runFor serialises) rather than acquiring it then. A failure here is only logged: the
// first call acquires again and answers it, a connect commits again.
func (f *frontEnd) prepareRun(sb *sandbox) {
	release := sb.hold()
	go func() {
		defer release()
		ctx, cancel := context.WithTimeout(context.Background(), prepareRunTimeout)
		defer cancel()
		if err := commitPending(ctx, sb.env); err != nil {
			f.log.Debug("reference not committed", logging.KeySandbox, sb.id, logging.KeyError, err)
		}
		if _, err := f.run(ctx, sb); err != nil {
			f.log.Debug("run not acquired ahead", logging.KeySandbox, sb.id, logging.KeyError, err)
		}
	}()
}

// commitPending publishes the binding's reference when it is still pending.
func commitPending(ctx context.Context, env *client.Environment) error {
	for _, ref := range env.Status().GetReferences() {
		if ref.GetBindingId() == env.BindingID() && ref.GetState() == executionv1.ReferenceState_REFERENCE_STATE_PENDING_CREATE {
			return env.CommitReference(ctx)
		}
	}
	return nil
}

// at calls op with an E2B path in the workspace, under the request's sandbox's run
// (withRun).
func (f *frontEnd) at(ctx context.Context, p string, op func(run *client.Run, rel string) error) error {
	rel, err := workspacePath(p)
	if err != nil {
		return err
	}
	return f.withRun(ctx, func(run *client.Run) error { return op(run, rel) })
}

// profile is a profile's limits, cached for a minute.
func (f *frontEnd) profile(ctx context.Context, name string) (client.Profile, error) {
	f.profilesMu.Lock()
	c, ok := f.profiles[name]
	f.profilesMu.Unlock()
	if ok && time.Since(c.at) < profileCacheFor {
		return c.profile, nil
	}
	p, err := f.api.ValidateProfile(ctx, name, "")
	if err != nil {
		return client.Profile{}, fmt.Errorf("profile %s: %w", name, err)
	}
	f.profilesMu.Lock()
	f.profiles[name] = cachedProfile{profile: p, at: time.Now()}
	f.profilesMu.Unlock()
	return p, nil
}

// maxFileBytes is the largest file a sandbox of the profile takes.
func (f *frontEnd) maxFileBytes(ctx context.Context, profile string) (int64, error) {
	p, err := f.profile(ctx, profile)
	if err != nil {
		return 0, err
	}
	return int64(min(p.MaxFileBytes, 1<<62)), nil
}

// maxCommandDuration is the longest a command of the profile may run (0 when unknown: the
// API applies it).
func (f *frontEnd) maxCommandDuration(ctx context.Context, profile string) time.Duration {
	p, err := f.profile(ctx, profile)
	if err != nil {
		return 0
	}
	return p.MaxCommandDuration
}
