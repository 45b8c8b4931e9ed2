package security

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/security/highwater"
)

// What the managers decide about material they refuse or wait for, and how they get past it,
// without a cluster (the mark in fakeMarkClient, the clock injected): two certificates of
// one second, a reader waiting for the mark, refused material judged again.

// renewalStage is a generated bundle whose server certificate is renewable, laid out in a
// projected volume, the mark in a fake clientset and the managers' injected clock.
type renewalStage struct {
	t     *testing.T
	res   *devbundle.Result
	files map[string][]byte // as generated
	vol   *projectedVolume
	kube  *fake.Clientset
	clock *testClock
}

// stagePollInterval is the managers' poll period here: short, so that twenty polls pass in
// well under a second.
const stagePollInterval = 20 * time.Millisecond

func newRenewalStage(t *testing.T, now time.Time) *renewalStage {
	t.Helper()
	src := filepath.Join(t.TempDir(), "bundle")
	res, err := devbundle.Generate(src, devbundle.Options{RenewableServer: true, ServerValidity: leafLifetime, Now: now})
	must(t, err)
	files := map[string][]byte{}
	for _, name := range []string{devbundle.ManifestFile, devbundle.CACertFile, devbundle.ServerIssuerFile,
		devbundle.ServerCertFile, devbundle.ServerKeyFile, devbundle.GrantPublicFile, devbundle.GrantKeyFile, devbundle.RecordKeyFile} {
		files[name], err = os.ReadFile(filepath.Join(src, name))
		must(t, err)
	}
	return &renewalStage{t: t, res: res, files: files, vol: &projectedVolume{t: t, dir: t.TempDir()},
		kube: fakeMarkClient(t), clock: &testClock{now: now}}
}

var generationLine = regexp.MustCompile(`(?m)^generation: \d+$`)

// write swaps in a snapshot of the bundle at generation gen (only the manifest's generation
// line changed: the same keys, pins and policy) with the server pair p, each file then
// passed through edit when it is not nil.
func (s *renewalStage) write(gen uint64, p serverPair, edit func(name string, data []byte) []byte) {
	s.t.Helper()
	files := maps.Clone(s.files)
	files[devbundle.ManifestFile] = generationLine.ReplaceAll(files[devbundle.ManifestFile], fmt.Appendf(nil, "generation: %d", gen))
	files[devbundle.ServerCertFile], files[devbundle.ServerKeyFile] = p.cert, p.key
	if edit != nil {
		for name, data := range files {
			files[name] = edit(name, data)
		}
	}
	s.vol.write(files)
}

// current is the server pair the volume holds now.
func (s *renewalStage) current() serverPair {
	s.t.Helper()
	cert, err := os.ReadFile(filepath.Join(s.vol.dir, devbundle.ServerCertFile))
	must(s.t, err)
	key, err := os.ReadFile(filepath.Join(s.vol.dir, devbundle.ServerKeyFile))
	must(s.t, err)
	pair, err := tls.X509KeyPair(cert, key)
	must(s.t, err)
	return serverPair{cert: cert, key: key, leaf: pair.Leaf}
}

// start runs a manager, a writer of the mark (the controller) when raise, else a reader (a
// gateway), logging at debug level into log (nil: nowhere). The returned function stops it;
// so does the test's end.
func (s *renewalStage) start(raise bool, log io.Writer) (*Manager, func()) {
	s.t.Helper()
	logger := hclog.NewNullLogger()
	if log != nil {
		logger = hclog.New(&hclog.LoggerOptions{Output: log, Level: hclog.Debug})
	}
	m, err := NewManager(ManagerConfig{ManifestPath: s.vol.manifest(), Namespace: renewalNamespace, HighWaterConfigMap: renewalMark,
		Kube: s.kube, RaiseMark: raise, PollInterval: stagePollInterval, Now: s.clock.Now, Logger: logger})
	must(s.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { m.Run(ctx) })
	stop := func() { cancel(); wg.Wait() }
	s.t.Cleanup(stop)
	return m, stop
}

// presented is the certificate a TLS server at addr presents to the bundle's caller, verified
// at the stage's clock.
func (s *renewalStage) presented(addr string) *x509.Certificate {
	s.t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(loadCA(s.t, s.res.CACert, s.res.CAKey).Certificate)
	client, err := tls.LoadX509KeyPair(s.res.Caller.CertFile, s.res.Caller.KeyFile)
	must(s.t, err)
	now := s.clock.Now()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: handshakeTimeout}, "tcp", addr, &tls.Config{
		MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "localhost", Certificates: []tls.Certificate{client},
		Time: func() time.Time { return now },
	})
	must(s.t, err)
	defer conn.Close()
	// TLS 1.3: the server's verdict on the client certificate arrives with the first read.
	must(s.t, conn.SetReadDeadline(time.Now().Add(handshakeTimeout)))
	_, err = io.ReadFull(conn, make([]byte, 1))
	must(s.t, err)
	return conn.ConnectionState().PeerCertificates[0]
}

