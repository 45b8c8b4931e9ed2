package kube

import "testing"

func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/ns/pods/p-x0":                                                  "pods",
		"/api/v1/namespaces/ns/pods/p-x0/exec":                                             "pods",
		"/api/v1/namespaces/ns/persistentvolumeclaims":                                     "persistentvolumeclaims",
		"/apis/execution.mecatl.dev/v1alpha1/namespaces/ns/executionenvironments/e/status": "executionenvironments",
		"/apis/coordination.k8s.io/v1/namespaces/ns/leases/execplane-controller":           "leases",
		"/api/v1/namespaces/ns/events":                                                     "events",
		"/api/v1/namespaces":                                                               "other",
		"/api/v1/nodes":                                                                    "other",
		"/apis/apps/v1/namespaces/ns/deployments":                                          "other",
		"/healthz": "other",
		"":         "other",
	} {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}
