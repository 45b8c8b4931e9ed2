// Package managertest tests the SecurityManager against the real local cluster (the
// high-water mark lives in a ConfigMap).
package managertest

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/internal/security/highwater"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m, clustertest.Options{})) }

const markName = "execplane-security-high-water"

// volume mimics a projected volume: <dir>/..<snapshot>/files, <dir>/..data -> snapshot,
// <dir>/<file> -> ..data/<file>; publish swaps ..data atomically as the kubelet does.
type volume struct {
	t   *testing.T
	dir string
	n   int
}

func newVolume(t *testing.T) *volume { return &volume{t: t, dir: t.TempDir()} }

func (v *volume) manifest() string { return filepath.Join(v.dir, "manifest.yaml") }

// publish generates a bundle of the given generation into a new snapshot and swaps it in.
func (v *volume) publish(gen uint64, edit func(dir string)) *devbundle.Result {
	v.t.Helper()
	return v.publishWith(devbundle.Options{Generation: gen}, edit)
}

// publishWith is publish with the generator's options.
func (v *volume) publishWith(opts devbundle.Options, edit func(dir string)) *devbundle.Result {
	v.t.Helper()
	v.n++
	snap := filepath.Join(v.dir, "..snapshot_"+strings.Repeat("x", v.n))
	res, err := devbundle.Generate(snap, opts)
	if err != nil {
		v.t.Fatal(err)
	}
	if edit != nil {
		edit(snap)
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	must(v.t, os.Symlink(filepath.Base(snap), tmp))
	must(v.t, os.Rename(tmp, filepath.Join(v.dir, "..data")))
	entries, err := os.ReadDir(snap)
	must(v.t, err)
	for _, e := range entries {
		link := filepath.Join(v.dir, e.Name())
		if _, err := os.Lstat(link); err != nil {
			must(v.t, os.Symlink(filepath.Join("..data", e.Name()), link))
		}
	}
	return res
}

// bump publishes a copy of the current snapshot with only the generation changed: a
// rotation that keeps every key and certificate (changing keys needs an overlap window,
// which CheckTransition enforces).
func (v *volume) bump(gen uint64) { v.bumpEdit(gen, nil) }

// bumpEdit is bump with an edit of the manifest text (a policy change).
func (v *volume) bumpEdit(gen uint64, edit func([]byte) []byte) {
	v.t.Helper()
	v.copyEdit(func(name string, data []byte) []byte {
		if name != "manifest.yaml" {
			return data
		}
		data = regexp.MustCompile(`(?m)^generation: \d+$`).ReplaceAll(data, []byte(fmt.Sprintf("generation: %d", gen)))
		if edit != nil {
			data = edit(data)
		}
		return data
	})
}

// renew publishes a copy of the current snapshot with only the server certificate and key
// replaced, as cert-manager rewrites tls.crt and tls.key in place: the manifest, and with it
// the generation, is unchanged.
func (v *volume) renew(certPEM, keyPEM []byte) {
	v.t.Helper()
	v.copyEdit(func(name string, data []byte) []byte {
		switch name {
		case devbundle.ServerCertFile:
			return certPEM
		case devbundle.ServerKeyFile:
			return keyPEM
		}
		return data
	})
}

// copyEdit publishes a copy of the current snapshot, each file passed through edit.
func (v *volume) copyEdit(edit func(name string, data []byte) []byte) {
	v.t.Helper()
	cur, err := filepath.EvalSymlinks(filepath.Join(v.dir, "..data"))
	must(v.t, err)
	v.n++
	snap := filepath.Join(v.dir, "..snapshot_"+strings.Repeat("x", v.n))
	must(v.t, os.Mkdir(snap, 0o700))
	entries, err := os.ReadDir(cur)
	must(v.t, err)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(cur, e.Name()))
		must(v.t, err)
		must(v.t, os.WriteFile(filepath.Join(snap, e.Name()), edit(e.Name(), data), 0o600))
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	must(v.t, os.Symlink(filepath.Base(snap), tmp))
	must(v.t, os.Rename(tmp, filepath.Join(v.dir, "..data")))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func setup(t *testing.T, markGen string, markDigest string) (kubernetes.Interface, string, context.Context) {
	t.Helper()
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	ctx := clustertest.Context(t, 2*time.Minute)
	if markGen != "" {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: markName},
			Data: map[string]string{highwater.KeyGeneration: markGen, highwater.KeyDigest: markDigest}}
		if _, err := c.Kube().CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return c.Kube(), ns, ctx
}

