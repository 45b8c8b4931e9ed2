package chart_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

const (
	crdFile = "execution.mecatl.dev_executionenvironments.yaml"
	crdName = "executionenvironments.execution.mecatl.dev"
	// addedField is the optional field a later version of the resource adds (the tests
	// write it into a copy of the CRD).
	addedField = "addedLater"
)

var environments = schema.GroupVersionResource{Group: v1alpha1.GroupName, Version: "v1alpha1", Resource: "executionenvironments"}

// readCRD decodes a CRD manifest (the generated file, or one document of a render).
func readCRD(t *testing.T, data []byte) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(string(data), "---\n")), &crd); err != nil {
		t.Fatalf("decoding the CRD: %v", err)
	}
	return &crd
}

// The template renders exactly the generated CRD — its spec compared field by field after
// the round trip through Helm's fromYaml and toYaml — with the chart's labels and, under
// crds.keep, helm.sh/resource-policy: keep; crds.install=false renders none.
func TestCRDTemplate(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir, "files", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated CRDs: %v", err)
	}
	for _, keep := range []bool{true, false} {
		out, err := helm(t, "template", "execplane", chartDir, "--namespace", "execplane", "--kube-version", kubeVersion,
			"--show-only", "templates/crd.yaml", "--set", "crds.keep="+map[bool]string{true: "true", false: "false"}[keep])
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, out)
		}
		rendered := map[string]*apiextensionsv1.CustomResourceDefinition{}
		for _, doc := range strings.Split(out, "\n---\n") {
			if i := strings.Index(doc, "apiVersion:"); i >= 0 {
				crd := readCRD(t, []byte(doc[i:]))
				rendered[crd.Name] = crd
			}
		}
		if len(rendered) != len(files) {
			t.Errorf("keep=%v: %d CRDs rendered, %d generated", keep, len(rendered), len(files))
		}
		for _, f := range files {
			generated, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want := readCRD(t, generated)
			got := rendered[want.Name]
			if got == nil {
				t.Errorf("keep=%v: %s not rendered", keep, want.Name)
				continue
			}
			if diff := cmp.Diff(want.Spec, got.Spec); diff != "" {
				t.Errorf("keep=%v: the rendered %s's spec differs from the generated one (-generated +rendered):\n%s", keep, want.Name, diff)
			}
			if got.Labels["app.kubernetes.io/name"] != "execplane" || got.Labels["app.kubernetes.io/managed-by"] != "Helm" {
				t.Errorf("keep=%v: metadata %+v", keep, got.ObjectMeta)
			}
			if policy := got.Annotations["helm.sh/resource-policy"]; (policy == "keep") != keep {
				t.Errorf("keep=%v: helm.sh/resource-policy %q", keep, policy)
			}
		}
	}
	out, err := helm(t, "template", "execplane", chartDir, "--namespace", "execplane", "--kube-version", kubeVersion, "--set", "crds.install=false")
	if err != nil || strings.Contains(out, "CustomResourceDefinition") {
		t.Errorf("crds.install=false still renders a CRD (%v)", err)
	}
}

