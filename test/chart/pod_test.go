package chart_test

import (
	"maps"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// podValues sets every Pod metadata and scheduling value of both Deployments (the pod.yaml
// golden).
const podValues = "testdata/pod-values.yaml"

// podSettings are one component's Pod metadata and scheduling values.
type podSettings struct {
	PodAnnotations            map[string]string                 `json:"podAnnotations"`
	PodLabels                 map[string]string                 `json:"podLabels"`
	PriorityClassName         string                            `json:"priorityClassName"`
	NodeSelector              map[string]string                 `json:"nodeSelector"`
	Tolerations               []corev1.Toleration               `json:"tolerations"`
	Affinity                  *corev1.Affinity                  `json:"affinity"`
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints"`
}

// deploymentsByComponent renders the chart and returns its Deployments by container name.
func deploymentsByComponent(t *testing.T, values ...string) map[string]appsv1.Deployment {
	t.Helper()
	out := map[string]appsv1.Deployment{}
	for _, d := range documents[appsv1.Deployment](t, render(t, values...), "Deployment") {
		out[d.Spec.Template.Spec.Containers[0].Name] = d
	}
	if len(out) != 2 {
		t.Fatalf("Deployments of %d components, want the controller's and the gateway's", len(out))
	}
	return out
}

// Each Deployment's Pods carry exactly what the component's values ask for, on top of the
// chart's own metadata, which stays: the selector and the chart's labels are the defaults',
// podAnnotations add to the chart's checksum without replacing it, and a topology spread
// constraint without a labelSelector counts the component's own Pods. With the defaults none
// of it renders.
func TestPodValuesReachBothDeployments(t *testing.T) {
	data, err := os.ReadFile(podValues)
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]podSettings
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	defaults, set := deploymentsByComponent(t), deploymentsByComponent(t, podValues)
	for _, c := range []string{"controller", "gateway"} {
		v, def, got := values[c], defaults[c], set[c]
		if v.PriorityClassName == "" || len(v.PodAnnotations) == 0 || len(v.PodLabels) == 0 || len(v.NodeSelector) == 0 ||
			len(v.Tolerations) == 0 || v.Affinity == nil || len(v.TopologySpreadConstraints) == 0 {
			t.Fatalf("%s: %s leaves a value unset: %+v", c, podValues, v)
		}
		// (The defaults' affinity is the chart's: replicas prefer distinct nodes.)
		if diff := cmp.Diff(podSettings{Affinity: def.Spec.Template.Spec.Affinity}, podSettingsOf(def.Spec.Template.Spec)); diff != "" {
			t.Errorf("%s: the defaults render scheduling fields (-none +rendered):\n%s", c, diff)
		}
		if diff := cmp.Diff(def.Spec.Selector, got.Spec.Selector); diff != "" {
			t.Errorf("%s: the selector changed (-default +set):\n%s", c, diff)
		}

		wantLabels := maps.Clone(v.PodLabels)
		maps.Copy(wantLabels, def.Spec.Template.Labels)
		if diff := cmp.Diff(wantLabels, got.Spec.Template.Labels); diff != "" {
			t.Errorf("%s: Pod labels (-want +got):\n%s", c, diff)
		}
		// The chart's keys win (the values file sets checksum/profiles too).
		wantAnnotations := maps.Clone(v.PodAnnotations)
		maps.Copy(wantAnnotations, def.Spec.Template.Annotations)
		if diff := cmp.Diff(wantAnnotations, got.Spec.Template.Annotations); diff != "" {
			t.Errorf("%s: Pod annotations (-want +got):\n%s", c, diff)
		}

		want := v
		want.PodAnnotations, want.PodLabels = nil, nil
		want.TopologySpreadConstraints = nil
		for _, tsc := range v.TopologySpreadConstraints {
			if tsc.LabelSelector == nil {
				tsc.LabelSelector = &metav1.LabelSelector{MatchLabels: def.Spec.Selector.MatchLabels}
			}
			want.TopologySpreadConstraints = append(want.TopologySpreadConstraints, tsc)
		}
		if diff := cmp.Diff(want, podSettingsOf(got.Spec.Template.Spec)); diff != "" {
			t.Errorf("%s: Pod scheduling (-want +got):\n%s", c, diff)
		}
	}
}

// podSettingsOf is the scheduling part of a Pod spec.
func podSettingsOf(spec corev1.PodSpec) podSettings {
	return podSettings{PriorityClassName: spec.PriorityClassName, NodeSelector: spec.NodeSelector, Tolerations: spec.Tolerations,
		Affinity: spec.Affinity, TopologySpreadConstraints: spec.TopologySpreadConstraints}
}

// A podLabels key the chart sets on the Pods itself fails the render, saying which: the
// Deployment, Service, PodDisruptionBudget and NetworkPolicies select the Pods by them.
func TestPodLabelsCannotReplaceTheChartsLabels(t *testing.T) {
	for c, d := range deploymentsByComponent(t) {
		for key := range d.Spec.Template.Labels {
			set := c + ".podLabels." + strings.ReplaceAll(key, ".", `\.`) + "=x"
			out, err := helm(t, "template", "execplane", chartDir, "--kube-version", kubeVersion, "--set", set)
			if want := c + `.podLabels: "` + key + `" is one of the chart's own labels`; err == nil || !strings.Contains(out, want) {
				t.Errorf("--set %s: err %v, want a refusal containing %q:\n%s", set, err, want, out)
			}
		}
	}
}
