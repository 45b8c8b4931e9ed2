package security

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/pkg/problem"

	"github.com/hashicorp/go-hclog"
	"k8s.io/client-go/kubernetes"

	"github.com/execplane/execplane/internal/security/highwater"
)

// Manager timing.
const (
	// DefaultPollInterval is how often the mounted material is checked for a new snapshot:
	// the kubelet's own projected-volume sync period is a minute, so a second adds nothing
	// noticeable to a rotation and costs one small file read.
	DefaultPollInterval = time.Second
	// RefusedRetryInterval is how long refused material that has not changed waits before it
	// is judged again. Some refusals pass with time alone: a certificate renewed by a CA whose
	// clock runs a few seconds ahead is not valid yet when it arrives. Judging it again a
	// little later, rather than on every poll, logs a lasting refusal twice a minute at most.
	RefusedRetryInterval = 30 * time.Second
	// acceptTimeout bounds one raise of the high-water mark.
	acceptTimeout = 10 * time.Second
)

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// ManifestPath is the manifest inside the projected volume that holds every file of the
	// bundle (server certificate and key, client CA bundle, grant keys, the manifest). One
	// volume keeps the kubelet's ..data swap atomic across all of them.
	ManifestPath string
	// Namespace and HighWaterConfigMap locate the high-water mark.
	Namespace          string
	HighWaterConfigMap string
	// RaiseMark makes this manager a writer of the mark (the controller): it raises the mark
	// for a newer valid bundle. A reader (a gateway) never writes it: it publishes only the
	// bundle the mark names, and keeps serving the previous one while the mark is behind.
	RaiseMark bool
	// Kube reads (and, for a writer, raises) the mark.
	Kube kubernetes.Interface
	// PollInterval overrides DefaultPollInterval.
	PollInterval time.Duration
	// Logger receives reload outcomes (never material).
	Logger hclog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Manager is the SecurityManager: it loads the security material atomically, publishes a
// bundle only after it passed full validation, the transition rules and the high-water mark
// (raised by compare-and-swap), keeps serving the last good bundle while a newer one is
// refused, and fails closed — not ready, every RPC Unavailable — when no valid unexpired
// bundle is published or the mark is unavailable. A server certificate renewed in place
// (serverCertificate.renewal) is a new bundle of the same generation: every poll also reads
// the certificate and key, and the newer leaf is published once the mark records it.
type Manager struct {
	cfg  ManagerConfig
	mark *highwater.Store
	log  hclog.Logger

	current atomic.Pointer[Bundle]

	mu sync.Mutex
	// lastSeen: the manifest and renewable files last attempted, to skip unchanged polls.
	lastSeen [sha256.Size]byte
	// renewable: the renewable files (server certificate and key) of the manifest whose
	// SHA-256 is renewableOf. They change without the manifest, so every poll reads them too.
	renewable   []fileRef
	renewableOf [sha256.Size]byte
	lastError   error
	// retryAt: when unchanged material refused while a bundle is published is judged again.
	retryAt time.Time
	// pending: the last attempt waits for the mark (a reader whose material is newer than
	// the mark, or the mark unavailable); it is retried when the mark changes (pendingAt is
	// the mark's resourceVersion then), not on every poll.
	pending   bool
	pendingAt string
}

