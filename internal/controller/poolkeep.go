package controller

import (
	"context"
	"crypto/rand"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/pkg/profile"
)

// sync is one pass over a profile's pool: it retires members of another digest, broken
// ones and the surplus, creates a pair's Pod once its claim is bound (or binds only for a
// consumer), and creates the claims of what is lacking.
func (pl *pools) sync(ctx context.Context, name string) error {
	entry, configured := pl.r.cfg.Profiles.Get(name)
	want := 0
	if configured {
		want = int(entry.Spec.PoolSize())
	}
	pods, claims, err := pl.members(name)
	if err != nil {
		return err
	}
	byPair := make(map[string]*corev1.Pod, len(pods))
	for _, pod := range pods {
		byPair[pod.Name] = pod
	}
	current := func(m metav1.Object) bool {
		return configured && m.GetAnnotations()[executor.AnnotationDigest] == entry.Digest
	}
	var keep, starting []*corev1.Pod
	var retire []*corev1.Pod
	var missing []*corev1.PersistentVolumeClaim // claims whose pooled Pod is not in the cache
	hasClaim := make(map[string]bool, len(claims))
	for _, c := range claims {
		hasClaim[c.Name] = true
		pod := byPair[c.Name]
		switch {
		case pod == nil:
			missing = append(missing, c)
		case pod.DeletionTimestamp != nil:
			if err := pl.r.releasePod(ctx, pod); err != nil && !apierrors.IsConflict(err) {
				return err
			}
		case !current(pod) || !current(c) || podEnded(pod) || c.DeletionTimestamp != nil:
			retire = append(retire, pod)
		case podReady(pod) && c.Status.Phase == corev1.ClaimBound:
			keep = append(keep, pod)
			pl.observeReady(name, pod)
		default:
			starting = append(starting, pod)
		}
	}
	for _, pod := range pods {
		if !hasClaim[pod.Name] {
			// Its claim is gone (an adoption takes the Pod first, so a pooled Pod always
			// has a pooled claim): it can never be adopted.
			if pod.DeletionTimestamp != nil {
				if err := pl.r.releasePod(ctx, pod); err != nil && !apierrors.IsConflict(err) {
					return err
				}
				continue
			}
			retire = append(retire, pod)
		}
	}
	// The surplus goes, those still starting first.
	members := append(append([]*corev1.Pod(nil), starting...), keep...)
	ready := len(keep)
	if surplus := len(members) - want; surplus > 0 {
		retire = append(retire, members[:surplus]...)
		members = members[surplus:]
		ready -= max(0, surplus-len(starting))
	}
	for _, pod := range retire {
		if err := pl.retirePod(ctx, pod); err != nil {
			return err
		}
	}
	again := false
	for _, c := range missing {
		create := current(c) && len(members) < want
		if wait := pl.awaitBinding(c); create && wait >= 0 {
			// Its Pod waits for the volume: a Pod created before its claim binds is only
			// refused by the scheduler, an Event and a retry each time, until it does.
			members = append(members, nil)
			if wait > 0 {
				pl.queue.AddAfter(name, wait)
			}
			continue
		}
		done, err := pl.finishOrRetireClaim(ctx, entry, c, create)
		if err != nil {
			return err
		}
		if done {
			members = append(members, nil) // counted; its Pod is being created
		} else {
			again = true
		}
	}
	inFlight := pl.inFlight(name, hasClaim)
	if len(members)+inFlight < want {
		n := min(want-len(members)-inFlight, poolCreateBurst)
		for range n {
			if err := pl.createPair(ctx, entry); err != nil {
				return err
			}
		}
		again = again || len(members)+inFlight+n < want
	} else if inFlight > 0 {
		again = true // until the cache shows them
	}
	pl.metrics.target.WithLabelValues(name).Set(float64(want))
	pl.metrics.members.WithLabelValues(name, "ready").Set(float64(ready))
	pl.metrics.members.WithLabelValues(name, "starting").Set(float64(len(members) - ready))
	if again {
		pl.queue.AddAfter(name, poolRefillRetry)
	}
	return nil
}

// inFlight counts the pairs created here that the cache does not show yet (seen: the
// pool's claims in the cache), forgetting those it shows and those past the grace.
func (pl *pools) inFlight(profile string, seen map[string]bool) int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	now, n := pl.r.cfg.Now(), 0
	for pair, c := range pl.created {
		switch {
		case c.profile != profile:
		case seen[pair] || now.Sub(c.at) > poolCreatedGrace:
			delete(pl.created, pair)
		default:
			n++
		}
	}
	return n
}

