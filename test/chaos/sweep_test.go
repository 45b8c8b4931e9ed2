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
// suspended (no executor), or fenced with a recorded reason; exactly one claim and at most one executor Pod per
// environment, each the one recorded, none terminating; no claim or Pod of no environment;
// every binding's reference published. The fault suite polls it until it returns nothing,
// for at most two resync periods.
func (s *system) sweep(ctx context.Context) []string {
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
		fenced := st.FenceState == v1alpha1.FenceUnknown && st.FenceReason != ""
		suspended := st.Phase == v1alpha1.PhaseSuspended && st.Suspended()
		if !fenced && !suspended && (!meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionReady) || st.Phase != v1alpha1.PhaseReady) {
			bad = append(bad, fmt.Sprintf("environment %s is neither Ready, suspended nor fenced: phase %q, fence %q", env.Name, st.Phase, st.FenceState))
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
			bad = append(bad, fmt.Sprintf("%d orphaned Pods of %q", len(ps), name))
		}
	}
	for name, cs := range claimsOf {
		if !known[name] {
			bad = append(bad, fmt.Sprintf("%d orphaned claims of %q", len(cs), name))
		}
	}
	slices.Sort(bad)
	return bad
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
