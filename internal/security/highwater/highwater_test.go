package highwater

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/grant"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m, clustertest.Options{})) }

func digestOf(c byte) string { return "sha256:" + strings.Repeat(string(c), 64) }

// t0 is the tests' clock.
var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// key is a grant key of the given state, published at from (and, retired, verifying until
// until).
func key(t *testing.T, id string, state grant.KeyState, from, until time.Time) grant.Key {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return grant.Key{ID: id, Public: pub, State: state, VerifyFrom: from, VerifyUntil: until}
}

func keySet(t *testing.T, keys ...grant.Key) *grant.KeySet {
	t.Helper()
	set, err := grant.NewKeySet(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// as returns k in another state (and window): the same key, later in its rotation.
func as(k grant.Key, state grant.KeyState, until time.Time) grant.Key {
	k.State, k.VerifyUntil = state, until
	return k
}

func TestCheck(t *testing.T) {
	a := key(t, "a", grant.KeySigning, t0.Add(-time.Hour), time.Time{})
	b := key(t, "b", grant.KeyVerifyOnly, t0.Add(-time.Hour), time.Time{})
	fresh := key(t, "c", grant.KeySigning, t0, time.Time{})
	m := Mark{Generation: 5, Digest: digestOf('a'), Keys: keySet(t, a)}
	retired := t0.Add(grant.RetirementDelay)
	cases := []struct {
		name    string
		mark    Mark
		offer   Offer
		write   bool
		wantErr error
	}{
		{"rollback", m, Offer{Generation: 4, Digest: digestOf('a'), Keys: keySet(t, a)}, false, ErrRollback},
		{"drift", m, Offer{Generation: 5, Digest: digestOf('b'), Keys: keySet(t, a)}, false, ErrDrift},
		{"the same bundle", m, Offer{Generation: 5, Digest: digestOf('a'), Keys: keySet(t, a)}, false, nil},
		{"newer, same keys", m, Offer{Generation: 6, Digest: digestOf('c'), Keys: keySet(t, a)}, true, nil},
		{"newer, a key published verify-only", m, Offer{Generation: 6, Digest: digestOf('c'), Keys: keySet(t, a, b)}, true, nil},
		{"newer, a new key signs at once", m, Offer{Generation: 6, Digest: digestOf('c'), Keys: keySet(t, as(a, grant.KeyRetired, retired), fresh)}, false, ErrUnsafeRotation},
		{"newer, the signing key dropped", m, Offer{Generation: 6, Digest: digestOf('c'), Keys: keySet(t, as(b, grant.KeySigning, time.Time{}))}, false, ErrUnsafeRotation},
		{"a published key switches in", Mark{Generation: 5, Digest: digestOf('a'), Keys: keySet(t, a, b)},
			Offer{Generation: 6, Digest: digestOf('c'), Keys: keySet(t, as(a, grant.KeyRetired, retired), as(b, grant.KeySigning, time.Time{}))}, true, nil},
		{"a first bundle: any valid set", Mark{}, Offer{Generation: 1, Digest: digestOf('c'), Keys: keySet(t, fresh)}, true, nil},
		{"a mark without keys records them", Mark{Generation: 5, Digest: digestOf('a')}, Offer{Generation: 5, Digest: digestOf('a'), Keys: keySet(t, a)}, true, nil},
	}
	for _, tc := range cases {
		write, err := Check(tc.mark, tc.offer, t0)
		if write != tc.write || !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: Check = %v, %v; want %v, %v", tc.name, write, err, tc.write, tc.wantErr)
		}
	}
}

// The recorded key set decodes to the set that was encoded, and a malformed one is refused.
func TestKeysRoundTrip(t *testing.T) {
	set := keySet(t, key(t, "a", grant.KeySigning, t0, time.Time{}), key(t, "b", grant.KeyRetired, t0.Add(-48*time.Hour), t0.Add(time.Hour)))
	enc, err := encodeKeys(set)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeKeys(enc)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(set.Keys(), got.Keys()); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"{", "[]", `[{"id":"a","public":"!","state":"signing","verifyFrom":"2026-11-01T00:00:00Z"}]`,
		enc + " []", enc + "]", enc + "}", strings.Replace(enc, `"state"`, `"other":1,"state"`, 1)} {
		if _, err := decodeKeys(bad); err == nil {
			t.Errorf("decoded %q", bad)
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
	keys := keySet(t, key(t, "a", grant.KeySigning, t0.Add(-time.Hour), time.Time{}))
	if err := s.Accept(ctx, Offer{Generation: 3, Digest: digestOf('a'), Keys: keys}, t0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, func(m Mark, err error) bool {
		return err == nil && m.Generation == 3 && m.Digest == digestOf('a') && m.Keys != nil
	})
	if err := s.Accept(ctx, Offer{Generation: 3, Digest: digestOf('a'), Keys: keys}, t0); err != nil {
		t.Fatalf("re-accepting the current bundle: %v", err)
	}
	if err := s.Accept(ctx, Offer{Generation: 2, Digest: digestOf('f'), Keys: keys}, t0); !errors.Is(err, ErrRollback) {
		t.Fatalf("rollback: %v", err)
	}
	if err := s.Accept(ctx, Offer{Generation: 3, Digest: digestOf('b'), Keys: keys}, t0); !errors.Is(err, ErrDrift) {
		t.Fatalf("drift: %v", err)
	}
	if m, _ := s.Current(); m.Generation != 3 || m.Digest != digestOf('a') {
		t.Fatalf("a refusal changed the mark: %+v", m)
	}
}

// The rotation rules hold against the recorded key set, not against a replica's memory: a
// Store that never saw the earlier bundles (a restarted replica) refuses a key set that may
// not follow the recorded one, and the mark is left as it was.
func TestAcceptChecksRotationAgainstTheRecordedKeys(t *testing.T) {
	s, ctx := setup(t, map[string]string{KeyGeneration: "0", KeyDigest: ""})
	waitFor(t, s, func(m Mark, err error) bool { return err == nil })
	a := key(t, "a", grant.KeySigning, t0.Add(-time.Hour), time.Time{})
	if err := s.Accept(ctx, Offer{Generation: 1, Digest: digestOf('a'), Keys: keySet(t, a)}, t0); err != nil {
		t.Fatal(err)
	}
	restarted := New(s.kube, s.namespace, s.name)
	unsafe := keySet(t, as(a, grant.KeyRetired, t0.Add(grant.RetirementDelay)), key(t, "b", grant.KeySigning, t0, time.Time{}))
	if err := restarted.Accept(ctx, Offer{Generation: 2, Digest: digestOf('b'), Keys: unsafe}, t0); !errors.Is(err, ErrUnsafeRotation) {
		t.Fatalf("a new key signing at once, offered to a fresh Store: %v", err)
	}
	cm, err := s.kube.CoreV1().ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[KeyGeneration] != "1" || cm.Data[KeyDigest] != digestOf('a') {
		t.Fatalf("the refusal moved the mark: %v", cm.Data)
	}
	published := keySet(t, a, key(t, "b", grant.KeyVerifyOnly, t0, time.Time{}))
	if err := restarted.Accept(ctx, Offer{Generation: 2, Digest: digestOf('c'), Keys: published}, t0); err != nil {
		t.Fatalf("a key published verify-only: %v", err)
	}
}

// A reader admits only the bundle the mark names: a newer one waits (ErrPending), an older or
// another one is refused; it never writes the ConfigMap.
func TestAdmitReadsAndNeverWrites(t *testing.T) {
	keys := keySet(t, key(t, "a", grant.KeySigning, t0.Add(-time.Hour), time.Time{}))
	enc, err := encodeKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	s, ctx := setup(t, map[string]string{KeyGeneration: "3", KeyDigest: digestOf('a'), KeyGrantKeys: enc})
	waitFor(t, s, func(m Mark, err error) bool { return err == nil && m.Generation == 3 })
	before, _ := s.Current()
	cases := []struct {
		offer Offer
		want  error
	}{
		{Offer{Generation: 3, Digest: digestOf('a'), Keys: keys}, nil},
		{Offer{Generation: 4, Digest: digestOf('b'), Keys: keys}, ErrPending},
		{Offer{Generation: 2, Digest: digestOf('c'), Keys: keys}, ErrRollback},
		{Offer{Generation: 3, Digest: digestOf('d'), Keys: keys}, ErrDrift},
	}
	for _, tc := range cases {
		if err := s.Admit(tc.offer); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("Admit(generation %d, %s) = %v, want %v", tc.offer.Generation, tc.offer.Digest[:8], err, tc.want)
		}
	}
	cm, err := s.kube.CoreV1().ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.ResourceVersion != before.ResourceVersion {
		t.Fatal("a reader wrote the mark")
	}
}

// Two managers raising the mark at once: with the same bundle both succeed; with two
// different bundles of one generation exactly one wins and the other sees drift.
func TestConcurrentRaises(t *testing.T) {
	s, ctx := setup(t, map[string]string{KeyGeneration: "1", KeyDigest: digestOf('0')})
	other := New(s.kube, s.namespace, s.name)
	keys := keySet(t, key(t, "a", grant.KeySigning, t0.Add(-time.Hour), time.Time{}))
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, st := range []*Store{s, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.Accept(ctx, Offer{Generation: 2, Digest: digestOf('a'), Keys: keys}, t0)
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("same bundle raised twice: %v", errs)
	}
	for i, d := range []byte{'b', 'c'} {
		wg.Add(1)
		st := []*Store{s, other}[i]
		go func() {
			defer wg.Done()
			errs[i] = st.Accept(ctx, Offer{Generation: 3, Digest: digestOf(d), Keys: keys}, t0)
		}()
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
	keys := keySet(t, key(t, "a", grant.KeySigning, t0.Add(-time.Hour), time.Time{}))
	if err := s.Accept(ctx, Offer{Generation: 1, Digest: digestOf('a'), Keys: keys}, t0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("accept without a mark: %v", err)
	}

	s2, ctx2 := setup(t, map[string]string{KeyGeneration: "4", KeyDigest: digestOf('a')})
	waitFor(t, s2, func(m Mark, err error) bool { return err == nil && m.Generation == 4 })
	if err := s2.kube.CoreV1().ConfigMaps(s2.namespace).Delete(ctx2, s2.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s2, func(_ Mark, err error) bool { return errors.Is(err, ErrUnavailable) })

	s4, _ := setup(t, map[string]string{KeyGeneration: "4", KeyDigest: digestOf('a'), KeyGrantKeys: "[{"})
	waitFor(t, s4, func(_ Mark, err error) bool {
		return errors.Is(err, ErrUnavailable) && strings.Contains(err.Error(), "malformed "+KeyGrantKeys)
	})

	s3, ctx3 := setup(t, map[string]string{KeyGeneration: "seven", KeyDigest: digestOf('a')})
	waitFor(t, s3, func(_ Mark, err error) bool {
		return errors.Is(err, ErrUnavailable) && strings.Contains(err.Error(), "malformed")
	})
	if err := s3.Accept(ctx3, Offer{Generation: 9, Digest: digestOf('a'), Keys: keys}, t0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("accept over a malformed mark: %v", err)
	}
}

// leafAt is a recorded renewable server certificate issued at t0+d, told apart by c.
func leafAt(d time.Duration, c byte) *Leaf { return &Leaf{NotBefore: t0.Add(d), Digest: digestOf(c)} }

// A renewable server certificate is ordered by its notBefore: the same generation admits the
// recorded certificate and records a newer one; an older one is a rollback, within a
// generation and across generations. Another certificate of the recorded one's second is
// refused at the mark's generation, saying what to do, and recorded at a higher one.
func TestCheckServerLeaf(t *testing.T) {
	keys := keySet(t, key(t, "a", grant.KeySigning, t0.Add(-time.Hour), time.Time{}))
	m := Mark{Generation: 5, Digest: digestOf('a'), Keys: keys, Leaf: leafAt(0, '1')}
	offer := func(gen uint64, digest byte, leaf *Leaf) Offer {
		return Offer{Generation: gen, Digest: digestOf(digest), Keys: keys, Leaf: leaf}
	}
	// sameSecond is what the refusal of another certificate of the recorded second says.
	const sameSecond = "issued in the same second (2026-11-01T12:00:00Z) as the recorded one, so it is neither newer nor older; " +
		"renew the certificate again (a later notBefore), or raise the manifest generation above 5 to accept this one"
	cases := []struct {
		name    string
		mark    Mark
		offer   Offer
		write   bool
		wantErr error
		wantMsg string // a substring of the refusal
	}{
		{"the recorded certificate", m, offer(5, 'a', leafAt(0, '1')), false, nil, ""},
		{"a renewal: newer, same generation", m, offer(5, 'a', leafAt(time.Minute, '2')), true, nil, ""},
		{"an older certificate, same generation", m, offer(5, 'a', leafAt(-time.Minute, '0')), false, ErrRollback, "before the accepted one"},
		{"another certificate of the same second, same generation", m, offer(5, 'a', leafAt(0, '9')), false, ErrDrift, sameSecond},
		{"another certificate of the same second, newer generation", m, offer(6, 'c', leafAt(0, '9')), true, nil, ""},
		{"another certificate of the same second, two generations on", m, offer(7, 'c', leafAt(0, '9')), true, nil, ""},
		{"a renewal with other pinned content", m, offer(5, 'b', leafAt(time.Minute, '2')), false, ErrDrift, ""},
		{"an older certificate, newer generation", m, offer(6, 'c', leafAt(-time.Minute, '0')), false, ErrRollback, "generation 6 after 5"},
		{"an older by one second, newer generation", m, offer(6, 'c', leafAt(-time.Second, '0')), false, ErrRollback, ""},
		{"a newer certificate, newer generation", m, offer(6, 'c', leafAt(time.Minute, '2')), true, nil, ""},
		{"the recorded certificate, newer generation", m, offer(6, 'c', leafAt(0, '1')), true, nil, ""},
		{"a pinned certificate ignores the record", m, offer(6, 'c', nil), true, nil, ""},
		{"a mark without a record records one", Mark{Generation: 5, Digest: digestOf('a'), Keys: keys}, offer(5, 'a', leafAt(-time.Hour, '0')), true, nil, ""},
	}
	for _, tc := range cases {
		write, err := Check(tc.mark, tc.offer, t0)
		if write != tc.write || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) ||
			(err != nil && !strings.Contains(err.Error(), tc.wantMsg)) {
			t.Errorf("%s: Check = %v, %v; want %v, %v containing %q", tc.name, write, err, tc.write, tc.wantErr, tc.wantMsg)
		}
	}
}

// A reader admits a renewable certificate only once a writer recorded it: a newer one waits
// (ErrPending) — a writer must record it first, so that a restarted replica refuses what is
// older — and an older one is refused. Another certificate of the recorded one's second is
// refused at the mark's generation and, at a higher one, waits like every new generation
// until a writer recorded that very certificate. No cluster: the observed mark is set
// directly.
func TestAdmitServerLeaf(t *testing.T) {
	keys := keySet(t, key(t, "a", grant.KeySigning, t0.Add(-time.Hour), time.Time{}))
	s := New(nil, "ns", "mark")
	s.set(Mark{Generation: 5, Digest: digestOf('a'), Keys: keys, Leaf: leafAt(0, '1')}, nil)
	cases := []struct {
		gen    uint64
		digest byte
		leaf   *Leaf
		want   error
	}{
		{5, 'a', leafAt(0, '1'), nil},
		{5, 'a', leafAt(time.Minute, '2'), ErrPending},
		{5, 'a', leafAt(-time.Minute, '0'), ErrRollback},
		{5, 'a', nil, nil},
		{5, 'a', leafAt(0, '9'), ErrDrift},
		{6, 'b', leafAt(0, '9'), ErrPending},
		{6, 'b', leafAt(-time.Minute, '0'), ErrPending}, // the writer refuses it (TestCheckServerLeaf); the mark never moves
	}
	for _, tc := range cases {
		err := s.Admit(Offer{Generation: tc.gen, Digest: digestOf(tc.digest), Keys: keys, Leaf: tc.leaf})
		if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("Admit(generation %d, %+v) = %v, want %v", tc.gen, tc.leaf, err, tc.want)
		}
	}
	// A writer recorded the certificate of the same second at generation 6: that one is
	// admitted there, the one it replaced is not.
	s.set(Mark{Generation: 6, Digest: digestOf('b'), Keys: keys, Leaf: leafAt(0, '9')}, nil)
	if err := s.Admit(Offer{Generation: 6, Digest: digestOf('b'), Keys: keys, Leaf: leafAt(0, '9')}); err != nil {
		t.Errorf("the recorded certificate of the same second: %v", err)
	}
	if err := s.Admit(Offer{Generation: 6, Digest: digestOf('b'), Keys: keys, Leaf: leafAt(0, '1')}); !errors.Is(err, ErrDrift) {
		t.Errorf("the certificate it replaced, at its generation: %v", err)
	}
	s.set(Mark{Generation: 5, Digest: digestOf('a'), Keys: keys}, nil)
	if err := s.Admit(Offer{Generation: 5, Digest: digestOf('a'), Keys: keys, Leaf: leafAt(0, '1')}); !errors.Is(err, ErrPending) {
		t.Errorf("a certificate no writer recorded yet: %v", err)
	}
}

