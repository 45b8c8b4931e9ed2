package chart_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The controller's Deployment rolls to completion and its Pods can be drained: the control
// API's Service has no selector (the leader publishes its own endpoint, with the Pod IP and
// the Service's name the chart passes it), every replica is scraped through a Service of its
// own, a rollout adds a Pod before it removes one, and the budget lets one replica — the
// leader too — be evicted.
func TestControllerRollsAndDrains(t *testing.T) {
	for _, values := range [][]string{nil, {production}} {
		r := render(t, values...)
		services := map[string]corev1.Service{}
		for _, s := range documents[corev1.Service](t, r, "Service") {
			services[s.Name] = s
		}
		control, ok := services["execplane-controller"]
		if !ok {
			t.Fatalf("%v: no controller Service", values)
		}
		if control.Spec.Selector != nil {
			t.Errorf("%v: the control API's Service selects Pods %v: readiness would route, not the leader", values, control.Spec.Selector)
		}
		if diff := cmp.Diff([]corev1.ServicePort{{Name: "control", Port: 9443, TargetPort: intstr.FromInt32(9443)}}, control.Spec.Ports); diff != "" {
			t.Errorf("%v: the control Service's ports (-want +got):\n%s", values, diff)
		}
		diag, ok := services["execplane-controller-diagnostics"]
		if !ok || diag.Spec.Selector["app.kubernetes.io/component"] != "controller" || !diag.Spec.PublishNotReadyAddresses ||
			len(diag.Spec.Ports) != 1 || diag.Spec.Ports[0].Name != "diagnostics" {
			t.Errorf("%v: no Service of every replica's diagnostics port: %+v", values, diag)
		}
		// The ServiceMonitor scrapes the port named diagnostics of the component's Services:
		// only the diagnostics Service has one, so each replica is scraped once.
		for name, s := range services {
			for _, p := range s.Spec.Ports {
				if p.Name == "diagnostics" && s.Labels["app.kubernetes.io/component"] == "controller" && name != diag.Name {
					t.Errorf("%v: %s also serves the controller's diagnostics port", values, name)
				}
			}
		}

		var controller *appsv1.Deployment
		for _, d := range documents[appsv1.Deployment](t, r, "Deployment") {
			if d.Spec.Template.Spec.Containers[0].Name == "controller" {
				controller = &d
			}
		}
		if controller == nil {
			t.Fatalf("%v: no controller Deployment", values)
		}
		want := appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}}
		if diff := cmp.Diff(want, controller.Spec.Strategy); diff != "" {
			t.Errorf("%v: the rollout (-want +got):\n%s", values, diff)
		}
		if controller.Spec.MinReadySeconds <= 0 {
			t.Errorf("%v: minReadySeconds %d", values, controller.Spec.MinReadySeconds)
		}
		c := controller.Spec.Template.Spec.Containers[0]
		podIP := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
		})
		if podIP < 0 {
			t.Errorf("%v: no POD_IP from the downward API: %+v", values, c.Env)
		}
		for _, arg := range []string{"--leader-service=execplane-controller", "--advertise-address=$(POD_IP)", "--pod-name=$(POD_NAME)"} {
			if !slices.Contains(c.Args, arg) {
				t.Errorf("%v: the controller is not given %s", values, arg)
			}
		}

		pdbs := documents[policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget")
		i := slices.IndexFunc(pdbs, func(p policyv1.PodDisruptionBudget) bool { return p.Name == "execplane-controller" })
		if i < 0 {
			t.Fatalf("%v: no controller PodDisruptionBudget", values)
		}
		pdb := pdbs[i]
		replicas := int(ptr.Deref(controller.Spec.Replicas, 1))
		allowed := 0
		if mu := pdb.Spec.MaxUnavailable; mu != nil && pdb.Spec.MinAvailable == nil {
			allowed, _ = intstr.GetScaledValueFromIntOrPercent(mu, replicas, true)
		}
		if allowed < 1 {
			t.Errorf("%v: the budget allows %d disruptions of %d ready replicas: %+v", values, allowed, replicas, pdb.Spec)
		}
		if p := pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
			t.Errorf("%v: an unready replica can block a drain: %v", values, p)
		}
	}
}

// The schema refuses a controller budget that allows no disruption, and a negative
// minReadySeconds.
func TestSchemaRefusesABudgetWithoutDisruptions(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"controller.podDisruptionBudget.maxUnavailable=0", "/controller/podDisruptionBudget"},
		{"controller.podDisruptionBudget.maxUnavailable=0%", "/controller/podDisruptionBudget"},
		{"controller.podDisruptionBudget.maxUnavailable=one", "/controller/podDisruptionBudget"},
		{"controller.minReadySeconds=-1", "/controller/minReadySeconds"},
	} {
		out, err := helm(t, "template", "execplane", chartDir, "--kube-version", kubeVersion, "--set", tc.set)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: err %v, want a refusal containing %q:\n%s", tc.set, err, tc.want, out)
		}
	}
	for _, ok := range []string{"controller.podDisruptionBudget.maxUnavailable=50%", "controller.podDisruptionBudget.maxUnavailable=2"} {
		if out, err := helm(t, "template", "execplane", chartDir, "--kube-version", kubeVersion, "--set", ok); err != nil {
			t.Errorf("--set %s refused: %v\n%s", ok, err, out)
		}
	}
}

// Publishing the leader's endpoint takes endpoint permissions in the release namespace only,
// for the controller only; its slice is the only one it may read by name or change, and the
// core Endpoints object it may only delete (the leftover of a Service with a selector).
func TestOnlyTheControllerPublishesEndpoints(t *testing.T) {
	for _, values := range [][]string{nil, {production}} {
		for _, role := range documents[rbacv1.Role](t, render(t, values...), "Role") {
			for _, rule := range role.Rules {
				endpoints := slices.ContainsFunc(rule.Resources, func(r string) bool {
					return r == "endpointslices" || r == "endpoints" || r == "services"
				})
				if !endpoints {
					continue
				}
				if role.Name != "execplane-controller-leader" || role.Namespace != "execplane" {
					t.Errorf("%v: %s (namespace %s) has %v on %v", values, role.Name, role.Namespace, rule.Verbs, rule.Resources)
					continue
				}
				named := slices.Equal(rule.ResourceNames, []string{"execplane-controller"})
				for _, verb := range rule.Verbs {
					if (verb == "get" || verb == "update" || verb == "patch") && !named {
						t.Errorf("%v: %s on %v beyond the Service's own slice: %v", values, verb, rule.Resources, rule.ResourceNames)
					}
				}
				if slices.Contains(rule.Resources, "endpoints") && !slices.Equal(rule.Verbs, []string{"delete"}) {
					t.Errorf("%v: Endpoints verbs %v, want delete only", values, rule.Verbs)
				}
			}
		}
	}
}
