package chaos_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/executor"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
)

// resyncPeriod is the controllers' --resync-period (the least allowed): the sweeps give
// the system two of them to converge after the last fault.
const resyncPeriod = time.Minute

// sweep returns what does not hold of the cluster's objects now: every environment Ready,
// suspended (no executor), fenced with a recorded reason, or deleted (a tombstone: no Pod,
// no claim, no reference); exactly one claim and at most one executor Pod per live
// environment, each the one recorded, none terminating; no claim or Pod of no environment,
// or of another revision than its environment's current one (a deleted revision's is a
// resurrection); no revision a delete answered (deleted) live again; every binding's
// reference published. A delete still in progress is reported, so that it is accepted only
// until the sweep's deadline: the fault suite polls it until it returns nothing, for at
// most two resync periods.
func (s *system) sweep(ctx context.Context, deleted map[string]bool) []string {
	cs, err := versioned.NewForConfig(s.c.RESTConfig())
	if err != nil {
		return []string{err.Error()}
	}
	envs, err := cs.ExecutionV1alpha1().ExecutionEnvironments(s.executors).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"listing environments: " + err.Error()}
	}
	pods, err := s.c.Kube().CoreV1().Pods(s.executors).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"listing Pods: " + err.Error()}
	}
	claims, err := s.c.Kube().CoreV1().PersistentVolumeClaims(s.executors).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"listing claims: " + err.Error()}
	}
	var bad []string
	podsOf := map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		podsOf[p.Labels[executor.LabelEnvironment]] = append(podsOf[p.Labels[executor.LabelEnvironment]], p)
	}
	claimsOf := map[string][]corev1.PersistentVolumeClaim{}
	for _, c := range claims.Items {
		claimsOf[c.Labels[executor.LabelEnvironment]] = append(claimsOf[c.Labels[executor.LabelEnvironment]], c)
	}
	known := map[string]bool{}
	for _, env := range envs.Items {
		known[env.Name] = true
		st := env.Status
		rev := string(env.UID)
		// Pods and claims are paired with an environment by its name, which every
		// incarnation of a binding shares: each must be of the current revision.
		var objects []metav1.Object
		for _, p := range podsOf[env.Name] {
			objects = append(objects, &p)
		}
		for _, c := range claimsOf[env.Name] {
			objects = append(objects, &c)
		}
		for _, o := range objects {
			kind, of := "Pod", o.GetLabels()[executor.LabelEnvironmentUID]
			if _, claim := o.(*corev1.PersistentVolumeClaim); claim {
				kind = "claim"
			}
			switch {
			case st.Deleted() && of == rev:
				bad = append(bad, fmt.Sprintf("environment %s (revision %s) is deleted, yet its %s %s exists (terminating: %t): resurrected",
					env.Name, rev, kind, o.GetName(), o.GetDeletionTimestamp() != nil))
			case of != rev:
				bad = append(bad, fmt.Sprintf("environment %s (revision %s): %s %s is of revision %s (deleted: %t)", env.Name, rev, kind, o.GetName(), of, deleted[of]))
			}
		}
		if st.Deleted() {
			if len(st.References) > 0 {
				bad = append(bad, fmt.Sprintf("environment %s (revision %s) is deleted with %d references", env.Name, rev, len(st.References)))
			}
			continue
		}
		if op := st.LifecycleOperation; op != nil && op.Kind == v1alpha1.LifecycleDelete {
			bad = append(bad, fmt.Sprintf("environment %s (revision %s) is still being deleted: phase %q, operation %s", env.Name, rev, st.Phase, op.Phase))
			continue
		}
		if deleted[rev] {
			bad = append(bad, fmt.Sprintf("environment %s: revision %s, whose delete was answered, is live again (phase %q): resurrected", env.Name, rev, st.Phase))
		}
		fenced := st.FenceState == v1alpha1.FenceUnknown && st.FenceReason != ""
		suspended := st.Phase == v1alpha1.PhaseSuspended && st.Suspended()
		if !fenced && !suspended && (!meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionReady) || st.Phase != v1alpha1.PhaseReady) {
			bad = append(bad, fmt.Sprintf("environment %s is neither Ready, suspended, fenced nor deleted: phase %q, fence %q", env.Name, st.Phase, st.FenceState))
		}
		if c := claimsOf[env.Name]; len(c) != 1 || st.PVC == nil || c[0].UID != st.PVC.UID {
			bad = append(bad, fmt.Sprintf("environment %s: %d workspace claims, recorded %v", env.Name, len(c), st.PVC))
		}
		ps := podsOf[env.Name]
		for _, p := range ps {
			if p.DeletionTimestamp != nil {
				bad = append(bad, fmt.Sprintf("environment %s: Pod %s left terminating", env.Name, p.Name))
			}
		}
		switch {
		case len(ps) > 1:
			bad = append(bad, fmt.Sprintf("environment %s: %d executor Pods", env.Name, len(ps)))
		case len(ps) == 1 && suspended:
			bad = append(bad, fmt.Sprintf("environment %s is suspended with an executor Pod", env.Name))
		case len(ps) == 1 && (st.Pod == nil || st.Pod.UID != ps[0].UID):
			bad = append(bad, fmt.Sprintf("environment %s: Pod %s is not the one recorded (%v)", env.Name, ps[0].UID, st.Pod))
		case len(ps) == 0 && !fenced && !suspended:
			bad = append(bad, fmt.Sprintf("environment %s is Ready without an executor Pod", env.Name))
		}
		for _, r := range st.References {
			if r.State != v1alpha1.ReferencePublished {
				bad = append(bad, fmt.Sprintf("environment %s: the reference of %s is left %s", env.Name, r.BindingID, r.State))
			}
		}
	}
	for name, ps := range podsOf {
		if !known[name] {
			bad = append(bad, fmt.Sprintf("%d orphaned Pods of %q%s", len(ps), name, deletedOf(ps, deleted)))
		}
	}
	for name, cs := range claimsOf {
		if !known[name] {
			bad = append(bad, fmt.Sprintf("%d orphaned claims of %q%s", len(cs), name, deletedOf(cs, deleted)))
		}
	}
	slices.Sort(bad)
	return bad
}