// manager runs a writer of the mark (as the controller does).
func manager(t *testing.T, kube kubernetes.Interface, ns, manifest string, now func() time.Time) (*security.Manager, context.CancelFunc) {
	t.Helper()
	return run(t, security.ManagerConfig{ManifestPath: manifest, Namespace: ns, HighWaterConfigMap: markName, Kube: kube,
		PollInterval: 50 * time.Millisecond, Now: now, RaiseMark: true})
}

// reader runs a reader of the mark (as a gateway does), logging into log.
func reader(t *testing.T, kube kubernetes.Interface, ns, manifest string, log io.Writer) *security.Manager {
	t.Helper()
	m, _ := run(t, security.ManagerConfig{ManifestPath: manifest, Namespace: ns, HighWaterConfigMap: markName, Kube: kube,
		PollInterval: 50 * time.Millisecond, Logger: hclog.New(&hclog.LoggerOptions{Output: log, Level: hclog.Debug})})
	return m
}

func run(t *testing.T, cfg security.ManagerConfig) (*security.Manager, context.CancelFunc) {
	t.Helper()
	m, err := security.NewManager(cfg)
	must(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	go m.Run(ctx)
	t.Cleanup(cancel)
	return m, cancel
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func markOf(t *testing.T, kube kubernetes.Interface, ns string) (string, string) {
	t.Helper()
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(t.Context(), markName, metav1.GetOptions{})
	must(t, err)
	return cm.Data[highwater.KeyGeneration], cm.Data[highwater.KeyDigest]
}

// Publish, then rotate by the ..data swap: the mark rises only after validation and the new
// bundle is served; a later rollback and a same-generation drift are refused while the last
// good bundle keeps serving.
func TestPublishRotateAndRefuseRollbackAndDrift(t *testing.T) {
	kube, ns, _ := setup(t, "0", "")
	vol := newVolume(t)
	vol.publish(3, nil)
	m, _ := manager(t, kube, ns, vol.manifest(), nil)
	eventually(t, "ready with generation 3", func() bool { b, ok := m.Current(); return ok && b.Generation() == 3 })
	if gen, _ := markOf(t, kube, ns); gen != "3" {
		t.Fatalf("mark %s after publishing generation 3", gen)
	}

	vol.bump(4)
	eventually(t, "rotated to generation 4", func() bool { b, ok := m.Current(); return ok && b.Generation() == 4 })
	gen, digest4 := markOf(t, kube, ns)
	if gen != "4" {
		t.Fatalf("mark %s after rotating to 4", gen)
	}

	vol.publish(2, nil) // rollback
	err := m.Reload(t.Context())
	if err == nil || !strings.Contains(err.Error(), "generation") {
		t.Fatalf("rollback accepted: %v", err)
	}
	if b, ok := m.Current(); !ok || b.Generation() != 4 {
		t.Fatal("a refused rollback withdrew the good bundle")
	}

	vol.publish(4, nil) // same generation, other content (fresh keys and certificates)
	if err := m.Reload(t.Context()); err == nil {
		t.Fatal("same-generation drift accepted")
	}
	if gen, d := markOf(t, kube, ns); gen != "4" || d != digest4 {
		t.Fatalf("a refusal moved the mark: %s %s", gen, d)
	}

	// A fresh replica that only sees the rolled-back material fails closed.
	vol.publish(2, nil)
	fresh, _ := manager(t, kube, ns, vol.manifest(), nil)
	// The fresh replica's own verdict, not a pause: while nothing is published CheckReady
	// reports its reload loop's last refusal, and that refusal is the mark's.
	eventually(t, "the fresh replica refuses the rolled-back material", func() bool {
		return errors.Is(fresh.CheckReady(), highwater.ErrRollback)
	})
	if fresh.Ready() || !errors.Is(fresh.CheckReady(), security.ErrUnavailable) {
		t.Fatal("a replica with rolled-back material is ready")
	}
}

// A torn bundle (a file changed under an unchanged manifest's pins) and an invalid bundle of a
// higher generation are refused without raising the mark.
func TestTornAndInvalidBundlesDoNotRaiseTheMark(t *testing.T) {
	kube, ns, _ := setup(t, "0", "")
	vol := newVolume(t)
	vol.publish(5, nil)
	m, _ := manager(t, kube, ns, vol.manifest(), nil)
	eventually(t, "ready", m.Ready)
	other := t.TempDir()
	newer, err := devbundle.Generate(other, devbundle.Options{Generation: 6})
	must(t, err)
	vol.publish(6, func(dir string) {
		// The new manifest with the previous generation's server certificate: pins mismatch.
		data, err := os.ReadFile(newer.ServerCert)
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, filepath.Base(newer.ServerCert)), append(data, '\n'), 0o600))
	})
	if err := m.Reload(t.Context()); !errors.Is(err, security.ErrInvalidBundle) {
		t.Fatalf("torn bundle: %v", err)
	}
	if gen, _ := markOf(t, kube, ns); gen != "5" {
		t.Fatalf("an invalid bundle raised the mark to %s", gen)
	}
	if b, ok := m.Current(); !ok || b.Generation() != 5 {
		t.Fatal("the good bundle was withdrawn")
	}
}

