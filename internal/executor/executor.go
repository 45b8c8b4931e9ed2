package executor

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/profile"
)

// Paths and identities inside the executor Pod.
const (
	// WorkspacePath is where the claim is mounted unless the profile says otherwise
	// (workspacePath): also the working directory and HOME.
	WorkspacePath = profile.DefaultWorkspacePath
	// TmpPath is the size-limited scratch directory.
	TmpPath = "/tmp"
	// ContainerName is the executor container (pods/exec targets it).
	ContainerName = "executor"
	// RootEnv tells the helper its workspace root (helper.RootEnv; repeated here so that
	// this package does not depend on the helper's).
	RootEnv = "EXECPLANE_WORKSPACE_ROOT"
	// RunAsUser and RunAsGroup are the fixed, non-root identity of everything in the Pod;
	// FSGroup makes the workspace writable by it.
	RunAsUser  = 65532
	RunAsGroup = 65532
	// TerminationFinalizer holds the Pod until its terminal state is recorded.
	TerminationFinalizer = "execution.mecatl.dev/termination-proof"
	// terminationGraceSeconds is how long the helper's pause mode gets to exit on delete.
	terminationGraceSeconds = 10
)

// Labels and annotations.
const (
	LabelName           = "app.kubernetes.io/name"
	LabelComponent      = "app.kubernetes.io/component"
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	LabelEnvironment    = "execution.mecatl.dev/environment"
	LabelEnvironmentUID = "execution.mecatl.dev/environment-uid"
	// LabelNetworkEgress marks executors whose profile grants CapabilityNetworkEgress: the
	// chart's NetworkPolicies deny every executor's egress, and allow it for these only.
	LabelNetworkEgress = "execution.mecatl.dev/network-egress"
	AnnotationProfile  = "execution.mecatl.dev/profile"
	AnnotationDigest   = "execution.mecatl.dev/profile-digest"
	AnnotationOrdinal  = "execution.mecatl.dev/executor-ordinal"
	// LabelPool marks a warm pool member — an executor Pod and its claim that no
	// environment has adopted yet — with its profile. Adoption removes it, once: a Pod or
	// claim without it is never pooled again.
	LabelPool = "execution.mecatl.dev/pool"
	// AnnotationPoolPair names the pool pair an executor Pod or claim was built as; it stays
	// after adoption, so that an interrupted adoption is found and finished.
	AnnotationPoolPair = "execution.mecatl.dev/pool-pair"
	// AnnotationClaim names the workspace claim of an executor Pod whose environment adopted
	// its claim from the warm pool (its name is the pair's, not PVCName's).
	AnnotationClaim    = "execution.mecatl.dev/workspace-claim"
	componentExecutor  = "executor"
	componentWorkspace = "workspace"
	appName            = "execplane"
	managedBy          = "execplane-controller"
)

// PVCName is the workspace claim's name.
func PVCName(env *executionv1alpha1.ExecutionEnvironment) string { return env.Name + "-workspace" }

// PodName is the executor Pod's name for a given ordinal.
func PodName(env *executionv1alpha1.ExecutionEnvironment, ordinal int64) string {
	return env.Name + "-x" + strconv.FormatInt(ordinal, 10)
}

func labels(env *executionv1alpha1.ExecutionEnvironment, component string) map[string]string {
	return map[string]string{
		LabelName:           appName,
		LabelComponent:      component,
		LabelManagedBy:      managedBy,
		LabelEnvironment:    env.Name,
		LabelEnvironmentUID: string(env.UID),
	}
}

// ErrIncompleteProfile is returned for a profile without a bound the builders need; profiles
// from a validated registry always have them.
var ErrIncompleteProfile = errors.New("executor: profile lacks a required bound")

// PVC builds the workspace claim. It has no owner reference on purpose.
func PVC(env *executionv1alpha1.ExecutionEnvironment, p profile.Entry) (*corev1.PersistentVolumeClaim, error) {
	return pvc(PVCName(env), env.Namespace, labels(env, componentWorkspace), p)
}

