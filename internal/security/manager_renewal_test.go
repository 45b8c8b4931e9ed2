package security

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	ktesting "k8s.io/client-go/testing"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/security/highwater"
)

// The manager tests against the real API server are in managertest (they need the local
// cluster). These run without one: the mark lives in a fake clientset whose ConfigMap
// updates are resourceVersion compare-and-swaps, as the API server's are, so a writer
// raises it, readers watch it and a restarted replica reads what was recorded.

const (
	renewalNamespace = "execplane"
	renewalMark      = "execplane-security-high-water"
)

// fakeMarkClient holds the initial mark (generation 0) and makes every ConfigMap update a
// compare-and-swap on the resourceVersion, which it raises on every write.
func fakeMarkClient(t *testing.T) *fake.Clientset {
	t.Helper()
	initial := highwater.Initial(renewalNamespace, renewalMark)
	initial.ResourceVersion = "1"
	kube := fake.NewClientset(initial)
	gvr := corev1.SchemeGroupVersion.WithResource("configmaps")
	var mu sync.Mutex
	version := 1
	kube.PrependReactor("update", "configmaps", func(a ktesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		cm := a.(ktesting.UpdateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
		stored, err := kube.Tracker().Get(gvr, a.GetNamespace(), cm.Name)
		if err != nil {
			return true, nil, err
		}
		if stored.(*corev1.ConfigMap).ResourceVersion != cm.ResourceVersion {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), cm.Name, errors.New("the object has been modified"))
		}
		version++
		cm.ResourceVersion = strconv.Itoa(version)
		if err := kube.Tracker().Update(gvr, cm, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, cm, nil
	})
	return kube
}

// testClock is the managers' injected clock: certificate lifetimes pass without waiting.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// projectedVolume lays files out as the kubelet does: <dir>/..<snapshot>/<file>, <dir>/..data
// a symbolic link to the current snapshot, <dir>/<file> → ..data/<file>. write creates a new
// snapshot and swaps ..data with one rename, so every file changes at once.
type projectedVolume struct {
	t   *testing.T
	dir string
	n   int
}

func (v *projectedVolume) manifest() string { return filepath.Join(v.dir, devbundle.ManifestFile) }