// The mark deleted or malformed: every replica fails closed until it is back.
func TestMarkDeletedFailsClosed(t *testing.T) {
	kube, ns, ctx := setup(t, "0", "")
	vol := newVolume(t)
	vol.publish(1, nil)
	m, _ := manager(t, kube, ns, vol.manifest(), nil)
	eventually(t, "ready", m.Ready)
	must(t, kube.CoreV1().ConfigMaps(ns).Delete(ctx, markName, metav1.DeleteOptions{}))
	eventually(t, "not ready after the mark was deleted", func() bool { return !m.Ready() })
	if err := m.CheckReady(); !errors.Is(err, security.ErrUnavailable) {
		t.Fatalf("CheckReady: %v", err)
	}
	// Restored (by the operator, at the accepted generation): ready again.
	accepted, err := security.LoadBundle(vol.manifest(), time.Now())
	must(t, err)
	digest := accepted.Digest()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: markName}, Data: map[string]string{highwater.KeyGeneration: "1", highwater.KeyDigest: digest}}
	_, err = kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	must(t, err)
	eventually(t, "ready once the mark is back", m.Ready)
}

func TestNoMarkAtAllFailsClosed(t *testing.T) {
	kube, ns, _ := setup(t, "", "")
	vol := newVolume(t)
	vol.publish(1, nil)
	m, _ := manager(t, kube, ns, vol.manifest(), nil)
	// Observed, not waited for: the manager's watch has listed no mark (CheckReady reports
	// it as not found rather than not yet observed)...
	eventually(t, "the absent mark observed", func() bool {
		err := m.CheckReady()
		return errors.Is(err, highwater.ErrUnavailable) && strings.Contains(err.Error(), "not found")
	})
	// ...and a reload after that, the one its loop runs on every poll while nothing is
	// published, refuses the material instead of counting the absent mark as zero.
	if err := m.Reload(t.Context()); !errors.Is(err, highwater.ErrUnavailable) {
		t.Fatalf("reload without a high-water mark: %v", err)
	}
	if m.Ready() {
		t.Fatal("ready without a high-water mark: an absent mark must never count as zero")
	}
}

// All material expired: not ready (the certificates of a dev bundle are valid for days).
func TestExpiredMaterialFailsClosed(t *testing.T) {
	kube, ns, _ := setup(t, "0", "")
	vol := newVolume(t)
	vol.publish(1, nil)
	var skew sync.Mutex
	offset := time.Duration(0)
	now := func() time.Time { skew.Lock(); defer skew.Unlock(); return time.Now().Add(offset) }
	m, _ := manager(t, kube, ns, vol.manifest(), now)
	eventually(t, "ready", m.Ready)
	skew.Lock()
	offset = 5 * 365 * 24 * time.Hour
	skew.Unlock()
	if m.Ready() {
		t.Fatal("ready with expired material")
	}
	if m.TLSConfig() == nil {
		t.Fatal("no TLS config")
	}
}