// The mark's wire format stays readable both ways: a mark written before server
// certificates were recorded reads as recording none; the record round-trips; a malformed
// record fails closed like a malformed key set.
func TestParseServerLeaf(t *testing.T) {
	keys := keySet(t, key(t, "a", grant.KeySigning, t0.Add(-time.Hour), time.Time{}))
	enc, err := encodeKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	cm := func(extra map[string]string) *corev1.ConfigMap {
		data := map[string]string{KeyGeneration: "4", KeyDigest: digestOf('a'), KeyGrantKeys: enc}
		for k, v := range extra {
			data[k] = v
		}
		return &corev1.ConfigMap{Data: data}
	}
	older, err := parse(cm(nil))
	if err != nil || older.Leaf != nil || older.Generation != 4 {
		t.Fatalf("a mark without %s: %+v, %v", KeyServerLeaf, older, err)
	}
	rec, err := encodeLeaf(leafAt(time.Minute, '1'))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"notBefore":"2026-11-01T12:01:00Z","sha256":"` + digestOf('1') + `"}`; rec != want {
		t.Fatalf("recorded form %s, want %s", rec, want)
	}
	got, err := parse(cm(map[string]string{KeyServerLeaf: rec}))
	if err != nil || got.Leaf == nil || !got.Leaf.NotBefore.Equal(t0.Add(time.Minute)) || got.Leaf.Digest != digestOf('1') {
		t.Fatalf("round trip: %+v, %v", got.Leaf, err)
	}
	for _, bad := range []string{"{", "[]", "{}", `{"notBefore":"2026-11-01T12:01:00Z"}`, `{"sha256":"` + digestOf('1') + `"}`,
		`{"notBefore":"2026-11-01T12:01:00Z","sha256":"sha256:AB"}`, rec + "{}", strings.Replace(rec, `"sha256"`, `"other":1,"sha256"`, 1),
		`{"notBefore":"yesterday","sha256":"` + digestOf('1') + `"}`, strings.Repeat(" ", maxLeafBytes+1)} {
		if _, err := parse(cm(map[string]string{KeyServerLeaf: bad})); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "malformed "+KeyServerLeaf) {
			t.Errorf("parse with %s %q: %v", KeyServerLeaf, bad, err)
		}
	}
	initial := Initial("ns", "mark")
	initial.Data[KeyServerLeaf] = rec
	if _, err := parse(initial); !errors.Is(err, ErrUnavailable) {
		t.Errorf("generation 0 with a recorded certificate: %v", err)
	}
}

// Accept records a renewal within a generation and keeps the record across a generation
// whose certificate is pinned; a restarted Store refuses an older certificate from it, and
// another certificate of the recorded one's second until the generation is raised, which
// records it.
func TestAcceptRecordsServerLeaf(t *testing.T) {
	s, ctx := setup(t, map[string]string{KeyGeneration: "0", KeyDigest: ""})
	waitFor(t, s, func(m Mark, err error) bool { return err == nil })
	keys := keySet(t, key(t, "a", grant.KeySigning, t0.Add(-time.Hour), time.Time{}))
	now := t0.Add(time.Hour) // every certificate below is valid by then
	steps := []struct {
		offer Offer
		want  error
	}{
		{Offer{Generation: 1, Digest: digestOf('a'), Keys: keys, Leaf: leafAt(0, '1')}, nil},
		{Offer{Generation: 1, Digest: digestOf('a'), Keys: keys, Leaf: leafAt(time.Minute, '2')}, nil},
		{Offer{Generation: 1, Digest: digestOf('a'), Keys: keys, Leaf: leafAt(0, '1')}, ErrRollback},
		{Offer{Generation: 2, Digest: digestOf('b'), Keys: keys}, nil},
	}
	for i, step := range steps {
		if err := s.Accept(ctx, step.offer, now); !errors.Is(err, step.want) || (step.want == nil && err != nil) {
			t.Fatalf("step %d: Accept = %v, want %v", i, err, step.want)
		}
	}
	restarted := New(s.kube, s.namespace, s.name)
	if err := restarted.Accept(ctx, Offer{Generation: 3, Digest: digestOf('c'), Keys: keys, Leaf: leafAt(0, '1')}, now); !errors.Is(err, ErrRollback) {
		t.Fatalf("an older certificate offered to a fresh Store in a later generation: %v", err)
	}
	// Reissued in the recorded one's second: drift at the mark's generation (2, whose own
	// certificate is pinned: the record of generation 1 orders it), recorded at the next.
	sameSecond := leafAt(time.Minute, '3')
	if err := restarted.Accept(ctx, Offer{Generation: 2, Digest: digestOf('b'), Keys: keys, Leaf: sameSecond}, now); !errors.Is(err, ErrDrift) ||
		!strings.Contains(err.Error(), "raise the manifest generation above 2") {
		t.Fatalf("another certificate of the recorded second at the mark's generation: %v", err)
	}
	if err := restarted.Accept(ctx, Offer{Generation: 3, Digest: digestOf('c'), Keys: keys, Leaf: sameSecond}, now); err != nil {
		t.Fatalf("another certificate of the recorded second at a higher generation: %v", err)
	}
	cm, err := s.kube.CoreV1().ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := parse(cm)
	if err != nil {
		t.Fatal(err)
	}
	want := Mark{Generation: 3, Digest: digestOf('c'), Leaf: sameSecond}
	if diff := cmp.Diff(want, m, cmpopts.IgnoreFields(Mark{}, "Keys", "ResourceVersion")); diff != "" {
		t.Fatalf("mark (-want +got):\n%s", diff)
	}
}

// The mark never records a server certificate that is not valid yet: the record only
// rises, so a notBefore ahead of the writer's clock — from an issuer whose clock runs ahead
// — would hold back every later renewal. There is no allowance: one second ahead is
// refused, before the mark is read (the Store has no client at all).
func TestAcceptRefusesACertificateNotValidYet(t *testing.T) {
	keys := keySet(t, key(t, "a", grant.KeySigning, t0.Add(-time.Hour), time.Time{}))
	s := New(nil, "ns", "mark")
	for _, ahead := range []time.Duration{time.Second, 24 * time.Hour} {
		err := s.Accept(t.Context(), Offer{Generation: 1, Digest: digestOf('a'), Keys: keys, Leaf: leafAt(ahead, '1')}, t0)
		if err == nil || !strings.Contains(err.Error(), "refusing a server certificate not valid yet") {
			t.Errorf("a certificate issued %s ahead of the writer's clock: %v", ahead, err)
		}
	}
}