// deletedOf names the deleted revisions among objs' (" of deleted revisions …"), or "".
func deletedOf[T any, P interface {
	*T
	metav1.Object
}](objs []T, deleted map[string]bool) string {
	var revs []string
	for i := range objs {
		if rev := P(&objs[i]).GetLabels()[executor.LabelEnvironmentUID]; deleted[rev] && !slices.Contains(revs, rev) {
			revs = append(revs, rev)
		}
	}
	if len(revs) == 0 {
		return ""
	}
	return " of deleted revisions " + strings.Join(revs, ", ") + ": resurrected"
}

// leftProcesses lists the node's processes (the fake node runs executors' commands as local
// processes, marked with their Pod's UID) that belong to this system's executor Pods: once
// the gateways have stopped, their helper sessions must have ended and no command survived.
func (s *system) leftProcesses() []string {
	s.mu.Lock()
	uids := make(map[string]bool, len(s.podUIDs))
	for u := range s.podUIDs {
		uids[u] = true
	}
	s.mu.Unlock()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []string{err.Error()}
	}
	var left []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			v, ok := bytes.CutPrefix(kv, []byte("EXECPLANE_FAKE_NODE_POD="))
			if !ok {
				continue
			}
			_, uid, _ := strings.Cut(string(v), "/")
			if uids[uid] {
				stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
				if !bytes.Contains(stat, []byte(") Z ")) {
					left = append(left, fmt.Sprintf("pid %s of Pod %s: %s", e.Name(), uid, bytes.TrimSpace(stat)))
				}
			}
		}
	}
	return left
}
