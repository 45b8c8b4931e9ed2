package chart_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// e2bValues enables the E2B front end (the e2b.yaml golden).
const e2bValues = "testdata/e2b-values.yaml"

// e2bSelector is the front end's Pods' selector labels in a release named execplane.
var e2bSelector = map[string]string{"app.kubernetes.io/name": "execplane", "app.kubernetes.io/instance": "execplane", "app.kubernetes.io/component": "e2b"}

// The front end is off by default: neither the default nor the production-like values
// render any of it, nor does the gateway's policy name it.
func TestE2BIsOffByDefault(t *testing.T) {
	for _, values := range [][]string{nil, {production}} {
		r := render(t, values...)
		for _, mark := range []string{"component: e2b", "execplane-e2b"} {
			if strings.Contains(r, mark) {
				t.Errorf("%v: the render holds %q", values, mark)
			}
		}
	}
}

// Enabled, it refuses to render without a template, or with a template onto a profile the
// chart does not install, saying which value is wrong.
func TestE2BRefusesTemplatesWithoutProfiles(t *testing.T) {
	cases := []struct {
		set  []string
		want string
	}{
		{[]string{"e2b.enabled=true"}, `e2b.templates: map at least one E2B template onto a profile`},
		{[]string{"e2b.enabled=true", "e2b.templates.base=python"}, `e2b.templates.base: profile "python" is not one of the chart's profiles (values "profiles": none)`},
	}
	for _, tc := range cases {
		args := []string{"template", "execplane", chartDir, "--kube-version", kubeVersion}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		out, err := helm(t, args...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %v: err %v, want a refusal containing %q:\n%s", tc.set, err, tc.want, out)
		}
	}
	out, err := helm(t, "template", "execplane", chartDir, "--kube-version", kubeVersion, "-f", e2bValues, "--set", "e2b.templates.code=node")
	if want := `e2b.templates.code: profile "node" is not one of the chart's profiles (values "profiles": python)`; err == nil || !strings.Contains(out, want) {
		t.Errorf("a template onto an unknown profile: err %v, want %q:\n%s", err, want, out)
	}
}

