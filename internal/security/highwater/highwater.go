// Package highwater keeps the security material's high-water mark: the highest generation
// accepted, the digest of that generation's bundle, its grant-key set and the newest
// renewable server certificate accepted, stored in a ConfigMap and raised only by
// compare-and-swap.
//
// Invariants:
//   - The mark only rises. Accept refuses a lower generation (rollback), the same
//     generation with another digest (drift), a key set that may not follow the recorded
//     one (grant.CheckRotation), a renewable server certificate older than the recorded
//     one (a renewal is newer) and, at the same generation, another one issued in the
//     recorded one's second (only a higher generation accepts it), and is a resourceVersion
//     compare-and-swap, so two replicas raising at once cannot both win with different
//     bundles. Because the key set and the certificate are recorded, a replica that restarts
//     refuses exactly what a running one refuses.
//   - The recorded notBefore is never later than the writer's clock when it recorded it:
//     Accept refuses a certificate that is not valid yet, with no allowance for skew, so an
//     issuer whose clock runs ahead cannot move the record into the future.
//   - Every key a version of this package added is optional when read (grantKeys,
//     serverLeaf): a mark written by an older version reads as recording none, and the next
//     accepted bundle records it. An older version that raises the mark rewrites only the
//     keys it knows and leaves the others as they were.
//   - Only writers (the controller) raise the mark; readers (gateways) Admit only the
//     bundle it names, and wait while it names an older one.
//   - The mark is watched, never read per request: Current answers from the last observed
//     ConfigMap.
//   - An absent, unreadable or malformed ConfigMap is never treated as zero: Current reports
//     it as unavailable and callers fail closed. The chart creates the ConfigMap (generation
//     0) at install time.
package highwater

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/execplane/execplane/pkg/grant"
)

// ConfigMap keys.
const (
	KeyGeneration = "generation"
	KeyDigest     = "digest"
)

// maxRaiseAttempts bounds compare-and-swap retries: each retry re-reads and re-evaluates,
// so only a storm of concurrent raisers could exhaust it, and then the caller retries later.
const maxRaiseAttempts = 8

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Errors.
var (
	// ErrUnavailable: the mark is absent, unreadable, malformed or not yet observed.
	ErrUnavailable = errors.New("high-water mark unavailable")
	// ErrRollback: the offered generation is below the mark.
	ErrRollback = errors.New("security material generation below the high-water mark")
	// ErrDrift: the offered generation equals the mark's with a different digest.
	ErrDrift = errors.New("security material differs from the accepted bundle of the same generation")
	// ErrContended: the compare-and-swap kept losing.
	ErrContended = errors.New("high-water mark contended")
	// ErrUnsafeRotation: the offered grant-key set may not follow the recorded one.
	ErrUnsafeRotation = errors.New("grant keys may not follow the accepted key set")
	// ErrPending: a reader holds a newer generation than the mark; a writer has not accepted
	// it yet.
	ErrPending = errors.New("security material generation not accepted yet")
)

// Mark is one observed high-water mark.
type Mark struct {
	Generation uint64
	// Digest is empty only for generation 0 (nothing accepted yet).
	Digest string
	// Keys is the accepted bundle's grant-key set; nil for generation 0 and for a mark
	// recorded before key sets were (then the next raise records one).
	Keys *grant.KeySet
	// Leaf is the newest renewable server certificate accepted, whatever the generation;
	// nil when none was (or the mark predates the record).
	Leaf *Leaf
	// ResourceVersion is the ConfigMap's, for compare-and-swap.
	ResourceVersion string
}

// Offer is a fully validated bundle offered to the mark.
type Offer struct {
	Generation uint64
	// Digest covers the manifest and every pinned file (security.Bundle.Digest).
	Digest string
	Keys   *grant.KeySet
	// Leaf is the bundle's server certificate when it is renewable in place (not pinned,
	// so not in Digest); nil otherwise.
	Leaf *Leaf
}

// Store watches and raises the mark in one ConfigMap.
type Store struct {
	kube      kubernetes.Interface
	namespace string
	name      string

	mu      sync.Mutex
	current Mark
	err     error
	changed chan struct{}
}

// New returns a Store for namespace/name. Run must be running for Current to answer.
func New(kube kubernetes.Interface, namespace, name string) *Store {
	return &Store{kube: kube, namespace: namespace, name: name, err: fmt.Errorf("%w: not observed yet", ErrUnavailable), changed: make(chan struct{})}
}