// serves reports whether m may serve now, at generation gen, with p's certificate.
func serves(m *Manager, gen uint64, p serverPair) bool {
	b, ok := m.Current()
	return ok && b.Generation() == gen && bytes.Equal(b.ServerCertificate().Leaf.Raw, p.leaf.Raw)
}

// TestManagerSameSecondReissue: two certificates issued in the same second (cert-manager
// issuing twice within one, `cmctl renew` run twice) can be ordered neither way by their
// notBefore. The first is recorded; the second is refused by a running writer and reader,
// which keep serving the first, and a replica restarted on it stays not ready — every
// refusal saying what happened and what to do. Raising the manifest generation is the
// operator's way out: the writer records the second certificate at the new generation, and
// every replica, the restarted ones included, serves it. The first written back at that
// generation is refused in turn, and an earlier certificate stays a rollback at any
// generation.
func TestManagerSameSecondReissue(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	st := newRenewalStage(t, t0)
	first := issuePair(t, st.res, t0, t0.Add(leafLifetime))
	second := issuePair(t, st.res, first.leaf.NotBefore, first.leaf.NotAfter)
	st.write(1, first, nil)
	writer, _ := st.start(true, nil)
	reader, _ := st.start(false, nil)
	eventually(t, "both serve the first certificate", func() bool { return serves(writer, 1, first) && serves(reader, 1, first) })
	markLeaf(t, st.kube, 1, first)

	st.write(1, second, nil)
	const what = "so it is neither newer nor older; renew the certificate again (a later notBefore), " +
		"or raise the manifest generation above 1 to accept this one"
	for _, m := range []*Manager{writer, reader} {
		if err := m.Reload(t.Context()); !errors.Is(err, ErrUnsafeTransition) || !strings.Contains(err.Error(), what) {
			t.Fatalf("another certificate of the same second: %v; want a refusal saying %q", err, what)
		}
		if !serves(m, 1, first) {
			t.Fatal("the refusal withdrew the first certificate")
		}
	}
	var restarted []*Manager
	for _, raise := range []bool{true, false} {
		m, _ := st.start(raise, nil)
		eventually(t, "a replica restarted on the second certificate says why it is not ready", func() bool {
			err := m.CheckReady()
			return errors.Is(err, highwater.ErrDrift) && strings.Contains(err.Error(), what)
		})
		restarted = append(restarted, m)
	}
	markLeaf(t, st.kube, 1, first)

	// The operator raises the generation: the deliberate choice of the second certificate.
	st.write(2, second, nil)
	everyone := append([]*Manager{writer, reader}, restarted...)
	eventually(t, "every replica serves the second certificate at generation 2", func() bool {
		for _, m := range everyone {
			if !serves(m, 2, second) {
				return false
			}
		}
		return true
	})
	markLeaf(t, st.kube, 2, second)

	// The first written back at generation 2: the same second again, refused in turn.
	st.write(2, first, nil)
	for _, m := range everyone {
		if err := m.Reload(t.Context()); !errors.Is(err, ErrUnsafeTransition) || !strings.Contains(err.Error(), "raise the manifest generation above 2") {
			t.Fatalf("the first certificate written back at generation 2: %v", err)
		}
	}
	// An earlier certificate is a rollback whatever the generation, for a running replica and
	// for one that starts on it.
	earlier := issuePair(t, st.res, first.leaf.NotBefore.Add(-time.Second), first.leaf.NotAfter)
	st.write(3, earlier, nil)
	for _, m := range everyone {
		if err := m.Reload(t.Context()); !errors.Is(err, ErrUnsafeTransition) || !strings.Contains(err.Error(), "rollback") {
			t.Fatalf("an earlier certificate at generation 3: %v", err)
		}
		if !serves(m, 2, second) {
			t.Fatal("a refused rollback withdrew the second certificate")
		}
	}
	fresh, _ := st.start(true, nil)
	eventually(t, "a writer started on the earlier certificate refuses it", func() bool {
		return errors.Is(fresh.CheckReady(), highwater.ErrRollback)
	})
	markLeaf(t, st.kube, 2, second)
}

// TestManagerReaderServesTheOldCertificateWhilePending: a reader (a gateway) publishes a
// renewed certificate only once a writer recorded it in the mark. While no writer runs, the
// reader judges the renewal pending and keeps presenting the old certificate, ready; once a
// writer records the renewal, the reader switches by itself — the mark's watch wakes it, no
// file changes and no reload is asked for.
func TestManagerReaderServesTheOldCertificateWhilePending(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	st := newRenewalStage(t, t0)
	old := issuePair(t, st.res, t0, t0.Add(leafLifetime))
	st.write(1, old, nil)
	writer, stopWriter := st.start(true, nil)
	reader, _ := st.start(false, nil)
	eventually(t, "both serve the first certificate", func() bool { return serves(writer, 1, old) && serves(reader, 1, old) })
	addr := serveTLS(t, reader.TLSConfig())
	stopWriter()

	st.clock.Set(t0.Add(leafLifetime * 2 / 3))
	renewed := issuePair(t, st.res, st.clock.Now(), st.clock.Now().Add(leafLifetime))
	st.write(1, renewed, nil)
	if err := reader.Reload(t.Context()); !errors.Is(err, highwater.ErrPending) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a renewal no writer recorded: %v; want it pending", err)
	}
	if err := reader.CheckReady(); err != nil {
		t.Fatalf("not ready while the renewal is pending: %v", err)
	}
	if !serves(reader, 1, old) || !bytes.Equal(st.presented(addr).Raw, old.leaf.Raw) {
		t.Fatal("the reader does not present the old certificate while the renewal is pending")
	}
	markLeaf(t, st.kube, 1, old)

	st.start(true, nil) // a writer again: it records the renewal
	eventually(t, "the reader switches to the renewed certificate", func() bool { return serves(reader, 1, renewed) })
	if got := st.presented(addr); !bytes.Equal(got.Raw, renewed.leaf.Raw) {
		t.Fatalf("the reader presents %s, not the renewed certificate", FileDigest(got.Raw))
	}
	markLeaf(t, st.kube, 1, renewed)
}

