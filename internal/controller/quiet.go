package controller

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/execplane/execplane/internal/executor"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// startQuietFor bounds a quiet start: a starting environment's status is written once, when
// it is Ready, unless something goes wrong or it is not Ready this long after its creation;
// from then on every change is written as usual.
//
// A start that records its claim and Pod as it creates them, then the claim's binding, then
// the Pod's readiness, costs two or three status writes, each fanned out to every watcher,
// to tell an observer what it learns from the one that says Ready. Nothing depends on the
// records before then: no grant is issued and no administrative operation is taken before
// the first executor is recorded (NeverHadExecutor), the objects carry deterministic names
// and the environment's UID, so a later pass — after a crash too — finds them by name
// (settle) exactly as it finds what a pass created before losing its write, and an
// unrecorded object that vanishes was never used, so creating it again loses nothing.
//
// The bound is for a start that stalls without saying why (a claim no provisioner binds, a
// Pod no node takes, a scheduler that is down); what says why is written at once
// (podTrouble). Ten minutes, a Deployment's default progress deadline — the point at which
// Kubernetes itself calls a rollout stuck: a cluster working through a burst of starts
// (10,000 at once take minutes to schedule) is not slowed further by a status write per
// waiting environment.
const startQuietFor = 10 * time.Minute

// starting: nothing of the first executor's provisioning is recorded yet.
func (p *pass) starting() bool {
	return p.persisted.PVC == nil && p.persisted.NeverHadExecutor()
}

// quiet says whether this pass may leave its status unwritten, and for how long: a starting
// environment on its way to Ready — provisioning, healthy, no Event to record, no trouble
// reported by its Pod, and nothing changed but what the start itself records (the cold
// path's claim and Pod, the conditions, the phase, the observed generation) — within
// startQuietFor of its creation. A pool adoption is never quiet: its one ledger transition
// is the record of the adopted pair.
func (p *pass) quiet() (time.Duration, bool) {
	per, st := p.persisted, p.status
	if !p.starting() || per.Phase != "" || len(p.events) > 0 || st.Phase != executionv1alpha1.PhaseProvisioning ||
		st.FenceState != executionv1alpha1.FenceHealthy || st.LifecycleOperation != nil {
		return 0, false
	}
	if st.PVC != nil && st.PVC.Name != executor.PVCName(p.env) || st.Pod != nil && st.Pod.Name != executor.PodName(p.env, 0) {
		return 0, false
	}
	if p.o.pod != nil && podTrouble(p.o.pod) != "" {
		return 0, false
	}
	rest := st.DeepCopy()
	rest.PVC, rest.Pod, rest.Conditions, rest.Phase = per.PVC, per.Pod, per.Conditions, per.Phase
	rest.ObservedGeneration, rest.FenceState = per.ObservedGeneration, per.FenceState
	if !equality.Semantic.DeepEqual(*rest, *per) {
		return 0, false
	}
	left := p.env.CreationTimestamp.Add(startQuietFor).Sub(p.now.Time)
	return left, left > 0
}

// troubles are the executor container's waiting reasons that need someone's attention (an
// image that cannot be pulled, a container that cannot be created or keeps crashing), as
// opposed to the way there (ContainerCreating, PodInitializing).
var troubles = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
	"CrashLoopBackOff": true,
}

// podTrouble is why the executor Pod will not become ready without help, or "".
func podTrouble(pod *corev1.Pod) string {
	if pod.Status.Phase == corev1.PodFailed {
		if pod.Status.Reason != "" {
			return "Failed: " + pod.Status.Reason
		}
		return "Failed"
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; cs.Name == executor.ContainerName && w != nil && troubles[w.Reason] {
			return w.Reason
		}
	}
	return ""
}