// Run watches the ConfigMap until ctx ends.
func (s *Store) Run(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(s.kube, 0,
		informers.WithNamespace(s.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.name).String()
		}))
	inf := factory.Core().V1().ConfigMaps().Informer()
	observe := func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			s.observe(cm)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: func(any) {
			s.set(Mark{}, fmt.Errorf("%w: ConfigMap %s/%s deleted", ErrUnavailable, s.namespace, s.name))
		},
	})
	factory.Start(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		if len(inf.GetStore().List()) == 0 {
			s.set(Mark{}, fmt.Errorf("%w: ConfigMap %s/%s not found", ErrUnavailable, s.namespace, s.name))
		}
	}
	<-ctx.Done()
	factory.Shutdown()
}

func (s *Store) observe(cm *corev1.ConfigMap) {
	m, err := parse(cm)
	s.set(m, err)
}

func (s *Store) set(m Mark, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current, s.err = m, err
	close(s.changed)
	s.changed = make(chan struct{})
}

// Current returns the last observed mark, or ErrUnavailable.
func (s *Store) Current() (Mark, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current, s.err
}

// Changed returns a channel closed at the next observation.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func parse(cm *corev1.ConfigMap) (Mark, error) {
	gen, err := strconv.ParseUint(cm.Data[KeyGeneration], 10, 64)
	if err != nil {
		return Mark{}, fmt.Errorf("%w: malformed %s", ErrUnavailable, KeyGeneration)
	}
	digest := cm.Data[KeyDigest]
	if (gen == 0 && digest != "") || (gen > 0 && !digestPattern.MatchString(digest)) {
		return Mark{}, fmt.Errorf("%w: malformed %s", ErrUnavailable, KeyDigest)
	}
	keys, err := decodeKeys(cm.Data[KeyGrantKeys])
	if err != nil || (gen == 0 && keys != nil) {
		return Mark{}, fmt.Errorf("%w: malformed %s", ErrUnavailable, KeyGrantKeys)
	}
	leaf, err := decodeLeaf(cm.Data[KeyServerLeaf])
	if err != nil || (gen == 0 && leaf != nil) {
		return Mark{}, fmt.Errorf("%w: malformed %s", ErrUnavailable, KeyServerLeaf)
	}
	return Mark{Generation: gen, Digest: digest, Keys: keys, Leaf: leaf, ResourceVersion: cm.ResourceVersion}, nil
}

// Check decides whether a validated bundle may be published against mark m at now: it
// returns write=true when the mark must be written first (raised, its key set recorded, or
// a renewed server certificate recorded), and ErrRollback, ErrDrift or ErrUnsafeRotation
// when the bundle must be refused. A renewable server certificate is ordered by checkLeaf:
// at the mark's generation only a newer one is recorded; at a higher generation also
// another one of the recorded one's second. A pure function: the policy in one place.
func Check(m Mark, o Offer, now time.Time) (write bool, err error) {
	switch {
	case o.Generation < m.Generation:
		return false, fmt.Errorf("%w: %d < %d", ErrRollback, o.Generation, m.Generation)
	case o.Generation == m.Generation && o.Digest != m.Digest:
		return false, fmt.Errorf("%w (generation %d)", ErrDrift, o.Generation)
	case o.Generation == m.Generation:
		// The same bundle but for a renewable server certificate (the digest covers every
		// pinned file, the keys included): record its key set if this mark predates key
		// sets, and its certificate if it is a renewal.
		renewed, err := checkLeaf(m.Leaf, o.Leaf, m.Generation, o.Generation)
		if err != nil {
			return false, err
		}
		return renewed || (m.Keys == nil && o.Keys != nil), nil
	case m.Keys != nil:
		if err := grant.CheckRotation(m.Keys, o.Keys, now); err != nil {
			return false, fmt.Errorf("%w (generation %d after %d): %w", ErrUnsafeRotation, o.Generation, m.Generation, err)
		}
	}
	if _, err := checkLeaf(m.Leaf, o.Leaf, m.Generation, o.Generation); err != nil {
		return false, fmt.Errorf("generation %d after %d: %w", o.Generation, m.Generation, err)
	}
	return true, nil
}