// NewManager validates cfg and returns a Manager. Nothing is loaded until Reload or Run.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	var errs []error
	if cfg.ManifestPath == "" || !filepath.IsAbs(cfg.ManifestPath) {
		errs = append(errs, errors.New("manifest path must be absolute"))
	}
	if cfg.Namespace == "" || cfg.HighWaterConfigMap == "" {
		errs = append(errs, errors.New("namespace and high-water ConfigMap are required"))
	}
	if cfg.Kube == nil {
		errs = append(errs, errors.New("a Kubernetes client is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Manager{
		cfg:       cfg,
		mark:      highwater.New(cfg.Kube, cfg.Namespace, cfg.HighWaterConfigMap),
		log:       cfg.Logger.Named("security"),
		lastError: fmt.Errorf("%w: not loaded yet", ErrUnavailable),
	}, nil
}

// Run watches the high-water mark and polls the mounted material until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	go m.mark.Run(ctx)
	tick := time.NewTicker(m.cfg.PollInterval)
	defer tick.Stop()
	for {
		if err := m.reload(ctx, false); err != nil {
			m.log.Debug("security material not published", logging.KeyError, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-m.mark.Changed():
		}
	}
}

// Reload loads the mounted material now and publishes it if it passes every check. It
// returns why a bundle was not published; the previous bundle stays published then.
func (m *Manager) Reload(ctx context.Context) error { return m.reload(ctx, true) }

func (m *Manager) reload(ctx context.Context, force bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	manifest, err := os.ReadFile(m.cfg.ManifestPath)
	if err != nil {
		return m.refuse(fmt.Errorf("%w: read manifest: %v", ErrUnavailable, err))
	}
	seen := m.fingerprint(manifest)
	cur := m.current.Load()
	now := m.cfg.Now()
	// Skip a poll when nothing changed: not the material, not the mark a pending attempt
	// waits for, and no refusal of a published bundle's successor is due to be judged again.
	// With nothing published, a refused attempt is retried on every poll.
	unchanged := seen == m.lastSeen && (!m.pending || m.markResourceVersion() == m.pendingAt)
	settled := m.lastError == nil || m.pending || (cur != nil && now.Before(m.retryAt))
	if !force && unchanged && settled {
		return m.lastError
	}
	m.lastSeen, m.pending = seen, false
	next, err := LoadBundle(m.cfg.ManifestPath, now)
	if err != nil {
		return m.refuse(err)
	}
	if cur != nil && cur.sameMaterial(next) {
		m.lastError = nil
		return nil
	}
	if cur != nil {
		if err := CheckTransition(cur, next, now); err != nil {
			return m.refuse(err)
		}
	}
	// The mark is raised only now, after full validation; the bundle is published only
	// after the mark accepted it (a writer) or names it (a reader).
	offer := offerOf(next)
	if m.cfg.RaiseMark {
		actx, cancel := context.WithTimeout(ctx, acceptTimeout)
		defer cancel()
		if err := m.mark.Accept(actx, offer, now); err != nil {
			if errors.Is(err, highwater.ErrUnavailable) || errors.Is(err, highwater.ErrContended) {
				// Transient (the API server, a lost race): retry at the next poll, or no
				// gateway — which only reads the mark — would ever publish this bundle.
				m.lastSeen = [sha256.Size]byte{}
			}
			return m.refuse(fmt.Errorf("%w: %w", ErrUnavailable, err))
		}
	} else {
		// The mark's version is taken before it is judged: if it moves in between, the
		// recorded version differs from the new one and the next wake-up judges again.
		at := m.markResourceVersion()
		if err := m.mark.Admit(offer); err != nil {
			m.pending = errors.Is(err, highwater.ErrPending) || errors.Is(err, highwater.ErrUnavailable)
			m.pendingAt = at
			return m.refuse(fmt.Errorf("%w: %w", ErrUnavailable, err))
		}
	}
	m.current.Store(next)
	m.lastError = nil
	m.log.Info("security material published", logging.KeyGeneration, next.Generation())
	return nil
}

// offerOf is what the high-water mark is offered for b: its generation, digest, grant-key
// set and, when its server certificate is renewable, that certificate.
func offerOf(b *Bundle) highwater.Offer {
	offer := highwater.Offer{Generation: b.Generation(), Digest: b.Digest(), Keys: b.KeySet()}
	if leaf, ok := b.ServerLeaf(); ok {
		offer.Leaf = &highwater.Leaf{NotBefore: leaf.NotBefore, Digest: leaf.Digest}
	}
	return offer
}

// markResourceVersion is the observed mark's resourceVersion ("" when unavailable).
func (m *Manager) markResourceVersion() string {
	mark, err := m.mark.Current()
	if err != nil {
		return ""
	}
	return mark.ResourceVersion
}

// fingerprint is what a poll compares with the last attempt: the manifest and, when its
// server certificate is renewable, the certificate and key files, which change without it.
// A file that cannot be read counts by its error. Called with mu held.
func (m *Manager) fingerprint(manifest []byte) [sha256.Size]byte {
	of := sha256.Sum256(manifest)
	if of != m.renewableOf {
		m.renewableOf, m.renewable = of, nil
		var p problem.List
		if parsed := parseManifest(manifest, &p); parsed != nil && parsed.ServerCertificate.Renewal != nil {
			for _, f := range parsed.files() {
				if !f.pinned && checkFilePath(f.name) == nil {
					m.renewable = append(m.renewable, f)
				}
			}
		}
	}
	if len(m.renewable) == 0 {
		return of
	}
	h := sha256.New()
	h.Write(of[:])
	// Beside the manifest as LoadBundle reads it: through its links (the kubelet's ..data).
	dir := filepath.Dir(m.cfg.ManifestPath)
	if resolved, err := filepath.EvalSymlinks(m.cfg.ManifestPath); err == nil {
		dir = filepath.Dir(resolved)
	}
	for _, f := range m.renewable {
		data, err := readFileCapped(filepath.Join(dir, f.name), f.limit)
		if err != nil {
			data = []byte("error: " + err.Error())
		}
		sum := sha256.Sum256(data)
		h.Write(sum[:])
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

func (m *Manager) refuse(err error) error {
	m.retryAt = m.cfg.Now().Add(RefusedRetryInterval)
	m.lastError = err
	m.log.Warn("security material refused", logging.KeyError, err)
	return err
}

// Current returns the published bundle when it may be used now: the mark is available, the
// bundle is not behind it by a rollback and every part of it is valid at this instant.
// Every handshake and RPC asks; nothing is cached past this call.
func (m *Manager) Current() (*Bundle, bool) {
	b := m.current.Load()
	if b == nil {
		return nil, false
	}
	if _, err := m.mark.Current(); err != nil {
		return nil, false
	}
	if b.ValidAt(m.cfg.Now()) != nil {
		return nil, false
	}
	return b, true
}

// Ready reports whether RPCs can be served.
func (m *Manager) Ready() bool {
	_, ok := m.Current()
	return ok
}

// CheckReady returns nil when ready, or why not (for /readyz and logs; no material in it).
func (m *Manager) CheckReady() error {
	b := m.current.Load()
	if _, err := m.mark.Current(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if b == nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		return fmt.Errorf("%w: no bundle published: %w", ErrUnavailable, m.lastError)
	}
	if err := b.ValidAt(m.cfg.Now()); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// TLSConfig returns the server configuration that takes the current bundle on every
// handshake.
func (m *Manager) TLSConfig() *tls.Config { return ServerTLSConfig(m.Current) }