// members lists a pool's Pods and claims from the caches, leaving out Pods this process
// has claimed (the cache may not show their new labels yet).
func (pl *pools) members(name string) ([]*corev1.Pod, []*corev1.PersistentVolumeClaim, error) {
	podObjs, err := pl.r.podIndex.ByIndex(indexPool, name)
	if err != nil {
		return nil, nil, err
	}
	claimObjs, err := pl.r.pvcIndex.ByIndex(indexPool, name)
	if err != nil {
		return nil, nil, err
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.dropTaken(podObjs)
	var pods []*corev1.Pod
	for _, o := range podObjs {
		if pod, ok := o.(*corev1.Pod); ok && pod.Namespace == pl.r.cfg.Namespace && !pl.taken[pod.Name] {
			pods = append(pods, pod)
		}
	}
	var claims []*corev1.PersistentVolumeClaim
	for _, o := range claimObjs {
		if c, ok := o.(*corev1.PersistentVolumeClaim); ok && c.Namespace == pl.r.cfg.Namespace && !pl.taken[c.Name] {
			claims = append(claims, c)
		}
	}
	// Oldest first: they are the likeliest ready, and adoption order is stable.
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return pods, claims, nil
}

// dropTaken forgets taken pairs that left the pool (adopted or deleted) and that no
// environment waits to record. Called with mu held.
func (pl *pools) dropTaken(pooled []any) {
	if len(pl.taken) == 0 {
		return
	}
	keep := make(map[string]bool, len(pl.claimed))
	for _, pod := range pl.claimed {
		keep[pod.Name] = true
	}
	for _, o := range pooled {
		if m, err := metaOf(o); err == nil {
			keep[m.GetName()] = true
		}
	}
	for name := range pl.taken {
		if !keep[name] {
			delete(pl.taken, name)
		}
	}
}

func (pl *pools) observeReady(name string, pod *corev1.Pod) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.readySeen[pod.UID] {
		return
	}
	pl.readySeen[pod.UID] = true
	pl.metrics.refill.WithLabelValues(name).Observe(pl.r.cfg.Now().Sub(pod.CreationTimestamp.Time).Seconds())
}

// retirePod deletes a pooled Pod — exactly the unclaimed version the cache shows, so that
// a Pod claimed meanwhile is never deleted — and its claim goes once the Pod is gone.
func (pl *pools) retirePod(ctx context.Context, pod *corev1.Pod) error {
	uid, rv := pod.UID, pod.ResourceVersion
	err := pl.r.cfg.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	pl.mu.Lock()
	delete(pl.readySeen, uid)
	pl.mu.Unlock()
	return nil
}

// finishOrRetireClaim handles a pooled claim whose pooled Pod is not in the cache: the Pod
// was never created (a pass ended between the two creates), was adopted (the cache has its
// new labels, the claim's are on their way), or is gone. With create it creates the Pod
// (AlreadyExists: it is there); otherwise the claim is deleted once a live read shows that
// no Pod of the pair exists. Reports whether the pair still counts as a member.
func (pl *pools) finishOrRetireClaim(ctx context.Context, entry profile.Entry, c *corev1.PersistentVolumeClaim, create bool) (bool, error) {
	pods := pl.r.cfg.Kube.CoreV1().Pods(c.Namespace)
	if create && c.DeletionTimestamp == nil {
		_, pod, err := executor.PoolMember(c.Name, c.Namespace, entry, pl.r.cfg.Profiles.ExecutorServiceAccount())
		if err != nil {
			return false, err
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
		return true, nil
	}
	if _, err := pods.Get(ctx, c.Name, metav1.GetOptions{}); err == nil {
		return false, nil // adopted or still there: never delete a claim a Pod may mount
	} else if !apierrors.IsNotFound(err) {
		return false, err
	}
	if c.DeletionTimestamp != nil {
		return false, nil
	}
	uid, rv := c.UID, c.ResourceVersion
	err := pl.r.cfg.Kube.CoreV1().PersistentVolumeClaims(c.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return false, err
	}
	return false, nil
}

// Annotations the persistent-volume controller puts on a claim: the provisioner it waits
// for, and the node a WaitForFirstConsumer claim was scheduled to.
const (
	annStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	annSelectedNode           = "volume.kubernetes.io/selected-node"
)

// awaitBinding says whether a pooled claim's Pod waits before it is created: -1 no (the
// claim is bound, or binds only for a consumer), 0 yes until the claim's next change (its
// volume is being provisioned), or how long until the claim's grace (poolBindGrace) ends,
// when nothing says yet which of the two it is.
func (pl *pools) awaitBinding(c *corev1.PersistentVolumeClaim) time.Duration {
	a := c.Annotations
	switch {
	case c.Status.Phase == corev1.ClaimBound || c.DeletionTimestamp != nil || a[annSelectedNode] != "":
		return -1
	case a[annStorageProvisioner] != "" || a[annBetaStorageProvisioner] != "":
		return 0
	}
	if left := c.CreationTimestamp.Add(poolBindGrace).Sub(pl.r.cfg.Now()); left > 0 {
		return left
	}
	return -1
}

// createPair creates a pool member: the claim; its Pod once the claim is bound (sync).
func (pl *pools) createPair(ctx context.Context, entry profile.Entry) error {
	pair, err := pairName(entry.Name)
	if err != nil {
		return err
	}
	claim, _, err := executor.PoolMember(pair, pl.r.cfg.Namespace, entry, pl.r.cfg.Profiles.ExecutorServiceAccount())
	if err != nil {
		return err
	}
	if _, err := pl.r.cfg.Kube.CoreV1().PersistentVolumeClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return err
	}
	pl.mu.Lock()
	pl.created[pair] = createdPair{profile: entry.Name, at: pl.r.cfg.Now()}
	pl.mu.Unlock()
	return nil
}

// pairName is "warm-<profile>-<random>"; a profile name is a DNS label of at most 63
// bytes, so the name stays a valid Pod and claim name.
func pairName(profile string) (string, error) {
	var b [pairSuffixBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	suffix := make([]byte, 0, 8)
	bits, n := uint64(0), 0
	for _, x := range b {
		bits, n = bits<<8|uint64(x), n+8
		for n >= 5 {
			n -= 5
			suffix = append(suffix, alphabet[(bits>>n)&31])
		}
	}
	return PoolPairPrefix + profile + "-" + string(suffix), nil
}