// Two replicas publishing the same new generation at once: both end ready on it.
func TestTwoManagersRaiseTogether(t *testing.T) {
	kube, ns, _ := setup(t, "0", "")
	vol := newVolume(t)
	vol.publish(7, nil)
	a, _ := manager(t, kube, ns, vol.manifest(), nil)
	b, _ := manager(t, kube, ns, vol.manifest(), nil)
	eventually(t, "both ready", func() bool { return a.Ready() && b.Ready() })
	if gen, _ := markOf(t, kube, ns); gen != "7" {
		t.Fatalf("mark %s", gen)
	}
}

// Rotation under steady load: a client handshaking continuously sees no failure while the
// material is rotated again and again, and a client removed from the policy by a rotation is
// refused from the next handshake on.
func TestRotationUnderSteadyLoad(t *testing.T) {
	kube, ns, _ := setup(t, "0", "")
	vol := newVolume(t)
	res := vol.publish(1, nil)
	m, _ := manager(t, kube, ns, vol.manifest(), nil)
	eventually(t, "ready", m.Ready)

	ln, err := tls.Listen("tcp", "127.0.0.1:0", m.TLSConfig())
	must(t, err)
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = conn.(*tls.Conn).Handshake()
				conn.Close()
			}()
		}
	}()
	caPEM, err := os.ReadFile(res.CACert)
	must(t, err)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	handshake := func(c devbundle.Client) error {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return err
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), &tls.Config{
			MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{cert},
		})
		if err != nil {
			return err
		}
		defer conn.Close()
		// TLS 1.3: the server's verdict on the client certificate arrives with the first read.
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		if errors.Is(err, io.EOF) {
			return nil // the server closed after a successful handshake
		}
		return err
	}

	stop := make(chan struct{})
	var failures, successes atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := handshake(res.Caller); err != nil {
				failures.Add(1)
				t.Logf("caller handshake failed during rotation: %v", err)
			} else {
				successes.Add(1)
			}
		}
	}()
	// handshakesGoOn waits until two more handshakes have succeeded: the loop handshakes one
	// at a time, so the second began after this call, on the generation just published.
	handshakesGoOn := func(what string) {
		t.Helper()
		want := successes.Load() + 2
		eventually(t, "handshakes succeed on "+what, func() bool { return successes.Load() >= want })
	}
	for gen := uint64(2); gen <= 6; gen++ {
		vol.bump(gen)
		eventually(t, fmt.Sprintf("generation %d published", gen), func() bool { b, ok := m.Current(); return ok && b.Generation() == gen })
		handshakesGoOn(fmt.Sprintf("generation %d", gen))
	}
	if err := handshake(res.Administrator); err != nil {
		t.Fatalf("administrator refused before its removal: %v", err)
	}
	vol.bumpEdit(7, func(manifest []byte) []byte {
		return []byte(strings.Replace(string(manifest), "  - uri: \""+res.Administrator.Identity+"\"\n    administrator: true\n", "", 1))
	})
	eventually(t, "generation 7 published", func() bool { b, ok := m.Current(); return ok && b.Generation() == 7 })
	handshakesGoOn("generation 7")
	close(stop)
	wg.Wait()
	if failures.Load() != 0 || successes.Load() < 10 {
		t.Fatalf("%d handshake failures, %d successes for a client valid throughout", failures.Load(), successes.Load())
	}
	if err := handshake(res.Administrator); err == nil {
		t.Fatal("a client removed from the policy still completes handshakes")
	}
	t.Logf("%d handshakes across 6 rotations, none failed", successes.Load())
}

