// Package chart_test checks the Helm chart (deploy/helm/execplane) with the pinned helm
// (hack/tools/go.mod): lint, golden renders of the default, a production-like and an E2B
// front end values file, the values schema's refusals, least-privilege RBAC, and that the
// binaries accept exactly the arguments the chart renders.
package chart_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const (
	chartDir   = "../../deploy/helm/execplane"
	production = chartDir + "/ci/production-values.yaml"
	// kubeVersion is the local cluster's (the chart requires >= 1.30).
	kubeVersion = "1.37.2"
)

var helmBin, gatewayBin, controllerBin, e2bBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping the chart tests under -short (they build helm and use the local cluster)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "chart-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	helmBin, gatewayBin, controllerBin, e2bBin = filepath.Join(dir, "helm"), filepath.Join(dir, "gateway"), filepath.Join(dir, "controller"), filepath.Join(dir, "e2b")
	for _, b := range [][]string{
		{helmBin, "helm.sh/helm/v3/cmd/helm", "-modfile=hack/tools/go.mod"},
		{gatewayBin, "./cmd/gateway"},
		{controllerBin, "./cmd/controller"},
		{e2bBin, "./cmd/e2b"},
	} {
		if err := clustertest.GoBuild("../..", b[0], b[1], b[2:]...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	// Executors run the real helper (for the session through chart-rendered processes).
	code := clustertest.MainWithExecutors(m, "../..", nil)
	os.RemoveAll(dir)
	os.Exit(code)
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func render(t *testing.T, values ...string) string {
	t.Helper()
	args := []string{"template", "execplane", chartDir, "--namespace", "execplane", "--kube-version", kubeVersion}
	for _, v := range values {
		args = append(args, "-f", v)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	return out
}

func TestLint(t *testing.T) {
	for _, values := range [][]string{nil, {production}, {podValues}, {e2bValues}} {
		args := []string{"lint", chartDir, "--strict", "--kube-version", kubeVersion}
		for _, v := range values {
			args = append(args, "-f", v)
		}
		out, err := helm(t, args...)
		if err != nil || strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
			t.Errorf("helm lint %v: %v\n%s", values, err, out)
		}
	}
}

// The goldens leave out the CRD: it is the generated file with the chart's metadata
// (TestCRDTemplate), and hundreds of lines in each golden would only repeat it.
func TestTemplateGolden(t *testing.T) {
	for name, values := range map[string][]string{"default.yaml": nil, "production.yaml": {production}, "pod.yaml": {podValues}, "e2b.yaml": {e2bValues}} {
		golden.Check(t, filepath.Join("testdata", name), withoutCRDs(render(t, values...)), *update)
	}
}

// withoutCRDs drops templates/crd.yaml's documents from a render.
func withoutCRDs(render string) string {
	docs := strings.Split(render, "\n---\n")
	kept := docs[:0]
	for _, d := range docs {
		if !strings.HasPrefix(d, "# Source: execplane/templates/crd.yaml") {
			kept = append(kept, d)
		}
	}
	return strings.Join(kept, "\n---\n")
}

// The schema refuses bad values before anything renders, saying where and why.
func TestSchemaRefusesBadValues(t *testing.T) {
	cases := []struct{ set, want string }{
		{"gateway.replicas=1", "/gateway/replicas': minimum: got 1, want 2"},
		{"gateway.bogus=1", "additional properties 'bogus' not allowed"},
		{"controller.leaderElection.leaseDuration=soon", "'soon' does not match pattern"},
		{"log.level=loud", "/log/level"},
		{"gateway.maxMessageBytes=1", "/gateway/maxMessageBytes"},
		{"gateway.maxEnvironmentCalls=0", "/gateway/maxEnvironmentCalls"},
		{"security.highWaterConfigMap=Bad_Name", "/security/highWaterConfigMap"},
		{"helperPath=relative/helper", "/helperPath"},
		{"controller.gatewayIdentities[0]=gateway", "/controller/gatewayIdentities/0"},
		{"profiles.Bad=null", "/profiles"},
		{"image.digests.gateway=latest", "/image/digests/gateway': 'latest' does not match pattern"},
		{"image.digests.gateway=sha256:ABC", "/image/digests/gateway'"},
		{"image.digests.helper=sha256:" + strings.Repeat("a", 64), "additional properties 'helper' not allowed"},
		{"gateway.preStopSleepSeconds=61", "/gateway/preStopSleepSeconds': maximum: got 61, want 60"},
		{"image.digests.e2b=latest", "/image/digests/e2b': 'latest' does not match pattern"},
		{"e2b.bogus=1", "additional properties 'bogus' not allowed"},
		{"e2b.enabled=yes", "/e2b/enabled': got string, want boolean"},
		{"e2b.replicas=0", "/e2b/replicas': minimum: got 0, want 1"},
		{"e2b.templates.base=Python", "/e2b/templates/base': 'Python' does not match pattern"},
		{"e2b.templates.-base=python", "invalid propertyName '-base'"},
		{"e2b.maxTimeout=1d", "/e2b/maxTimeout': '1d' does not match pattern"},
		{"e2b.keysSecret=", "/e2b/keysSecret': minLength: got 0, want 1"},
		{"e2b.clientCertSecret=", "/e2b/clientCertSecret': minLength: got 0, want 1"},
		{"e2b.service.type=External", "/e2b/service/type'"},
		{"e2b.service.port=0", "/e2b/service/port': minimum: got 0, want 1"},
		{"e2b.spoolSizeLimit=2G", "/e2b/spoolSizeLimit': '2G' does not match pattern"},
		{"e2b.preStopSleepSeconds=61", "/e2b/preStopSleepSeconds': maximum: got 61, want 60"},
		{"e2b.podDisruptionBudget.maxUnavailable=0", "/e2b/podDisruptionBudget/maxUnavailable': minimum: got 0, want 1"},
		{"networkPolicy.e2bClients.bogus=1", "additional properties 'bogus' not allowed"},
	}
	// Each Pod metadata and scheduling value of the three Deployments, of a wrong type.
	for _, c := range []string{"controller", "gateway", "e2b"} {
		cases = append(cases, []struct{ set, want string }{
			{c + ".podAnnotations=x", "/" + c + "/podAnnotations': got string, want object"},
			{c + ".podAnnotations.a=1", "/" + c + "/podAnnotations/a': got number, want string"},
			{c + ".podLabels=x", "/" + c + "/podLabels': got string, want object"},
			{c + ".podLabels.a=true", "/" + c + "/podLabels/a': got boolean, want string"},
			{c + ".priorityClassName=1", "/" + c + "/priorityClassName': got number, want string"},
			{c + ".priorityClassName=High", "/" + c + "/priorityClassName': 'High' does not match pattern"},
			{c + ".topologySpreadConstraints=x", "/" + c + "/topologySpreadConstraints': got string, want array"},
			{c + ".topologySpreadConstraints[0]=x", "/" + c + "/topologySpreadConstraints/0': got string, want object"},
			{c + ".topologySpreadConstraints[0].maxSkew=1", "/" + c + "/topologySpreadConstraints/0': missing properties 'topologyKey', 'whenUnsatisfiable'"},
			{c + ".nodeSelector=x", "/" + c + "/nodeSelector': got string, want object"},
			{c + ".nodeSelector.a=1", "/" + c + "/nodeSelector/a': got number, want string"},
			{c + ".tolerations=x", "/" + c + "/tolerations': got string, want array"},
			{c + ".tolerations[0]=x", "/" + c + "/tolerations/0': got string, want object"},
			{c + ".affinity=x", "/" + c + "/affinity': got string, want object"},
			{c + ".affinity.podAntiAfinity.a=1", "additional properties 'podAntiAfinity' not allowed"},
		}...)
	}
	for _, tc := range cases {
		out, err := helm(t, "template", "execplane", chartDir, "--kube-version", kubeVersion, "--set", tc.set)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: err %v, want a refusal containing %q:\n%s", tc.set, err, tc.want, out)
		}
	}
}

// documents splits a render into objects of one kind.
func documents[T any](t *testing.T, render, kind string) []T {
	t.Helper()
	var out []T
	for doc := range strings.SplitSeq(render, "\n---\n") {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		if head.Kind != kind {
			continue
		}
		var v T
		if err := yaml.UnmarshalStrict([]byte(doc), &v); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		out = append(out, v)
	}
	return out
}

// Least privilege: namespaced Roles, and one ClusterRole that reads nodes and their
// kubelets' metrics for usage metering (none when it is off); no wildcard, no Secrets, exec
// only for the gateway; the executor account mounts no token.
func TestRBAC(t *testing.T) {
	usageOff := filepath.Join(t.TempDir(), "usage-off.yaml")
	if err := os.WriteFile(usageOff, []byte("controller:\n  usage:\n    kubelet: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := render(t, usageOff); strings.Contains(r, "kind: ClusterRole") {
		t.Error("a cluster-wide role with usage metering off")
	}
	for _, values := range [][]string{nil, {production}, {e2bValues}} {
		r := render(t, values...)
		wantRules := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
		}
		cluster := documents[rbacv1.ClusterRole](t, r, "ClusterRole")
		if len(cluster) != 1 {
			t.Fatalf("%d cluster-wide roles, want the usage metering one", len(cluster))
		}
		if diff := cmp.Diff(wantRules, cluster[0].Rules); diff != "" {
			t.Errorf("the cluster-wide role's rules (-want +got):\n%s", diff)
		}
		for _, role := range documents[rbacv1.Role](t, r, "Role") {
			for _, rule := range role.Rules {
				for _, s := range slices.Concat(rule.Verbs, rule.Resources, rule.APIGroups) {
					if s == "*" {
						t.Errorf("%s: a wildcard in %+v", role.Name, rule)
					}
				}
				if slices.Contains(rule.Resources, "secrets") {
					t.Errorf("%s: access to Secrets", role.Name)
				}
				if slices.Contains(rule.Resources, "pods/exec") && !strings.HasSuffix(role.Name, "-gateway") {
					t.Errorf("%s: pods/exec outside the gateway", role.Name)
				}
				// Exec and Pod writes reach only the executor namespace, away from the control
				// plane's Secrets.
				if (slices.Contains(rule.Resources, "pods/exec") || slices.Contains(rule.Resources, "pods") && slices.Contains(rule.Verbs, "create")) &&
					role.Namespace != "execplane-executors" {
					t.Errorf("%s: %v on Pods in namespace %q", role.Name, rule.Verbs, role.Namespace)
				}
			}
		}
		if !strings.Contains(r, "automountServiceAccountToken: false") {
			t.Error("the executor ServiceAccount mounts a token")
		}
	}
}

// By default an executor with the network-egress capability reaches the internet and the
// cluster's DNS, never the link-local metadata range nor the private ranges of the cluster's
// Pods and Services (nor IPv6 link-local and unique-local addresses); no rule allows
// everything.
func TestExecutorEgressExcludesMetadataAndClusterRanges(t *testing.T) {
	must := map[string][]string{"0.0.0.0/0": {"169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"}, "::/0": {"fe80::/10", "fc00::/7"}}
	for _, values := range [][]string{nil, {production}} {
		for _, np := range documents[networkingv1.NetworkPolicy](t, render(t, values...), "NetworkPolicy") {
			if np.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] != "executor" {
				continue
			}
			for _, rule := range np.Spec.Egress {
				if len(rule.To) == 0 {
					t.Errorf("%s: an egress rule to every destination", np.Name)
				}
				for _, peer := range rule.To {
					if peer.IPBlock == nil {
						continue
					}
					for _, cidr := range must[peer.IPBlock.CIDR] {
						if !slices.Contains(peer.IPBlock.Except, cidr) {
							t.Errorf("%s: %s does not except %s", np.Name, peer.IPBlock.CIDR, cidr)
						}
					}
				}
			}
		}
	}
}