func pvc(name, namespace string, objLabels map[string]string, p profile.Entry) (*corev1.PersistentVolumeClaim, error) {
	spec := p.Spec
	if spec.StorageSize == nil {
		return nil, fmt.Errorf("%w: storageSize", ErrIncompleteProfile)
	}
	pvc := &corev1.PersistentVolumeClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   namespace,
			Labels:      objLabels,
			Annotations: map[string]string{AnnotationProfile: p.Name, AnnotationDigest: p.Digest},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: spec.StorageSize.DeepCopy()},
			},
		},
	}
	if spec.StorageClass != "" {
		pvc.Spec.StorageClassName = ptr.To(spec.StorageClass)
	}
	return pvc, nil
}

// PodOptions are the inputs of Pod beyond the environment and the profile.
type PodOptions struct {
	// Ordinal numbers executors of one environment: 0 first, +1 per replacement.
	Ordinal int64
	// ServiceAccount is the token-less ServiceAccount executors run as.
	ServiceAccount string
	// Claim is the workspace claim's name when it is not PVCName (a claim adopted from the
	// warm pool keeps its pool name).
	Claim string
}

// Pod builds the executor Pod.
func Pod(env *executionv1alpha1.ExecutionEnvironment, p profile.Entry, o PodOptions) (*corev1.Pod, error) {
	claim := o.Claim
	if claim == "" {
		claim = PVCName(env)
	}
	pod, err := pod(PodName(env, o.Ordinal), env.Namespace, labels(env, componentExecutor), claim, p, o.ServiceAccount)
	if err != nil {
		return nil, err
	}
	pod.Annotations[AnnotationOrdinal] = strconv.FormatInt(o.Ordinal, 10)
	if o.Claim != "" {
		// The claim came from a warm pool pair: the chart's admission policy admits a
		// workspace that is the environment's own claim, or the adopted one the Pod names.
		pod.Annotations[AnnotationClaim] = o.Claim
	}
	pod.OwnerReferences = []metav1.OwnerReference{OwnerReference(env)}
	return pod, nil
}

// OwnerReference makes env the controller of an executor Pod (never of a claim).
func OwnerReference(env *executionv1alpha1.ExecutionEnvironment) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         executionv1alpha1.SchemeGroupVersion.String(),
		Kind:               "ExecutionEnvironment",
		Name:               env.Name,
		UID:                env.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// PoolMember builds a warm pool pair of a profile: a claim and an executor Pod, both named
// pair, labelled with the pool and no environment, and no owner. Adoption gives both the
// environment's labels and the Pod its owner; nothing else about them changes.
func PoolMember(pair, namespace string, p profile.Entry, serviceAccount string) (*corev1.PersistentVolumeClaim, *corev1.Pod, error) {
	poolLabels := func(component string) map[string]string {
		return map[string]string{LabelName: appName, LabelComponent: component, LabelManagedBy: managedBy, LabelPool: p.Name}
	}
	claim, err := pvc(pair, namespace, poolLabels(componentWorkspace), p)
	if err != nil {
		return nil, nil, err
	}
	claim.Annotations[AnnotationPoolPair] = pair
	pod, err := pod(pair, namespace, poolLabels(componentExecutor), pair, p, serviceAccount)
	if err != nil {
		return nil, nil, err
	}
	pod.Annotations[AnnotationPoolPair] = pair
	return claim, pod, nil
}