// Rotation rules across restarts: a running replica refuses a bundle whose new key signs at
// once (no verify-only overlap); a replica started afresh on that same material, which never
// held the earlier bundle, refuses it too — the mark records the accepted key set — and the
// mark is left as it was.
func TestRestartedReplicaRefusesWhatARunningOneRefuses(t *testing.T) {
	kube, ns, _ := setup(t, "0", "")
	vol := newVolume(t)
	vol.publish(3, nil)
	running, _ := manager(t, kube, ns, vol.manifest(), nil)
	eventually(t, "ready with generation 3", func() bool { b, ok := running.Current(); return ok && b.Generation() == 3 })
	_, digest3 := markOf(t, kube, ns)

	vol.publish(4, nil) // fresh keys and certificates: the new grant key signs at once
	if err := running.Reload(t.Context()); !errors.Is(err, security.ErrUnsafeTransition) {
		t.Fatalf("the running replica: %v", err)
	}
	restarted, _ := manager(t, kube, ns, vol.manifest(), nil)
	eventually(t, "the restarted replica refuses the rotation", func() bool {
		return errors.Is(restarted.CheckReady(), highwater.ErrUnsafeRotation)
	})
	if restarted.Ready() {
		t.Fatal("the restarted replica serves a bundle the running one refused")
	}
	if gen, digest := markOf(t, kube, ns); gen != "3" || digest != digest3 {
		t.Fatalf("the refusals moved the mark to %s %s", gen, digest)
	}
	if b, ok := running.Current(); !ok || b.Generation() != 3 {
		t.Fatal("the running replica withdrew its good bundle")
	}
}

// Only writers raise the mark: a reader (a gateway) with newer material waits, not ready and
// without writing, until a writer (the controller) accepted it; afterwards it follows every
// generation the writer accepts, and while no writer runs it keeps serving the last accepted
// bundle rather than the newer one it cannot have checked against the mark.
func TestReadersPublishOnlyWhatAWriterAccepted(t *testing.T) {
	kube, ns, _ := setup(t, "0", "")
	vol := newVolume(t)
	vol.publish(5, nil)
	var log clustertest.SyncBuffer
	r := reader(t, kube, ns, vol.manifest(), &log)
	eventually(t, "the reader waits for the mark", func() bool { return errors.Is(r.CheckReady(), highwater.ErrPending) })
	if gen, _ := markOf(t, kube, ns); gen != "0" || r.Ready() {
		t.Fatalf("a reader raised the mark to %s (ready %v)", gen, r.Ready())
	}
	// Waiting is not re-judged on every poll: only when the mark moves. Twenty polls pass
	// (each logs "not published" at debug level) with at most one judgement among them.
	polls := func() int { return strings.Count(log.String(), "security material not published") }
	before, judged := polls(), strings.Count(log.String(), "security material refused")
	eventually(t, "twenty polls of the waiting reader", func() bool { return polls() >= before+20 })
	if again := strings.Count(log.String(), "security material refused") - judged; again > 1 {
		t.Fatalf("a waiting reader re-judged its material %d times in 20 polls without the mark moving", again)
	}
	_, stopWriter := manager(t, kube, ns, vol.manifest(), nil)
	eventually(t, "the reader publishes generation 5", func() bool { b, ok := r.Current(); return ok && b.Generation() == 5 })
	vol.bump(6)
	eventually(t, "the reader follows to generation 6", func() bool { b, ok := r.Current(); return ok && b.Generation() == 6 })

	stopWriter()
	vol.bump(7)
	eventually(t, "the reader sees generation 7 and waits", func() bool { return errors.Is(r.Reload(t.Context()), highwater.ErrPending) })
	if b, ok := r.Current(); !ok || b.Generation() != 6 {
		t.Fatalf("without a writer the reader left the accepted generation 6: %v %v", b, ok)
	}
	if gen, _ := markOf(t, kube, ns); gen != "6" {
		t.Fatalf("mark %s", gen)
	}
}