// The binaries accept exactly the arguments the chart renders (a flag they do not know
// fails here, not in a cluster).
func TestRenderedArgsAreAccepted(t *testing.T) {
	for _, tc := range []struct {
		values      []string
		deployments int
	}{{nil, 2}, {[]string{production}, 2}, {[]string{e2bValues}, 3}} {
		values := tc.values
		deployments := documents[appsv1.Deployment](t, render(t, values...), "Deployment")
		if len(deployments) != tc.deployments {
			t.Fatalf("%v: %d Deployments, want %d", values, len(deployments), tc.deployments)
		}
		for _, d := range deployments {
			c := d.Spec.Template.Spec.Containers[0]
			bin := map[string]string{"gateway": gatewayBin, "controller": controllerBin, "e2b": e2bBin}[c.Name]
			if bin == "" {
				t.Fatalf("container %q", c.Name)
			}
			args := make([]string, 0, len(c.Args)+1)
			for _, a := range c.Args {
				a = strings.ReplaceAll(a, "$(POD_NAMESPACE)", "execplane")
				a = strings.ReplaceAll(a, "$(POD_IP)", "10.244.1.7")
				args = append(args, strings.ReplaceAll(a, "$(POD_NAME)", "execplane-controller-0"))
			}
			out, err := exec.Command(bin, append(args, "--check-config")...).CombinedOutput()
			if err != nil {
				t.Errorf("%s %v: %v\n%s", c.Name, values, err, out)
			}
		}
	}
}