func (v *projectedVolume) write(files map[string][]byte) {
	v.t.Helper()
	v.n++
	snap := filepath.Join(v.dir, ".."+strconv.Itoa(v.n))
	must(v.t, os.Mkdir(snap, 0o700))
	for name, data := range files {
		must(v.t, os.WriteFile(filepath.Join(snap, name), data, 0o600))
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	must(v.t, os.Symlink(filepath.Base(snap), tmp))
	must(v.t, os.Rename(tmp, filepath.Join(v.dir, "..data")))
	for name := range files {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			must(v.t, os.Symlink(filepath.Join("..data", name), link))
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// serverPair is a server certificate and key as cert-manager writes them (tls.crt, tls.key).
type serverPair struct {
	cert, key []byte
	leaf      *x509.Certificate
}

func issuePair(t *testing.T, res *devbundle.Result, notBefore, notAfter time.Time) serverPair {
	t.Helper()
	certPEM, keyPEM, err := res.IssueServer(notBefore, notAfter)
	must(t, err)
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	must(t, err)
	return serverPair{cert: certPEM, key: keyPEM, leaf: c.Leaf}
}

// TestManagerRenewalInPlace rewrites the server certificate and key the way cert-manager
// does — a new leaf of the same CA and names and a new key, in place, in the same
// generation, well before the old leaf's notAfter — under a writer (the controller) and a
// reader (a gateway) that serve TLS to a client handshaking without pause, and moves the
// managers' clock past the old leaf's notAfter. Throughout: zero failed handshakes and no
// instant at which either manager is not ready. A torn pair (the next certificate with the
// previous key) is refused while the good pair serves, and writing the older certificate
// back is refused by both, and by a replica that restarts on it (the mark recorded the
// newer one), while the newer certificate keeps serving.
func TestManagerRenewalInPlace(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	clock := &testClock{now: t0}
	src := filepath.Join(t.TempDir(), "bundle")
	res, err := devbundle.Generate(src, devbundle.Options{RenewableServer: true, ServerValidity: leafLifetime, Now: t0})
	must(t, err)
	files := map[string][]byte{}
	for _, name := range []string{devbundle.ManifestFile, devbundle.CACertFile, devbundle.ServerIssuerFile,
		devbundle.ServerCertFile, devbundle.ServerKeyFile, devbundle.GrantPublicFile, devbundle.GrantKeyFile, devbundle.RecordKeyFile} {
		files[name], err = os.ReadFile(filepath.Join(src, name))
		must(t, err)
	}
	withServer := func(p serverPair) map[string][]byte {
		out := map[string][]byte{}
		for k, v := range files {
			out[k] = v
		}
		out[devbundle.ServerCertFile], out[devbundle.ServerKeyFile] = p.cert, p.key
		return out
	}
	first, err := tls.X509KeyPair(files[devbundle.ServerCertFile], files[devbundle.ServerKeyFile])
	must(t, err)
	old := serverPair{cert: files[devbundle.ServerCertFile], key: files[devbundle.ServerKeyFile], leaf: first.Leaf}

	vol := &projectedVolume{t: t, dir: t.TempDir()}
	vol.write(files)
	kube := fakeMarkClient(t)
	start := func(raise bool) (*Manager, context.CancelFunc) {
		m, err := NewManager(ManagerConfig{ManifestPath: vol.manifest(), Namespace: renewalNamespace, HighWaterConfigMap: renewalMark,
			Kube: kube, RaiseMark: raise, PollInterval: 20 * time.Millisecond, Now: clock.Now})
		must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { m.Run(ctx) })
		stop := func() { cancel(); wg.Wait() }
		t.Cleanup(stop)
		return m, stop
	}
	controller, _ := start(true)
	gateway, _ := start(false)
	serving := func(m *Manager, p serverPair) bool {
		b, ok := m.Current()
		return ok && bytes.Equal(b.ServerCertificate().Leaf.Raw, p.leaf.Raw)
	}
	eventually(t, "both serve the first certificate", func() bool { return serving(controller, old) && serving(gateway, old) })

	// A client handshaking with each manager without pause, verifying the server's
	// certificate at the managers' time (and so refusing an expired one), and a sampler of
	// readiness.
	caPool := x509.NewCertPool()
	caPool.AddCert(loadCA(t, res.CACert, res.CAKey).Certificate)
	client, err := tls.LoadX509KeyPair(res.Caller.CertFile, res.Caller.KeyFile)
	must(t, err)
	servers := []string{serveTLS(t, controller.TLSConfig()), serveTLS(t, gateway.TLSConfig())}
	var successes, failures, samples, notReady atomic.Int64
	stop := make(chan struct{})
	var load sync.WaitGroup
	// Stopped before the servers close (cleanups run last first), also when the test fails.
	stopLoad := sync.OnceFunc(func() { close(stop); load.Wait() })
	t.Cleanup(stopLoad)
	load.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := renewalHandshake(servers[i%2], client, caPool, clock.Now()); err != nil {
				failures.Add(1)
				t.Errorf("handshake with the %s failed: %v", []string{"controller", "gateway"}[i%2], err)
			} else {
				successes.Add(1)
			}
		}
	})
	load.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			samples.Add(1)
			if !controller.Ready() || !gateway.Ready() {
				notReady.Add(1)
			}
		}
	})
	handshakesGoOn := func(what string) {
		t.Helper()
		want := successes.Load() + 4 // the loop alternates: two more with each manager
		eventually(t, "handshakes succeed "+what, func() bool { return successes.Load() >= want })
	}
	handshakesGoOn("with the first certificate")

	// cert-manager renews at two thirds of the lifetime: a new leaf, a new key, in place.
	clock.Set(t0.Add(leafLifetime * 2 / 3))
	renewed := issuePair(t, res, clock.Now(), clock.Now().Add(leafLifetime))
	vol.write(withServer(renewed))
	eventually(t, "both serve the renewed certificate", func() bool { return serving(controller, renewed) && serving(gateway, renewed) })
	if b, _ := controller.Current(); b.Generation() != 1 {
		t.Fatalf("a renewal changed the generation to %d", b.Generation())
	}
	markLeaf(t, kube, 1, renewed)
	handshakesGoOn("with the renewed certificate")

	// A torn pair (the next certificate beside the previous key) is refused; the renewed
	// pair keeps serving. The kubelet's next snapshot has the matching pair: served.
	clock.Set(clock.Now().Add(time.Second))
	next := issuePair(t, res, clock.Now(), clock.Now().Add(leafLifetime))
	torn := withServer(next)
	torn[devbundle.ServerKeyFile] = renewed.key
	vol.write(torn)
	for _, m := range []*Manager{controller, gateway} {
		if err := m.Reload(t.Context()); !errors.Is(err, ErrInvalidBundle) {
			t.Fatalf("a torn pair: %v", err)
		}
		if !serving(m, renewed) {
			t.Fatal("a torn pair withdrew the good certificate")
		}
	}
	handshakesGoOn("after a torn pair")
	vol.write(withServer(next))
	eventually(t, "both serve the next certificate", func() bool { return serving(controller, next) && serving(gateway, next) })
	markLeaf(t, kube, 1, next)

	// The older certificate written back: refused by both, and by replicas started on it.
	vol.write(withServer(renewed))
	for _, m := range []*Manager{controller, gateway} {
		if err := m.Reload(t.Context()); !errors.Is(err, ErrUnsafeTransition) || !strings.Contains(err.Error(), "rollback") {
			t.Fatalf("the older certificate written back: %v", err)
		}
		if !serving(m, next) {
			t.Fatal("a refused rollback withdrew the newer certificate")
		}
	}
	for _, raise := range []bool{true, false} {
		restarted, stopRestarted := start(raise)
		eventually(t, "a restarted replica refuses the older certificate", func() bool {
			return errors.Is(restarted.CheckReady(), highwater.ErrRollback)
		})
		if restarted.Ready() {
			t.Fatal("a replica restarted on the older certificate is ready")
		}
		stopRestarted()
	}
	markLeaf(t, kube, 1, next)
	handshakesGoOn("after the older certificate was refused")
	vol.write(withServer(next)) // cert-manager puts its certificate back

	// Past the first certificate's notAfter (and the renewed one's notBefore is long past):
	// the newer certificate serves, nothing failed, nobody was ever not ready.
	clock.Set(old.leaf.NotAfter.Add(time.Minute))
	handshakesGoOn("after the first certificate expired")
	if !serving(controller, next) || !serving(gateway, next) {
		t.Fatal("the newest certificate is not the one served")
	}
	// Afterwards too: the renewed certificate, still valid but older than the one serving,
	// written back is a rollback, not a renewal.
	vol.write(withServer(renewed))
	for _, m := range []*Manager{controller, gateway} {
		if err := m.Reload(t.Context()); !errors.Is(err, ErrUnsafeTransition) || !strings.Contains(err.Error(), "rollback") {
			t.Fatalf("an older, valid certificate written back after the expiry: %v", err)
		}
	}
	handshakesGoOn("after an older certificate was refused again")
	if !serving(controller, next) || !serving(gateway, next) {
		t.Fatal("a refused rollback withdrew the newest certificate")
	}
	markLeaf(t, kube, 1, next)
	stopLoad()
	if failures.Load() != 0 || notReady.Load() != 0 || samples.Load() < 20 {
		t.Fatalf("%d failed handshakes, %d of %d readiness samples not ready", failures.Load(), notReady.Load(), samples.Load())
	}
	t.Logf("%d handshakes and %d readiness samples across two renewals, a torn pair, a rollback and the first certificate's expiry: "+
		"no handshake failed, never not ready", successes.Load(), samples.Load())
}

