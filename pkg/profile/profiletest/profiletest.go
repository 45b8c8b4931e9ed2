// Package profiletest is the profile the integration tests build environments from: one
// definition, so that tests of the controller, the store, the control API and the gateway
// agree on it.
package profiletest

import (
	"fmt"
	"testing"

	"github.com/execplane/execplane/pkg/profile"
)

// Name is the test profile's name.
const Name = "python"

// YAML is a profiles file with the test profile at the given capacity: small requests on the
// KWOK nodes, the local cluster's kwok-volume StorageClass.
func YAML(maxEnvironments int) string {
	return fmt.Sprintf(`profiles:
  %s:
    image: registry.example/python:3.13
    storageClass: kwok-volume
    storageSize: 1Gi
    memoryLimit: 64Mi
    tmpSizeLimit: 16Mi
    maxFileBytes: 1048576
    maxCommandBytes: 65536
    maxCommandDuration: 5m
    maxEnvironments: %d
`, Name, maxEnvironments)
}

// Registry parses yaml, binds the namespace's "default" ServiceAccount as the executor's,
// and returns it with the test profile's entry (zero when yaml lacks it).
func Registry(t testing.TB, yaml string) (*profile.Registry, profile.Entry) {
	t.Helper()
	reg, err := profile.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if reg, err = reg.WithExecutorServiceAccount("default"); err != nil {
		t.Fatal(err)
	}
	entry, _ := reg.Get(Name)
	return reg, entry
}