// Accept admits a fully validated bundle (writers only): it checks it against the newest
// mark and, when the mark must change, writes it by compare-and-swap, re-reading and
// re-checking on every conflict. Only after Accept returns nil may the bundle be published.
// A renewable server certificate whose notBefore is after now is refused before the mark
// is read: the record only rises, so a notBefore ahead of the writer's clock would hold
// every later renewal back (LoadBundle refuses such a certificate as not valid yet, with no
// allowance for skew; this keeps the mark's record bounded by the writer's clock whatever
// the caller checked).
func (s *Store) Accept(ctx context.Context, o Offer, now time.Time) error {
	if o.Generation == 0 || !digestPattern.MatchString(o.Digest) || o.Keys == nil {
		return fmt.Errorf("high-water: refusing generation %d with digest %q", o.Generation, o.Digest)
	}
	keys, err := encodeKeys(o.Keys)
	if err != nil {
		return fmt.Errorf("high-water: encode the key set: %w", err)
	}
	var leaf string
	if o.Leaf != nil {
		if o.Leaf.NotBefore.IsZero() || !digestPattern.MatchString(o.Leaf.Digest) {
			return fmt.Errorf("high-water: refusing a server certificate without notBefore or with digest %q", o.Leaf.Digest)
		}
		if o.Leaf.NotBefore.After(now) {
			return fmt.Errorf("high-water: refusing a server certificate not valid yet (notBefore %s, now %s): "+
				"recorded, it would hold back every renewal issued before it",
				o.Leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
		if leaf, err = encodeLeaf(o.Leaf); err != nil {
			return fmt.Errorf("high-water: encode the server certificate: %w", err)
		}
	}
	for range maxRaiseAttempts {
		// Read through the API rather than the cache: a raise must start from the newest mark.
		cm, err := s.kube.CoreV1().ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%w: ConfigMap %s/%s not found", ErrUnavailable, s.namespace, s.name)
			}
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		m, err := parse(cm)
		if err != nil {
			return err
		}
		write, err := Check(m, o, now)
		if err != nil || !write {
			return err
		}
		next := cm.DeepCopy()
		if next.Data == nil {
			next.Data = map[string]string{}
		}
		next.Data[KeyGeneration] = strconv.FormatUint(o.Generation, 10)
		next.Data[KeyDigest] = o.Digest
		next.Data[KeyGrantKeys] = keys
		if leaf != "" {
			// Only ever newer (Check): a bundle whose certificate is pinned leaves the
			// record of the newest renewable one in place, for later renewals to follow.
			next.Data[KeyServerLeaf] = leaf
		}
		// Update carries the read resourceVersion: a concurrent raise makes it conflict.
		if _, err := s.kube.CoreV1().ConfigMaps(s.namespace).Update(ctx, next, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsConflict(err) {
				continue
			}
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return nil
	}
	return ErrContended
}

// Admit decides, for a reader, whether a validated bundle may be published now: only the
// bundle the observed mark names (ErrPending while the mark is older, its generation or its
// renewable server certificate; ErrRollback or ErrDrift when the bundle is older or
// another). A higher generation always waits for a writer, so another certificate of the
// recorded one's second, which only a higher generation admits (Check), is published once
// the mark records that very certificate, as every renewal is. It writes nothing and reads
// the watch.
func (s *Store) Admit(o Offer) error {
	m, err := s.Current()
	switch {
	case err != nil:
		return err
	case o.Generation > m.Generation:
		return fmt.Errorf("%w: generation %d, the mark is at %d", ErrPending, o.Generation, m.Generation)
	}
	if _, err = Check(m, o, time.Time{}); err != nil { // not newer: no rotation rule applies
		return err
	}
	if renewed, _ := checkLeaf(m.Leaf, o.Leaf, m.Generation, o.Generation); renewed {
		return fmt.Errorf("%w: a server certificate renewed in generation %d, not recorded by the mark yet", ErrPending, o.Generation)
	}
	return nil
}

// WaitObserved waits until the watched mark is at least generation, or ctx ends.
func (s *Store) WaitObserved(ctx context.Context, generation uint64) error {
	for {
		changed := s.Changed()
		if m, err := s.Current(); err == nil && m.Generation >= generation {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-time.After(time.Second):
		}
	}
}

// Initial is the ConfigMap an installation starts with: generation 0, nothing accepted yet.
// The Helm chart renders it; tests and the local demo create it with CreateInitial. A mark
// that is absent is never treated as this one (fail closed).
func Initial(namespace, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Data:       map[string]string{KeyGeneration: "0", KeyDigest: ""},
	}
}

// CreateInitial creates the initial mark unless one exists.
func CreateInitial(ctx context.Context, kube kubernetes.Interface, namespace, name string) error {
	_, err := kube.CoreV1().ConfigMaps(namespace).Create(ctx, Initial(namespace, name), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