func pod(name, namespace string, objLabels map[string]string, claim string, p profile.Entry, serviceAccount string) (*corev1.Pod, error) {
	spec := p.Spec
	if spec.TmpSizeLimit == nil || spec.Image == "" {
		return nil, fmt.Errorf("%w: image and tmpSizeLimit", ErrIncompleteProfile)
	}
	if serviceAccount == "" {
		return nil, errors.New("executor: a ServiceAccount is required (never the namespace default)")
	}
	workspace := spec.WorkspacePath
	if workspace == "" {
		workspace = WorkspacePath
	}
	helper := spec.HelperPath
	if helper == "" {
		helper = profile.DefaultHelperPath
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   namespace,
			Labels:      objLabels,
			Annotations: map[string]string{AnnotationProfile: p.Name, AnnotationDigest: p.Digest},
			Finalizers:  []string{TerminationFinalizer},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ServiceAccountName:            serviceAccount,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](terminationGraceSeconds),
			RuntimeClassName:              nonEmpty(spec.RuntimeClassName),
			NodeSelector:                  copyMap(spec.NodeSelector),
			Tolerations:                   append([]corev1.Toleration(nil), spec.Tolerations...),
			SecurityContext:               podSecurity(),
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           spec.Image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{helper, "--pause"},
				WorkingDir:      workspace,
				Env: []corev1.EnvVar{
					{Name: RootEnv, Value: workspace},
					{Name: "HOME", Value: workspace},
					{Name: "TMPDIR", Value: TmpPath},
				},
				Resources:       resources(spec),
				SecurityContext: containerSecurity(),
				VolumeMounts: []corev1.VolumeMount{
					{Name: "workspace", MountPath: workspace},
					{Name: "tmp", MountPath: TmpPath},
				},
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			Volumes: []corev1.Volume{
				{Name: "workspace", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}},
				// A tmpfs of tmpSizeLimit bytes: a write past it fails (ENOSPC) at once. A
				// disk-backed emptyDir's sizeLimit is enforced by eviction only, minutes
				// later, by killing the Pod. Its pages count towards the memory limit.
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(spec.TmpSizeLimit.DeepCopy())}}},
			},
		},
	}
	if slices.Contains(spec.Capabilities, profile.CapabilityNetworkEgress) {
		pod.Labels[LabelNetworkEgress] = "allowed"
	}
	for _, s := range spec.ImagePullSecrets {
		pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	if spec.HelperImage != "" {
		installHelper(pod, spec.HelperImage)
	}
	return pod, nil
}

// Installing the helper from a helper image: an init container copies it (the helper's own
// --install, no shell needed) into a small volume that the executor container mounts,
// read-only, as the helper's directory.
const (
	helperVolume        = "helper"
	helperInstallDir    = "/execplane-install"
	helperVolumeSizeMax = "64Mi" // the static helper is about 5 MiB
)

func installHelper(pod *corev1.Pod, image string) {
	dir := path.Dir(profile.DefaultHelperPath)
	limit := resource.MustParse(helperVolumeSizeMax)
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: helperVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}})
	main := &pod.Spec.Containers[0]
	main.VolumeMounts = append(main.VolumeMounts, corev1.VolumeMount{Name: helperVolume, MountPath: dir, ReadOnly: true})
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")}
	pod.Spec.InitContainers = []corev1.Container{{
		Name:                     "install-helper",
		Image:                    image,
		ImagePullPolicy:          corev1.PullIfNotPresent,
		Command:                  []string{profile.DefaultHelperPath, "--install", path.Join(helperInstallDir, path.Base(profile.DefaultHelperPath))},
		Resources:                corev1.ResourceRequirements{Requests: small, Limits: small},
		SecurityContext:          main.SecurityContext.DeepCopy(),
		VolumeMounts:             []corev1.VolumeMount{{Name: helperVolume, MountPath: helperInstallDir}},
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}}
}

// podSecurity is every executor-side Pod's (executors and copy Pods): the fixed non-root
// identity, the workspace's group, the runtime's seccomp filter.
func podSecurity() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:        ptr.To(true),
		RunAsUser:           ptr.To[int64](RunAsUser),
		RunAsGroup:          ptr.To[int64](RunAsGroup),
		FSGroup:             ptr.To[int64](RunAsGroup),
		FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// containerSecurity is every executor-side container's: no privilege, no capability, a
// read-only root file system.
func containerSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Privileged:               ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func resources(spec profile.ProfileSpec) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	set := func(list corev1.ResourceList, name corev1.ResourceName, q *resource.Quantity) {
		if q != nil {
			list[name] = q.DeepCopy()
		}
	}
	set(r.Requests, corev1.ResourceCPU, spec.CPURequest)
	set(r.Requests, corev1.ResourceMemory, spec.MemoryRequest)
	set(r.Requests, corev1.ResourceEphemeralStorage, spec.EphemeralStorageRequest)
	set(r.Limits, corev1.ResourceCPU, spec.CPULimit)
	set(r.Limits, corev1.ResourceMemory, spec.MemoryLimit)
	set(r.Limits, corev1.ResourceEphemeralStorage, spec.EphemeralStorageLimit)
	return r
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