// A field a later release adds to the resource survives helm upgrade with the CRD as a
// template, and is pruned with the CRD in crds/ as the chart shipped it until 0.1.x (the
// negative case: Helm never upgrades crds/). The upgrade from such a release takes over the
// CRD Helm did not record as the release's (--take-ownership; refused without it). Uninstall
// keeps it. On a cluster of its own: the CRD is cluster-wide.
func TestCRDUpgradesWithTheChart(t *testing.T) {
	ctx := clustertest.Context(t, 5*time.Minute)
	c, err := devcluster.Start(ctx, devcluster.Options{StateDir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	kubeconfig := c.Kubeconfig()
	run := func(args ...string) (string, error) {
		return helm(t, append(args, "--kubeconfig", kubeconfig, "--namespace", "crd-test")...)
	}
	dir := t.TempDir()
	// The chart as 0.1.x shipped the CRD (in crds/, no template); then the same with the
	// added field; then the template with it.
	old := chartCopy(t, dir, "old", false, false)
	oldAdded := chartCopy(t, dir, "old-added", false, true)
	added := chartCopy(t, dir, "added", true, true)

	if out, err := run("install", "execplane", old, "--create-namespace"); err != nil {
		t.Fatalf("install 0.1.x: %v\n%s", err, out)
	}
	dyn := dynamic.NewForConfigOrDie(c.RESTConfig())
	if err := createWithAddedField(ctx, dyn, "before"); err != nil {
		t.Fatal(err)
	}
	if kept := addedFieldOf(t, ctx, dyn, "before"); kept {
		t.Fatal("the field was kept before any upgrade: the test's CRD already has it")
	}

	// Negative: the old layout's upgrade leaves the CRD as it was, and the field is pruned.
	if out, err := run("upgrade", "execplane", oldAdded); err != nil {
		t.Fatalf("upgrade within 0.1.x: %v\n%s", err, out)
	}
	if err := createWithAddedField(ctx, dyn, "old-layout"); err != nil {
		t.Fatal(err)
	}
	if addedFieldOf(t, ctx, dyn, "old-layout") {
		t.Error("the field survived an upgrade of a chart with the CRD in crds/: the negative case no longer holds")
	}

	// The template: refused without taking ownership of the CRD 0.1.x installed, then
	// upgraded with it; the field survives.
	if out, err := run("upgrade", "execplane", added); err == nil || !strings.Contains(out, "invalid ownership metadata") {
		t.Errorf("the upgrade took over the CRD without --take-ownership: %v\n%s", err, out)
	}
	if out, err := run("upgrade", "execplane", added, "--take-ownership"); err != nil {
		t.Fatalf("upgrade to the template: %v\n%s", err, out)
	}
	if err := createWithAddedField(ctx, dyn, "template"); err != nil {
		t.Fatal(err)
	}
	if !addedFieldOf(t, ctx, dyn, "template") {
		t.Error("the field was pruned after the upgrade to the CRD template")
	}
	ext := apiextensionsclient.NewForConfigOrDie(c.RESTConfig())
	crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if crd.Annotations["meta.helm.sh/release-name"] != "execplane" || crd.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the CRD's annotations after the upgrade: %v", crd.Annotations)
	}

	// Uninstalled, the release leaves the CRD and the environments.
	if out, err := run("uninstall", "execplane", "--wait"); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{}); err != nil {
		t.Errorf("the CRD did not survive the uninstall: %v", err)
	}
	if !addedFieldOf(t, ctx, dyn, "template") {
		t.Error("an environment did not survive the uninstall")
	}
}

// chartCopy copies the chart to dir/name: with the CRD as a template (asTemplate) or in
// crds/ as 0.1.x had it, with or without the added optional field.
func chartCopy(t *testing.T, dir, name string, asTemplate, withField bool) string {
	t.Helper()
	dst := filepath.Join(dir, name)
	if err := os.CopyFS(dst, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	generated := filepath.Join(dst, "files", "crds", crdFile)
	data, err := os.ReadFile(generated)
	if err != nil {
		t.Fatal(err)
	}
	if withField {
		crd := readCRD(t, data)
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		spec.Properties[addedField] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		if data, err = yaml.Marshal(crd); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(generated, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if !asTemplate {
		if err := os.Rename(filepath.Join(dst, "files", "crds"), filepath.Join(dst, "crds")); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dst, "templates", "crd.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// createWithAddedField creates an environment whose spec sets the added field.
func createWithAddedField(ctx context.Context, dyn dynamic.Interface, name string) error {
	env := &v1alpha1.ExecutionEnvironment{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "ExecutionEnvironment"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ExecutionEnvironmentSpec{
			SchemaVersion: 1, OwnerHash: strings.Repeat("ab", 32), ClientHash: strings.Repeat("cd", 32), BindingID: "binding-" + name,
			RequestFingerprint: strings.Repeat("ef", 32), Profile: "python", ProfileDigest: "sha256:" + strings.Repeat("01", 32),
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(env)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: obj}
	delete(u.Object, "status")
	if err := unstructured.SetNestedField(u.Object, "a value of a later release", "spec", addedField); err != nil {
		return err
	}
	_, err = dyn.Resource(environments).Namespace("crd-test").Create(ctx, u, metav1.CreateOptions{})
	return err
}

// addedFieldOf reports whether the stored environment kept the added field.
func addedFieldOf(t *testing.T, ctx context.Context, dyn dynamic.Interface, name string) bool {
	t.Helper()
	u, err := dyn.Resource(environments).Namespace("crd-test").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, found, _ := unstructured.NestedString(u.Object, "spec", addedField)
	return found
}