// A writer whose raise fails for a passing reason (the mark unreachable) retries at the next
// poll, without a new manifest: gateways only read the mark, so a raise given up once would
// leave every one of them on the old bundle.
func TestWriterRetriesARaiseThatFailedTransiently(t *testing.T) {
	kube, ns, ctx := setup(t, "0", "")
	vol := newVolume(t)
	vol.publish(1, nil)
	m, _ := manager(t, kube, ns, vol.manifest(), nil)
	eventually(t, "ready with generation 1", func() bool { b, ok := m.Current(); return ok && b.Generation() == 1 })
	_, digest1 := markOf(t, kube, ns)
	must(t, kube.CoreV1().ConfigMaps(ns).Delete(ctx, markName, metav1.DeleteOptions{}))
	eventually(t, "the deletion observed", func() bool { return !m.Ready() })
	vol.bump(2)
	// The raise to 2 fails: there is no mark. (An explicit reload, so the failure is seen;
	// the background loop must then retry on its own — the manifest does not change again.)
	if err := m.Reload(ctx); !errors.Is(err, highwater.ErrUnavailable) {
		t.Fatalf("raise without a mark: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: markName}, Data: map[string]string{highwater.KeyGeneration: "1", highwater.KeyDigest: digest1}}
	_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	must(t, err)
	eventually(t, "generation 2 raised and published once the mark is back", func() bool {
		b, ok := m.Current()
		gen, _ := markOf(t, kube, ns)
		return ok && b.Generation() == 2 && gen == "2"
	})
}

// A server certificate renewed in place (cert-manager: same CA and names, a later notBefore,
// a new key, no new generation) is served by a writer and a reader once the writer recorded
// it in the real mark; the older certificate written back afterwards is refused by both and
// by a replica restarted on it, the newer one keeps serving, and the mark is left as it was.
// Without a cluster, TestManagerRenewalInPlace (internal/security) runs the same rules with
// handshakes across the old certificate's expiry.
func TestRenewalInPlaceAgainstTheRealMark(t *testing.T) {
	kube, ns, _ := setup(t, "0", "")
	vol := newVolume(t)
	res := vol.publishWith(devbundle.Options{Generation: 2, RenewableServer: true, ServerValidity: time.Hour}, nil)
	writer, _ := manager(t, kube, ns, vol.manifest(), nil)
	gateway := reader(t, kube, ns, vol.manifest(), io.Discard)
	serving := func(m *security.Manager, certPEM []byte) bool {
		b, ok := m.Current()
		return ok && b.Generation() == 2 && bytesEqualLeaf(b, certPEM)
	}
	first, err := os.ReadFile(res.ServerCert)
	must(t, err)
	eventually(t, "both serve the first certificate", func() bool { return serving(writer, first) && serving(gateway, first) })

	renewedCert, renewedKey, err := res.IssueServer(time.Now(), time.Now().Add(time.Hour))
	must(t, err)
	vol.renew(renewedCert, renewedKey)
	eventually(t, "both serve the renewed certificate", func() bool { return serving(writer, renewedCert) && serving(gateway, renewedCert) })
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(t.Context(), markName, metav1.GetOptions{})
	must(t, err)
	recorded := cm.Data[highwater.KeyServerLeaf]
	if gen := cm.Data[highwater.KeyGeneration]; gen != "2" || recorded == "" {
		t.Fatalf("mark after the renewal: %v", cm.Data)
	}

	firstKey, err := os.ReadFile(res.ServerKey)
	must(t, err)
	vol.renew(first, firstKey) // the older certificate written back
	for _, m := range []*security.Manager{writer, gateway} {
		if err := m.Reload(t.Context()); !errors.Is(err, security.ErrUnsafeTransition) {
			t.Fatalf("the older certificate written back: %v", err)
		}
		if !serving(m, renewedCert) {
			t.Fatal("a refused rollback withdrew the renewed certificate")
		}
	}
	restarted, _ := manager(t, kube, ns, vol.manifest(), nil)
	eventually(t, "a replica restarted on the older certificate refuses it", func() bool {
		return errors.Is(restarted.CheckReady(), highwater.ErrRollback)
	})
	cm, err = kube.CoreV1().ConfigMaps(ns).Get(t.Context(), markName, metav1.GetOptions{})
	must(t, err)
	if cm.Data[highwater.KeyServerLeaf] != recorded || cm.Data[highwater.KeyGeneration] != "2" {
		t.Fatalf("the refusals moved the mark: %v", cm.Data)
	}
}

// bytesEqualLeaf reports whether b serves the first certificate of certPEM.
func bytesEqualLeaf(b *security.Bundle, certPEM []byte) bool {
	block, _ := pem.Decode(certPEM)
	return block != nil && bytes.Equal(b.ServerCertificate().Leaf.Raw, block.Bytes)
}
