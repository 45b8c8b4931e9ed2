package highwater

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m, clustertest.Options{})) }

func digestOf(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

func TestCheck(t *testing.T) {
	m := Mark{Generation: 5, Digest: digestOf('a')}
	cases := []struct {
		gen     uint64
		digest  string
		raise   bool
		wantErr error
	}{
		{4, digestOf('a'), false, ErrRollback},
		{5, digestOf('b'), false, ErrDrift},
		{5, digestOf('a'), false, nil},
		{6, digestOf('c'), true, nil},
	}
	for _, tc := range cases {
		raise, err := Check(m, tc.gen, tc.digest)
		if raise != tc.raise || !errors.Is(err, tc.wantErr) {
			t.Errorf("Check(%d, %s) = %v, %v", tc.gen, tc.digest[:9], raise, err)
		}
	}
}

func setup(t *testing.T, data map[string]string) (*Store, context.Context) {
	t.Helper()
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	ctx := clustertest.Context(t, time.Minute)
	if data != nil {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mark"}, Data: data}
		if _, err := c.Kube().CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s := New(c.Kube(), ns, "mark")
	go s.Run(ctx)
	return s, ctx
}

func waitFor(t *testing.T, s *Store, cond func(Mark, error) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		changed := s.Changed()
		if cond(s.Current()) {
			return
		}
		select {
		case <-changed:
		case <-time.After(100 * time.Millisecond):
		}
	}
	m, err := s.Current()
	t.Fatalf("condition not reached: mark %+v, err %v", m, err)
}

func TestAcceptRaisesAndRefusesRollbackAndDrift(t *testing.T) {
	s, ctx := setup(t, map[string]string{KeyGeneration: "0", KeyDigest: ""})
	waitFor(t, s, func(m Mark, err error) bool { return err == nil })
	if err := s.Accept(ctx, 3, digestOf('a')); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, func(m Mark, err error) bool { return err == nil && m.Generation == 3 && m.Digest == digestOf('a') })
	if err := s.Accept(ctx, 3, digestOf('a')); err != nil {
		t.Fatalf("re-accepting the current bundle: %v", err)
	}
	if err := s.Accept(ctx, 2, digestOf('f')); !errors.Is(err, ErrRollback) {
		t.Fatalf("rollback: %v", err)
	}
	if err := s.Accept(ctx, 3, digestOf('b')); !errors.Is(err, ErrDrift) {
		t.Fatalf("drift: %v", err)
	}
	if m, _ := s.Current(); m.Generation != 3 || m.Digest != digestOf('a') {
		t.Fatalf("a refusal changed the mark: %+v", m)
	}
}

// Two managers raising the mark at once: with the same bundle both succeed; with two
// different bundles of one generation exactly one wins and the other sees drift.
func TestConcurrentRaises(t *testing.T) {
	s, ctx := setup(t, map[string]string{KeyGeneration: "1", KeyDigest: digestOf('0')})
	other := New(s.kube, s.namespace, s.name)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, st := range []*Store{s, other} {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = st.Accept(ctx, 2, digestOf('a')) }()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("same bundle raised twice: %v", errs)
	}
	for i, d := range []byte{'b', 'c'} {
		wg.Add(1)
		st := []*Store{s, other}[i]
		go func() { defer wg.Done(); errs[i] = st.Accept(ctx, 3, digestOf(d)) }()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, ErrDrift):
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d winners for one generation: %v", wins, errs)
	}
}

func TestAbsentOrDeletedOrMalformedMarkFailsClosed(t *testing.T) {
	s, ctx := setup(t, nil)
	waitFor(t, s, func(_ Mark, err error) bool {
		return errors.Is(err, ErrUnavailable) && strings.Contains(err.Error(), "not found")
	})
	if err := s.Accept(ctx, 1, digestOf('a')); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("accept without a mark: %v", err)
	}

	s2, ctx2 := setup(t, map[string]string{KeyGeneration: "4", KeyDigest: digestOf('a')})
	waitFor(t, s2, func(m Mark, err error) bool { return err == nil && m.Generation == 4 })
	if err := s2.kube.CoreV1().ConfigMaps(s2.namespace).Delete(ctx2, s2.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s2, func(_ Mark, err error) bool { return errors.Is(err, ErrUnavailable) })

	s3, ctx3 := setup(t, map[string]string{KeyGeneration: "seven", KeyDigest: digestOf('a')})
	waitFor(t, s3, func(_ Mark, err error) bool {
		return errors.Is(err, ErrUnavailable) && strings.Contains(err.Error(), "malformed")
	})
	if err := s3.Accept(ctx3, 9, digestOf('a')); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("accept over a malformed mark: %v", err)
	}
}