// markLeaf checks that the mark is at generation gen and records p as the newest server
// certificate.
func markLeaf(t *testing.T, kube *fake.Clientset, gen uint64, p serverPair) {
	t.Helper()
	cm, err := kube.CoreV1().ConfigMaps(renewalNamespace).Get(t.Context(), renewalMark, metav1.GetOptions{})
	must(t, err)
	if rec := cm.Data[highwater.KeyServerLeaf]; !strings.Contains(rec, FileDigest(p.leaf.Raw)) || cm.Data[highwater.KeyGeneration] != strconv.FormatUint(gen, 10) {
		t.Fatalf("mark %v; want generation %d recording the certificate %s", cm.Data, gen, FileDigest(p.leaf.Raw))
	}
}

// serveTLS accepts connections on loopback with cfg, completes each handshake, writes one
// byte and closes; it stops with the test.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	must(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
				if conn.(*tls.Conn).Handshake() == nil {
					_, _ = conn.Write([]byte{1})
				}
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// renewalHandshake completes a TLS 1.3 handshake as the caller, verifying the server's
// certificate for "localhost" at now, and waits for the server's byte: in TLS 1.3 the
// server's verdict on the client certificate arrives with the first read.
func renewalHandshake(addr string, cert tls.Certificate, roots *x509.CertPool, now time.Time) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: handshakeTimeout}, "tcp", addr, &tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{cert},
		Time: func() time.Time { return now },
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	_, err = io.ReadFull(conn, make([]byte, 1))
	return err
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	clustertest.Eventually(t, 15*time.Second, what, cond)
}