// TestManagerRetriesRefusedMaterial: refused material that does not change is judged again
// every RefusedRetryInterval (by the injected clock), because some refusals pass without a
// change the poll sees — the poll compares the manifest and the renewable certificate and
// key, nothing else. Until the retry is due, polls go by without judging it again and the
// previous bundle serves; once due, the writer records it and the reader follows. (A torn
// server pair fixed by the next snapshot is a change the poll sees, accepted at once:
// TestManagerRenewalInPlace.)
func TestManagerRetriesRefusedMaterial(t *testing.T) {
	tests := []struct {
		name string
		// refuse writes the refused material at now; fix, when set, puts right what the poll
		// does not compare; elapse is how long the refusal needs to pass, under the retry.
		refuse  func(st *renewalStage, now time.Time) (served serverPair, gen uint64)
		fix     func(st *renewalStage)
		elapse  time.Duration
		refusal string
	}{
		{
			name: "a renewal not valid yet: its issuer's clock runs ahead, and there is no allowance",
			refuse: func(st *renewalStage, now time.Time) (serverPair, uint64) {
				ahead := issuePair(st.t, st.res, now.Add(10*time.Second), now.Add(leafLifetime))
				st.write(1, ahead, nil)
				return ahead, 1
			},
			elapse:  11 * time.Second,
			refusal: "serverCertificate.certFile: the leaf is not valid now",
		},
		{
			name: "a new generation whose client CA bundle does not match its pin, then fixed under the same manifest",
			refuse: func(st *renewalStage, now time.Time) (serverPair, uint64) {
				cur := st.current()
				st.write(2, cur, func(name string, data []byte) []byte {
					if name == devbundle.CACertFile {
						return append(bytes.Clone(data), '\n')
					}
					return data
				})
				return cur, 2
			},
			fix:     func(st *renewalStage) { st.write(2, st.current(), nil) },
			refusal: "clientCABundle: content does not match its pin",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.elapse >= RefusedRetryInterval {
				t.Fatalf("test bug: the refusal passes after %s, not before the retry (%s)", tt.elapse, RefusedRetryInterval)
			}
			t0 := time.Now().Truncate(time.Second)
			st := newRenewalStage(t, t0)
			st.clock.Set(t0.Add(time.Minute))
			old := issuePair(t, st.res, t0, t0.Add(leafLifetime))
			st.write(1, old, nil)
			var writerLog, readerLog clustertest.SyncBuffer
			writer, _ := st.start(true, &writerLog)
			reader, _ := st.start(false, &readerLog)
			eventually(t, "both serve the first certificate", func() bool { return serves(writer, 1, old) && serves(reader, 1, old) })

			refusedAt := st.clock.Now()
			served, gen := tt.refuse(st, refusedAt)
			for _, m := range []*Manager{writer, reader} {
				if err := m.Reload(t.Context()); !errors.Is(err, ErrInvalidBundle) || !strings.Contains(err.Error(), tt.refusal) {
					t.Fatalf("Reload = %v; want a refusal containing %q", err, tt.refusal)
				}
			}
			if tt.fix != nil {
				tt.fix(st)
			}
			st.clock.Set(refusedAt.Add(tt.elapse))
			// Not due yet: twenty polls of each manager pass, none judging the material again
			// (which would refuse it again, or accept it).
			for i, log := range []*clustertest.SyncBuffer{&writerLog, &readerLog} {
				m := []*Manager{writer, reader}[i]
				count := func(s string) int { return strings.Count(log.String(), s) }
				polls, judged := count("security material not published"), count("security material refused")
				judgedAgain := func() bool { return count("security material refused") > judged || !serves(m, 1, old) }
				eventually(t, "twenty polls", func() bool { return count("security material not published") >= polls+20 || judgedAgain() })
				if judgedAgain() {
					t.Fatalf("the %s judged the refused material again before the retry was due", []string{"writer", "reader"}[i])
				}
			}
			markLeaf(t, st.kube, 1, old)

			st.clock.Set(refusedAt.Add(RefusedRetryInterval))
			eventually(t, "the material accepted once the retry is due", func() bool {
				return serves(writer, gen, served) && serves(reader, gen, served)
			})
			markLeaf(t, st.kube, gen, served)
		})
	}
}