// installed is the chart applied for real (server-side apply) to the local cluster, with the
// production-like values: the release namespace, and the executor namespace the chart made.
type installed struct {
	release, executors string
	kubectl            func(args ...string) (string, error)
}

// installOptions vary an install: values files, --set values, and what to do in the cluster
// before the manifests are applied (given the release namespace).
type installOptions struct {
	values, set []string
	before      func(release string)
}

// install renders the chart into a fresh release namespace and applies it; the executor
// namespace and the cluster-scoped admission objects it creates are deleted when the test ends.
func install(t *testing.T, o installOptions) installed {
	t.Helper()
	c := clustertest.Cluster(t)
	if _, err := c.InstallCRDs(t.Context(), chartDir+"/files/crds"); err != nil {
		t.Fatal(err)
	}
	ns := clustertest.Namespace(t)
	args := []string{"template", "execplane", chartDir, "--namespace", ns, "--kube-version", kubeVersion,
		"--set", "metrics.serviceMonitor.enabled=false", // the local cluster has no Prometheus operator
		"--set", "crds.install=false"} // installed above, shared by the package's tests: never deleted by one
	for _, v := range o.values {
		args = append(args, "-f", v)
	}
	for _, v := range o.set {
		args = append(args, "--set", v)
	}
	if o.before != nil {
		o.before(ns)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	manifests := filepath.Join(t.TempDir(), "manifests.yaml")
	if err := os.WriteFile(manifests, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	in := installed{release: ns, executors: ns + "-executors", kubectl: func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(c.BinDir(), "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}}
	t.Cleanup(func() { _, _ = in.kubectl("delete", "--wait=false", "--ignore-not-found", "-f", manifests) })
	if out, err := in.kubectl("apply", "--server-side", "--field-manager=execplane-chart-test", "-f", manifests); err != nil {
		t.Fatalf("server-side apply: %v\n%s", err, out)
	}
	return in
}

// The rendered manifests applied for real; then each account's effective permissions in each
// namespace, as the API server computes them, equal the reviewed golden lists — and the
// refusals that matter are spelled out: the gateway execs only into the executor namespace,
// the controller creates Pods only there, nobody reads Secrets, executors may do nothing.
func TestEffectivePermissions(t *testing.T) {
	in := install(t, installOptions{values: []string{production}})
	ns := map[string]string{"release": in.release, "executors": in.executors}
	accounts := map[string]string{"controller": "execplane-controller", "gateway": "execplane-gateway", "executor": "execplane-executor"}
	home := map[string]string{"controller": in.release, "gateway": in.release, "executor": in.executors}
	for name, sa := range accounts {
		as := fmt.Sprintf("--as=system:serviceaccount:%s:%s", home[name], sa)
		for _, where := range []string{"release", "executors"} {
			if name == "executor" && where == "release" {
				continue
			}
			list, err := in.kubectl("auth", "can-i", "--list", "-n", ns[where], as)
			if err != nil {
				t.Fatalf("%s: can-i --list: %v\n%s", name, err, list)
			}
			got := strings.ReplaceAll(strings.ReplaceAll(list, in.executors, "EXECUTORS"), in.release, "RELEASE")
			golden.Check(t, filepath.Join("testdata", "permissions-"+name+"-"+where+".txt"), got, *update)
			for _, verb := range []string{"*", "escalate", "bind", "impersonate"} {
				if strings.Contains(got, "["+verb+"]") {
					t.Errorf("%s may %s in the %s namespace", name, verb, where)
				}
			}
		}
		// (kubectl reads "pods/exec" as a Pod named exec: the subresource is a flag.)
		denied := [][]string{
			{"create", "pods", "--subresource=exec", "-n", in.release},
			{"create", "pods", "--subresource=exec", "-n", "default"},
			{"create", "pods", "--subresource=exec", "--all-namespaces"},
			{"create", "pods", "-n", in.release},
			{"list", "secrets", "-n", in.release},
			{"get", "secrets", "-n", in.release},
			{"list", "secrets", "-n", in.executors},
			{"list", "executionenvironments.execution.mecatl.dev", "-n", "default"},
			{"list", "executionenvironments.execution.mecatl.dev", "-n", in.release},
		}
		if name != "gateway" {
			denied = append(denied, []string{"create", "pods", "--subresource=exec", "-n", in.executors})
		} else if out, _ := in.kubectl("auth", "can-i", "create", "pods", "--subresource=exec", "-n", in.executors, as); strings.TrimSpace(out) != "yes" {
			t.Errorf("the gateway cannot exec into executor Pods: %q", out)
		}
		// Endpoints are published in the release namespace only, by the controller only, and
		// the only slice it may change is the control API Service's (docs/controller.md
		// "Reaching the leader").
		denied = append(denied, []string{"create", "endpointslices.discovery.k8s.io", "-n", in.executors},
			[]string{"update", "endpointslices.discovery.k8s.io/execplane-gateway-x7k2p", "-n", in.release},
			[]string{"update", "endpoints/execplane-gateway", "-n", in.release})
		if name != "controller" {
			// Only the controller writes the high-water mark; gateways read it.
			denied = append(denied, []string{"create", "pods", "-n", in.executors},
				[]string{"update", "configmaps/execplane-security-high-water", "-n", in.release},
				[]string{"create", "endpointslices.discovery.k8s.io", "-n", in.release},
				[]string{"update", "endpointslices.discovery.k8s.io/execplane-controller", "-n", in.release})
		} else if out, _ := in.kubectl("auth", "can-i", "update", "endpointslices.discovery.k8s.io/execplane-controller", "-n", in.release, as); strings.TrimSpace(out) != "yes" {
			t.Errorf("the controller cannot publish the leader's endpoint: %q", out)
		}
		for _, d := range denied {
			out, err := in.kubectl(append(append([]string{"auth", "can-i"}, d...), as)...)
			if strings.TrimSpace(out) != "no" || err == nil {
				t.Errorf("%s: can-i %v = %q, want no", name, d, strings.TrimSpace(out))
			}
		}
	}
}

// devCommand is the development stack's tool (docs/development.md): built for make demo and
// the tests, never into an image.
const devCommand = "execplane-dev"

// The images the chart names exist as targets of deploy/images/Dockerfile, build every
// binary, put the helper where profiles and the chart expect it, and run as the non-root
// user the Pods require. (No container runtime here: this reads the Dockerfile.)
func TestImagesMatchTheChart(t *testing.T) {
	data, err := os.ReadFile("../../deploy/images/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(data)
	targets := map[string]bool{}
	for line := range strings.SplitSeq(df, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "FROM" && strings.EqualFold(f[2], "AS") {
			targets[f[3]] = true
		}
	}
	r := render(t, e2bValues)
	for _, name := range []string{"gateway", "controller", "e2b"} {
		if !targets[name] {
			t.Errorf("no %s target", name)
		}
		if !strings.Contains(r, "image: ghcr.io/execplane/"+name+":") {
			t.Errorf("the chart does not run the %s image", name)
		}
	}
	for _, want := range []string{"AS helper", "/out/helper /execplane/helper", `ENTRYPOINT ["/execplane/helper"]`, "USER 65532:65532",
		`ENTRYPOINT ["/execplane/helper", "--pause"]`} {
		if !strings.Contains(df, want) {
			t.Errorf("the Dockerfile lacks %q", want)
		}
	}
	if !strings.Contains(r, "--helper-path=/execplane/helper") {
		t.Error("the chart's helper path differs from the helper image's")
	}
	// The images are built with the Go release the Makefile builds and tests with.
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	toolchain := regexp.MustCompile(`(?m)^export GOTOOLCHAIN := go(\S+)$`).FindSubmatch(makefile)
	if toolchain == nil || !strings.Contains(df, "ARG GO_VERSION="+string(toolchain[1])+"\n") {
		t.Errorf("the Dockerfile's GO_VERSION is not the Makefile's toolchain %q", toolchain)
	}
	cmds, err := os.ReadDir("../../cmd")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		built := strings.Contains(df, " "+c.Name()+" ") || strings.Contains(df, " "+c.Name()+";")
		switch {
		case c.Name() == devCommand && built:
			t.Errorf("the Dockerfile builds cmd/%s, the development stack's tool: no image carries it", c.Name())
		case c.Name() != devCommand && !built:
			t.Errorf("the Dockerfile does not build cmd/%s", c.Name())
		}
	}
}

// The security material's high-water mark survives a reinstall: rendered against the cluster
// (lookups answered by the API server, as an install renders), the chart carries the mark's
// pre-install hook into a namespace without one, and leaves a mark that an uninstall kept
// (generation 5) out — Helm would otherwise delete and recreate the hook at generation 0.
func TestHighWaterMarkSurvivesAReinstall(t *testing.T) {
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	const mark = "execplane-security-high-water"
	renderInto := func() string {
		t.Helper()
		out, err := helm(t, "template", "execplane", chartDir, "--namespace", ns, "--dry-run=server", "--kubeconfig", c.Kubeconfig(), "--kube-version", kubeVersion,
			"--set", "metrics.serviceMonitor.enabled=false", "--set", "crds.install=false", "--show-only", "templates/configmaps.yaml")
		if err != nil {
			t.Fatalf("helm template --dry-run=server: %v\n%s", err, out)
		}
		return out
	}
	if out := renderInto(); !strings.Contains(out, "name: "+mark) || !strings.Contains(out, "helm.sh/hook: pre-install") {
		t.Fatalf("a first install does not create the mark:\n%s", out)
	}
	kept := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: mark, Namespace: ns}, Data: map[string]string{"generation": "5", "digest": "sha256:kept"}}
	if _, err := c.Kube().CoreV1().ConfigMaps(ns).Create(t.Context(), kept, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out := renderInto(); strings.Contains(out, "name: "+mark) {
		t.Fatalf("a reinstall over a kept mark renders it again (Helm would reset it to generation 0):\n%s", out)
	}
}
