package chart_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/executor"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/profile"
)

// as is the admin's client impersonating a ServiceAccount: the API server authorises and
// admits its requests exactly as it would the account's own token.
func as(t *testing.T, namespace, account string) (kubernetes.Interface, *rest.Config) {
	t.Helper()
	cfg := clustertest.Cluster(t).RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + account,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube, cfg
}

// The chart's ValidatingAdmissionPolicy, evaluated by the API server: under the controller's
// identity the executor namespace admits the Pods internal/executor builds (every profile of
// its golden set) and refuses each variant that reaches past that shape — a Secret, a
// ConfigMap, a projected token or a hostPath volume, a host namespace, a privileged or root
// container, a mounted token, another ServiceAccount, environment from a Secret — naming the
// rule it broke. Server-side dry run: admission runs in full, nothing persists.
//
// The executor namespace here is the operator's own, without Pod Security labels
// (executorNamespace.create=false), so that the policy alone stands between the controller
// and each variant; with the chart's namespace, Pod Security "restricted" is a second wall.
func TestAdmissionPolicyLimitsTheControllerToExecutorPods(t *testing.T) {
	admin := clustertest.Cluster(t).Kube()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// The chart installs the profiles the Pods below are built from: the policy holds each
	// Pod to its own profile's image and runtime class.
	in := install(t, installOptions{set: []string{"executorNamespace.create=false"}, values: []string{profilesValues(t)}, before: func(release string) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: release + "-executors"}}
		if _, err := admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	}})
	controller, _ := as(t, in.release, "execplane-controller")
	// The full profile names a RuntimeClass; the RuntimeClass admission plugin wants it to exist.
	if _, err := admin.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	reg, err := profile.LoadProfiles("../../internal/executor/testdata/profiles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env := &executionv1alpha1.ExecutionEnvironment{ObjectMeta: metav1.ObjectMeta{
		Name: "xenv-5f2c9a7be01d4c8a9f31", Namespace: in.executors, UID: "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}}
	build := func(name string) *corev1.Pod {
		entry, _ := reg.Get(name)
		pod, err := executor.Pod(env, entry, executor.PodOptions{ServiceAccount: "execplane-executor"})
		if err != nil {
			t.Fatal(err)
		}
		return pod
	}
	create := func(pod *corev1.Pod) error {
		_, err := controller.CoreV1().Pods(in.executors).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	// The API server loads policies asynchronously (about once a second): wait until this
	// one refuses the first variant below before asking anything of it.
	secretVolume := corev1.Volume{Name: "keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "execplane-security"}}}
	clustertest.Eventually(t, time.Minute, "the admission policy in force", func() bool {
		pod := build("minimal")
		pod.Spec.Volumes = append(pod.Spec.Volumes, secretVolume)
		return create(pod) != nil
	})
	for _, name := range reg.Names() {
		if err := create(build(name)); err != nil {
			t.Errorf("profile %s: the policy refused the executor Pod: %v", name, err)
		}
	}
	volume := func(v corev1.Volume) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, v)
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/mnt/" + v.Name})
		}
	}
	variants := []struct {
		name, rule string
		mutate     func(*corev1.Pod)
	}{
		{"a Secret volume", "mount only the workspace", volume(secretVolume)},
		{"a ConfigMap volume", "mount only the workspace", volume(corev1.Volume{Name: "config",
			VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "any"}}}})},
		{"a projected token", "mount only the workspace", volume(corev1.Volume{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}})},
		{"a Secret under the tmp volume's name", "mount only the workspace", func(p *corev1.Pod) {
			p.Spec.Volumes[1].VolumeSource = corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "execplane-security"}}
		}},
		{"a hostPath volume", "mount only the workspace", volume(corev1.Volume{Name: "host",
			VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})},
		{"the host network", "no host namespace", func(p *corev1.Pod) { p.Spec.HostNetwork = true }},
		{"the host PID namespace", "no host namespace", func(p *corev1.Pod) { p.Spec.HostPID = true }},
		{"a mounted token", "no service-account token", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = ptr.To(true) }},
		{"the token left to the default", "no service-account token", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }},
		{"another ServiceAccount", "executor ServiceAccount", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "default" }},
		// (A privileged container is refused before admission here: the local API server
		// runs with --allow-privileged=false. The policy's rule covers it on other clusters.)
		{"privilege escalation", "run restricted", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true)
		}},
		{"an unconfined seccomp profile", "run restricted", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined
		}},
		{"an added capability", "run restricted", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
		}},
		{"a root container", "run restricted", func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.RunAsUser = ptr.To[int64](0) }},
		{"a root Pod", "run restricted", func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsUser = ptr.To[int64](0) }},
		{"a container turning runAsNonRoot off", "run restricted", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.RunAsNonRoot = ptr.To(false)
		}},
		{"a writable root file system", "run restricted", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem = ptr.To(false)
		}},
		{"environment from a Secret", "no environment from Secrets", func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "execplane-security"}}}}
		}},
		{"a variable from a Secret", "no environment from Secrets", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "KEY", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "execplane-security"}, Key: "grant.key"}}})
		}},
		{"a host port", "open no host port", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080, HostPort: 8080}}
		}},
		// Keyed to the profile: what isolation and the NetworkPolicies select on.
		{"no executor labels (no NetworkPolicy selects it)", "carry the executor labels", func(p *corev1.Pod) {
			p.Labels = map[string]string{"app": "anything"}
		}},
		{"the component label changed", "carry the executor labels", func(p *corev1.Pod) { p.Labels[executor.LabelComponent] = "gateway" }},
		{"a label of its own", "carry the executor labels", func(p *corev1.Pod) { p.Labels["team"] = "x" }},
		{"neither an environment's nor the pool's", "carry the executor labels", func(p *corev1.Pod) {
			delete(p.Labels, executor.LabelEnvironment)
			delete(p.Labels, executor.LabelEnvironmentUID)
		}},
		{"network egress its profile does not grant", "granting network-egress", func(p *corev1.Pod) {
			p.Labels[executor.LabelNetworkEgress] = "allowed"
		}},
		{"another image", "their profile's image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.example/attacker:1" }},
		{"a second container", "their profile's image", func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, *p.Spec.Containers[0].DeepCopy())
			p.Spec.Containers[1].Name = "sidecar"
		}},
		{"an init container of another image", "their profile's image", func(p *corev1.Pod) {
			c := p.Spec.Containers[0].DeepCopy()
			c.Name = "init"
			p.Spec.InitContainers = []corev1.Container{*c}
		}},
		{"a runtime class its profile does not name", "runtime class", func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr.To("gvisor") }},
		{"no profile", "of a profile the chart installed", func(p *corev1.Pod) { delete(p.Annotations, executor.AnnotationProfile) }},
		{"a profile the chart does not have", "of a profile the chart installed", func(p *corev1.Pod) { p.Annotations[executor.AnnotationProfile] = "other" }},
		{"another environment's workspace", "the environment's own claim", func(p *corev1.Pod) {
			p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "xenv-0000000000000000000a-workspace"
		}},
		{"no workspace", "the environment's own claim", func(p *corev1.Pod) {
			p.Spec.Volumes = p.Spec.Volumes[1:]
			p.Spec.Containers[0].VolumeMounts = p.Spec.Containers[0].VolumeMounts[1:]
		}},
	}
	variants = append(variants,
		struct {
			name, rule string
			mutate     func(*corev1.Pod)
		}{"its profile's runtime class dropped", "runtime class", nil},
		struct {
			name, rule string
			mutate     func(*corev1.Pod)
		}{"another image than its helper image", "their profile's image", nil})
	for _, v := range variants {
		pod := build("minimal")
		switch v.name {
		case "its profile's runtime class dropped": // the full profile runs under gVisor
			pod = build("full")
			pod.Spec.RuntimeClassName = nil
		case "another image than its helper image":
			pod = build("helper-image")
			pod.Spec.InitContainers[0].Image = "registry.example/attacker:1"
		default:
			v.mutate(pod)
		}
		err := create(pod)
		if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			t.Errorf("%s: admitted or refused for another reason: %v", v.name, err)
			continue
		}
		if !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || !strings.Contains(err.Error(), v.rule) {
			t.Errorf("%s: refused, but not by the policy's rule %q: %v", v.name, v.rule, err)
		}
	}
	// Workspace claims: the one the controller builds is admitted; one bound to an existing
	// volume, selecting one, or cloning a claim or snapshot is refused.
	claim := func() *corev1.PersistentVolumeClaim {
		entry, _ := reg.Get("minimal")
		pvc, err := executor.PVC(env, entry)
		if err != nil {
			t.Fatal(err)
		}
		return pvc
	}
	createClaim := func(pvc *corev1.PersistentVolumeClaim) error {
		_, err := controller.CoreV1().PersistentVolumeClaims(in.executors).Create(ctx, pvc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	clustertest.Eventually(t, time.Minute, "the claims policy in force", func() bool {
		pvc := claim()
		pvc.Spec.VolumeName = "pv-of-another"
		return createClaim(pvc) != nil
	})
	if err := createClaim(claim()); err != nil {
		t.Errorf("the policy refused the workspace claim: %v", err)
	}
	for name, mutate := range map[string]func(*corev1.PersistentVolumeClaim){
		"bound to an existing volume": func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv-of-another" },
		"selecting a volume": func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"owner": "another"}}
		},
		"cloning another claim": func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "another-workspace"}
		},
		"from a data source ref": func(c *corev1.PersistentVolumeClaim) {
			c.Spec.DataSourceRef = &corev1.TypedObjectReference{Kind: "PersistentVolumeClaim", Name: "another-workspace"}
		},
	} {
		pvc := claim()
		mutate(pvc)
		if err := createClaim(pvc); err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || !strings.Contains(err.Error(), "fresh volumes") {
			t.Errorf("a claim %s: %v", name, err)
		}
	}

	// A claim that exists (unbound: its class is one no provisioner serves, so it stays
	// Pending — the local cluster's provisioner binds the default class within a second) is
	// relabelled by the controller — adopting a warm pool pair — but its spec is never
	// changed: naming a volume for an unbound claim would bind it to data not its own.
	existing := claim()
	existing.Name = "pooled-claim"
	existing.Spec.StorageClassName = ptr.To("no-provisioner")
	if _, err := admin.CoreV1().PersistentVolumeClaims(in.executors).Create(ctx, existing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patchClaim := func(patch string) error {
		_, err := controller.CoreV1().PersistentVolumeClaims(in.executors).Patch(ctx, existing.Name, types.MergePatchType, []byte(patch),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	if err := patchClaim(`{"metadata":{"labels":{"execution.mecatl.dev/environment":"xenv-a"}}}`); err != nil {
		t.Errorf("the policy refused relabelling a claim: %v", err)
	}
	if err := patchClaim(`{"spec":{"volumeName":"pv-of-another"}}`); err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") ||
		!strings.Contains(err.Error(), "changes no workspace claim's spec") {
		t.Errorf("the controller named a volume for an unbound claim: %v", err)
	}

	// Pods of the warm pool, and their adoption: admitted as internal/executor builds them;
	// after their creation the controller may only adopt them (the pool label replaced by an
	// environment's, the environment made owner) and release their finalizer.
	entry, _ := reg.Get("minimal")
	_, pooled, err := executor.PoolMember("warm-minimal-abcdefgh", in.executors, entry, "execplane-executor")
	if err != nil {
		t.Fatal(err)
	}
	if err := create(pooled.DeepCopy()); err != nil {
		t.Errorf("the policy refused a pool member: %v", err)
	}
	foreign := pooled.DeepCopy()
	foreign.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "xenv-0000000000000000000a-workspace"
	if err := create(foreign); err == nil || !strings.Contains(err.Error(), "the environment's own claim") {
		t.Errorf("a pool member mounting another claim: %v", err)
	}
	// A pool member named as another environment's claim would mount it: refused, the name
	// is not a pool pair's.
	impostor := pooled.DeepCopy()
	impostor.Name = "xenv-0000000000000000000a-workspace"
	impostor.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = impostor.Name
	if err := create(impostor); err == nil || !strings.Contains(err.Error(), "the environment's own claim") {
		t.Errorf("a pool member named as another environment's claim: %v", err)
	}
	// An environment's Pod naming another environment's claim as the one it adopted.
	named := build("minimal")
	named.Annotations[executor.AnnotationClaim] = "xenv-0000000000000000000a-workspace"
	named.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "xenv-0000000000000000000a-workspace"
	if err := create(named); err == nil || !strings.Contains(err.Error(), "the environment's own claim") {
		t.Errorf("an executor naming another environment's claim as adopted: %v", err)
	}
	adopted := build("minimal")
	adopted.Annotations[executor.AnnotationClaim] = "warm-minimal-abcdefgh"
	adopted.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "warm-minimal-abcdefgh"
	if err := create(adopted); err != nil {
		t.Errorf("the policy refused the executor of an environment that adopted a pool claim: %v", err)
	}
	// A real pooled Pod (created by the administrator; nothing runs it here), then the
	// controller's updates, dry run.
	live := pooled.DeepCopy()
	live.Finalizers = nil
	if _, err := admin.CoreV1().Pods(in.executors).Create(ctx, live, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Pods(in.executors).Delete(context.Background(), live.Name, metav1.DeleteOptions{})
	})
	patchPod := func(patch string) error {
		// Strategic: a list of containers is merged by name, as kubectl patches an image.
		_, err := controller.CoreV1().Pods(in.executors).Patch(ctx, live.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	adoption := `{"metadata":{"labels":{"execution.mecatl.dev/pool":null,"execution.mecatl.dev/environment":"` + env.Name +
		`","execution.mecatl.dev/environment-uid":"` + string(env.UID) + `"},"ownerReferences":[{"apiVersion":"execution.mecatl.dev/v1alpha1",` +
		`"kind":"ExecutionEnvironment","name":"` + env.Name + `","uid":"` + string(env.UID) + `","controller":true,"blockOwnerDeletion":true}]}}`
	if err := patchPod(adoption); err != nil {
		t.Errorf("the policy refused the adoption of a pooled Pod: %v", err)
	}
	for name, patch := range map[string]string{
		"its image patched":              `{"spec":{"containers":[{"name":"executor","image":"registry.example/attacker:1"}]}}`,
		"a network-egress label added":   `{"metadata":{"labels":{"execution.mecatl.dev/network-egress":"allowed"}}}`,
		"its executor labels taken away": `{"metadata":{"labels":{"app.kubernetes.io/component":null}}}`,
		"a label of its own added":       `{"metadata":{"labels":{"team":"x"}}}`,
		"an annotation changed":          `{"metadata":{"annotations":{"execution.mecatl.dev/profile":"full"}}}`,
		"a finalizer added":              `{"metadata":{"finalizers":["example.com/hold"]}}`,
		"adopted without its owner": `{"metadata":{"labels":{"execution.mecatl.dev/pool":null,"execution.mecatl.dev/environment":"` + env.Name +
			`","execution.mecatl.dev/environment-uid":"` + string(env.UID) + `"}}}`,
	} {
		if err := patchPod(patch); err == nil || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			t.Errorf("%s: %v", name, err)
		}
	}

	// The policy binds the controller only: the cluster's administrator is not held to it.
	pod := build("minimal")
	pod.Spec.Volumes = append(pod.Spec.Volumes, secretVolume)
	if _, err := admin.CoreV1().Pods(in.executors).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil &&
		strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
		t.Errorf("the policy applies beyond the controller's identity: %v", err)
	}
	// Outside the executor namespace the controller may create no Pod at all.
	escaped := build("minimal")
	escaped.Namespace = in.release
	if _, err := controller.CoreV1().Pods(in.release).Create(ctx, escaped, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("the controller created a Pod in the control plane's namespace: %v", err)
	}
}

// profilesValues writes the executor package's profiles as chart values (the chart's schema
// wants a storage class for each; the Pods do not depend on it) and returns the file.
func profilesValues(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../internal/executor/testdata/profiles.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Profiles map[string]map[string]any `json:"profiles"`
	}
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	for _, p := range v.Profiles {
		if _, ok := p["storageClass"]; !ok {
			p["storageClass"] = "standard"
		}
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "profiles.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The gateway's identity execs into executor Pods, and is refused exec into a control-plane
// Pod: a real pods/exec request, as client-go's remotecommand sends it, answered 403 by the
// API server's authorisation before any node is dialled.
func TestGatewayIsRefusedExecIntoTheControlPlane(t *testing.T) {
	in := install(t, installOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	admin := clustertest.Cluster(t).Kube()
	// A Pod standing for a control-plane replica (the controller's, holding the grant keys)
	// and one for an executor; both run on a KWOK node, whose exec endpoint runs the command.
	running := func(namespace, name, account string) {
		t.Helper()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Spec: corev1.PodSpec{
			ServiceAccountName: account, AutomountServiceAccountToken: ptr.To(false),
			NodeName:        clustertest.Cluster(t).NodeNames()[0],
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "main", Image: "registry.example/any:1", SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		}}
		if _, err := admin.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		clustertest.Eventually(t, time.Minute, name+" running", func() bool {
			p, err := admin.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning
		})
	}
	running(in.release, "execplane-controller-0", "execplane-controller")
	running(in.executors, "executor-0", "execplane-executor")

	gateway, cfg := as(t, in.release, "execplane-gateway")
	exec := func(namespace, pod string) (string, error) {
		req := gateway.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: "main", Command: []string{"echo", "reached"}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
		ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String()) // as the gateway does (internal/podexec/exec.go)
		if err != nil {
			return "", err
		}
		var out, errOut bytes.Buffer
		err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut})
		return out.String(), err
	}
	if out, err := exec(in.executors, "executor-0"); err != nil || out != "reached\n" {
		t.Fatalf("the gateway's exec into an executor Pod: %q %v", out, err)
	}
	out, err := exec(in.release, "execplane-controller-0")
	if err == nil || out != "" {
		t.Fatalf("the gateway exec'd into a control-plane Pod: %q %v", out, err)
	}
	if !strings.Contains(err.Error(), "403") && !strings.Contains(strings.ToLower(err.Error()), "forbidden") {
		t.Fatalf("refused, but not by authorisation: %v", err)
	}
	t.Logf("refused: %v", err)
}
