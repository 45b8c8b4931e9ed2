package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/executor"
)

// What the caches keep of a Pod answers every question the controller asks of it exactly
// as the whole Pod does, and the managed fields and the containers are gone.
func TestSlimPodAnswersAsTheWholePod(t *testing.T) {
	now := metav1.NewTime(time.Unix(1_800_000_000, 0))
	deleting := metav1.NewTime(now.Add(-time.Second))
	whole := func(phase corev1.PodPhase, node string, ready corev1.ConditionStatus, deletion *metav1.Time) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u", ResourceVersion: "7", DeletionTimestamp: deletion,
				Labels: map[string]string{executor.LabelPool: "python", executor.LabelName: "execplane", "team": "a"},
				Annotations: map[string]string{executor.AnnotationPoolPair: "p", executor.AnnotationDigest: "d1",
					"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
				Finalizers:    []string{executor.TerminationFinalizer},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: executor.ContainerName, Image: "registry.example/x:1"}}},
			Status: corev1.PodStatus{Phase: phase, Reason: "Evicted", HostIP: "10.0.0.1",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, Message: "long text", LastTransitionTime: now}},
				ContainerStatuses: []corev1.ContainerStatus{
					{Name: executor.ContainerName, Image: "registry.example/x:1", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", Message: "m"}}},
					{Name: "sidecar", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}},
				}},
		}
	}
	for name, pod := range map[string]*corev1.Pod{
		"running and ready":           whole(corev1.PodRunning, "node-a", corev1.ConditionTrue, nil),
		"failed":                      whole(corev1.PodFailed, "node-a", corev1.ConditionFalse, nil),
		"deleted before it was bound": whole(corev1.PodPending, "", corev1.ConditionFalse, &deleting),
		"deleted while running":       whole(corev1.PodRunning, "node-a", corev1.ConditionTrue, &deleting),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := slim(pod.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			s := got.(*corev1.Pod)
			type answers struct {
				Ready, Ended bool
				Proof        any
				Proven       bool
				Meta         metav1.ObjectMeta
				Looked       map[string]string // every label and annotation the controller reads
			}
			ask := func(p *corev1.Pod) answers {
				proof, proven := terminationOf(p, now)
				m := p.ObjectMeta
				m.ManagedFields, m.Labels, m.Annotations = nil, nil, nil
				looked := map[string]string{}
				for _, k := range keptLabels {
					looked["label "+k] = p.Labels[k]
				}
				for _, k := range keptAnnotations {
					looked["annotation "+k] = p.Annotations[k]
				}
				return answers{Ready: podReady(p), Ended: podEnded(p), Proof: proof, Proven: proven, Meta: m, Looked: looked}
			}
			if diff := cmp.Diff(ask(pod), ask(s)); diff != "" {
				t.Errorf("answers (-whole +slim):\n%s", diff)
			}
			if s.ManagedFields != nil || s.Spec.Containers != nil || s.Status.HostIP != "" || len(s.Labels) != 1 || len(s.Annotations) != 2 {
				t.Errorf("kept more than it reads: %+v", s)
			}
		})
	}
}

// Of a claim the caches keep its phase and the annotations the pool reads to know whether
// its volume is being provisioned; the PV controller's others and everything else go.
func TestSlimClaimKeepsWhatThePoolReads(t *testing.T) {
	whole := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "u", ResourceVersion: "9",
			Labels: map[string]string{executor.LabelEnvironment: "e", executor.LabelManagedBy: "execplane"},
			Annotations: map[string]string{annStorageProvisioner: "local", annSelectedNode: "n1",
				"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes"},
			Finalizers: []string{"kubernetes.io/pvc-protection"}},
		Spec:   corev1.PersistentVolumeClaimSpec{VolumeName: "pv-1"},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
	}
	got, err := slim(whole.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "u", ResourceVersion: "9",
			Labels:      map[string]string{executor.LabelEnvironment: "e"},
			Annotations: map[string]string{annStorageProvisioner: "local", annSelectedNode: "n1"},
			Finalizers:  []string{"kubernetes.io/pvc-protection"}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slim claim (-want +got):\n%s", diff)
	}
}