// The front end's Pods hold no Kubernetes credential (no token mounted, no Role bound to
// their account), mount the two Secrets read-only and the spool where --spool-dir points,
// run as the other components do, and reach the gateway through its Service by name.
func TestE2BPod(t *testing.T) {
	var values struct {
		E2B struct {
			Templates map[string]string `json:"templates"`
		} `json:"e2b"`
	}
	data, err := os.ReadFile(e2bValues)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	r := render(t, e2bValues)
	var d *appsv1.Deployment
	for _, dep := range documents[appsv1.Deployment](t, r, "Deployment") {
		if dep.Name == "execplane-e2b" {
			d = &dep
		}
	}
	if d == nil {
		t.Fatal("no execplane-e2b Deployment")
	}
	spec := d.Spec.Template.Spec
	if diff := cmp.Diff(e2bSelector, d.Spec.Selector.MatchLabels); diff != "" {
		t.Errorf("selector (-want +got):\n%s", diff)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken || spec.ServiceAccountName != "execplane-e2b" {
		t.Errorf("the Pod mounts a token or runs under another account: %v, %q", spec.AutomountServiceAccountToken, spec.ServiceAccountName)
	}
	for _, sa := range documents[corev1.ServiceAccount](t, r, "ServiceAccount") {
		if sa.Name == "execplane-e2b" && (sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken) {
			t.Error("the front end's ServiceAccount mounts a token")
		}
	}
	for _, rb := range documents[rbacv1.RoleBinding](t, r, "RoleBinding") {
		for _, s := range rb.Subjects {
			if s.Name == "execplane-e2b" {
				t.Errorf("%s binds a Role to the front end's account", rb.Name)
			}
		}
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	args := map[string][]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(a, "=")
		args[k] = append(args[k], v)
	}
	var templates []string
	for id, profile := range values.E2B.Templates {
		templates = append(templates, id+"="+profile)
	}
	slices.Sort(templates)
	if diff := cmp.Diff(templates, args["--template"]); diff != "" {
		t.Errorf("--template (-values +rendered):\n%s", diff)
	}
	if got := args["--gateway"]; !slices.Equal(got, []string{"execplane-gateway.execplane.svc:8443"}) {
		t.Errorf("--gateway %v, want the gateway Service", got)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	// Each file argument lies in the volume of the Secret that holds it.
	for _, f := range []struct{ flag, volume, secret string }{
		{"--keys", "keys", "e2b-keys"},
		{"--gateway-ca", "client", "e2b-client"}, {"--client-cert", "client", "e2b-client"}, {"--client-key", "client", "e2b-client"},
		{"--tls-cert", "tls", "e2b-tls"}, {"--tls-key", "tls", "e2b-tls"},
	} {
		m, v := mounts[f.volume], volumes[f.volume]
		if len(args[f.flag]) != 1 || filepath.Dir(args[f.flag][0]) != m.MountPath || !m.ReadOnly || v.Secret == nil || v.Secret.SecretName != f.secret {
			t.Errorf("%s %v: want a file in Secret %s, mounted read-only (mount %+v, Secret volume %+v)", f.flag, args[f.flag], f.secret, m, v.Secret)
		}
	}
	if spool := mounts["spool"]; len(args["--spool-dir"]) != 1 || args["--spool-dir"][0] != spool.MountPath || spool.ReadOnly || volumes["spool"].EmptyDir == nil {
		t.Errorf("--spool-dir %v is not a writable emptyDir: %+v, emptyDir %+v", args["--spool-dir"], spool, volumes["spool"].EmptyDir)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		spec.SecurityContext == nil || spec.SecurityContext.RunAsUser == nil || *spec.SecurityContext.RunAsUser != 65532 {
		t.Errorf("not the chart's restricted security context: %+v, %+v", sc, spec.SecurityContext)
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.StrVal != "diagnostics" {
			t.Errorf("a probe not on the diagnostics port: %+v", p)
		}
	}
}

// With network policies, the front end takes calls only from its selected clients (and
// scrapes from monitoring) and reaches only the gateways' API port and the cluster's DNS;
// the gateway's policy, restricted to its selected clients, admits the front end.
func TestE2BNetworkPolicies(t *testing.T) {
	policies := map[string]networkingv1.NetworkPolicy{}
	for _, np := range documents[networkingv1.NetworkPolicy](t, render(t, e2bValues), "NetworkPolicy") {
		policies[np.Name] = np
	}
	np, ok := policies["execplane-e2b"]
	if !ok {
		t.Fatal("no execplane-e2b NetworkPolicy")
	}
	if diff := cmp.Diff(e2bSelector, np.Spec.PodSelector.MatchLabels); diff != "" {
		t.Errorf("selects (-want +got):\n%s", diff)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || len(np.Spec.Egress) != 2 {
		t.Fatalf("egress: %v, %+v", np.Spec.PolicyTypes, np.Spec.Egress)
	}
	gateway, dns := np.Spec.Egress[0], np.Spec.Egress[1]
	if len(gateway.To) != 1 || gateway.To[0].PodSelector == nil || gateway.To[0].PodSelector.MatchLabels["app.kubernetes.io/component"] != "gateway" ||
		gateway.To[0].NamespaceSelector != nil || len(gateway.Ports) != 1 || gateway.Ports[0].Port.IntValue() != 8443 {
		t.Errorf("egress beyond the gateways' API port: %+v", gateway)
	}
	for _, p := range dns.Ports {
		if p.Port.IntValue() != 53 {
			t.Errorf("egress to DNS on port %v", p.Port)
		}
	}
	if len(dns.To) != 1 || dns.To[0].PodSelector == nil || dns.To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
		t.Errorf("egress beyond the cluster's DNS: %+v", dns)
	}
	for _, rule := range np.Spec.Ingress {
		for _, peer := range rule.From {
			if peer.IPBlock != nil || peer.NamespaceSelector == nil {
				t.Errorf("ingress from %+v: want the selected namespaces only", peer)
			}
		}
	}

	admitted := false
	for _, rule := range policies["execplane-gateway"].Spec.Ingress {
		for _, peer := range rule.From {
			if peer.PodSelector != nil && cmp.Equal(peer.PodSelector.MatchLabels, e2bSelector) && peer.NamespaceSelector == nil {
				admitted = slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port.StrVal == "api" })
			}
		}
	}
	if !admitted {
		t.Errorf("the gateway's policy does not admit the front end to its API port: %+v", policies["execplane-gateway"].Spec.Ingress)
	}
}

// A podLabels key the chart sets on the front end's Pods fails the render, as for the
// other Deployments.
func TestE2BPodLabelsCannotReplaceTheChartsLabels(t *testing.T) {
	out, err := helm(t, "template", "execplane", chartDir, "--kube-version", kubeVersion, "-f", e2bValues,
		"--set", `e2b.podLabels.app\.kubernetes\.io/component=x`)
	if want := `e2b.podLabels: "app.kubernetes.io/component" is one of the chart's own labels`; err == nil || !strings.Contains(out, want) {
		t.Errorf("err %v, want a refusal containing %q:\n%s", err, want, out)
	}
}

// Applied for real (server-side apply checks every object against the API server's
// schemas), the front end's account may do nothing more than any authenticated account —
// the executor's reviewed list.
func TestE2BAppliesWithoutPermissions(t *testing.T) {
	in := install(t, installOptions{values: []string{e2bValues}})
	want, err := os.ReadFile(filepath.Join("testdata", "permissions-executor-executors.txt"))
	if err != nil {
		t.Fatal(err)
	}
	as := "--as=system:serviceaccount:" + in.release + ":execplane-e2b"
	for _, ns := range []string{in.release, in.executors} {
		got, err := in.kubectl("auth", "can-i", "--list", "-n", ns, as)
		if err != nil {
			t.Fatalf("can-i --list: %v\n%s", err, got)
		}
		if diff := cmp.Diff(string(want), got); diff != "" {
			t.Errorf("the front end's permissions in %s (-any account +e2b):\n%s", ns, diff)
		}
	}
}
