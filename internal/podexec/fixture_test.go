package podexec

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// The environment the pool's tests run calls in.
const (
	testEnv    = "xenv-a"
	testUID    = "6f1c1f3e-2b7a-4c1d-9e8f-0a1b2c3d4e5f"
	testPod    = "xenv-a-executor"
	testPodUID = "11111111-2222-4333-8444-555555555555"
	testEpoch  = 3
	testGen    = 2
)

// readyEnv is a usable environment with its executor Pod, as a gateway's view holds it.
func readyEnv() *v1alpha1.ExecutionEnvironment {
	return &v1alpha1.ExecutionEnvironment{
		ObjectMeta: metav1.ObjectMeta{Name: testEnv, Namespace: "execplane", UID: types.UID(testUID)},
		Status: v1alpha1.ExecutionEnvironmentStatus{
			Phase: v1alpha1.PhaseReady, Epoch: testEpoch, GrantGeneration: testGen, FenceState: v1alpha1.FenceHealthy,
			Pod:        &v1alpha1.ObjectIdentity{Name: testPod, UID: testPodUID},
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}},
		},
	}
}
