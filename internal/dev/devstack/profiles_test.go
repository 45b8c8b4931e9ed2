package devstack

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/pkg/profile"
)

// The stack's profiles file loads as the controller and gateway load it: the sandbox
// profile, on the real node with the Debian executor image and its placement.
func TestDemoProfilesLoad(t *testing.T) {
	for _, node := range []string{NodeReal, NodeKWOK} {
		b, err := demoProfiles(node)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "profiles.yaml")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := profile.LoadProfiles(path)
		if err != nil {
			t.Fatalf("%s: %v\n%s", node, err, b)
		}
		e, ok := r.Get(DemoProfile)
		if !ok {
			t.Fatalf("%s: no %s profile", node, DemoProfile)
		}
		p := e.Spec
		onReal := p.NodeSelector[devcluster.RealNodeLabel] == "true" && len(p.Tolerations) == 1
		if (node == NodeReal) != onReal || (node == NodeReal) != (p.Image == devimage.DebianExecutorRef) {
			t.Errorf("%s: image %s, node selector %v, tolerations %v", node, p.Image, p.NodeSelector, p.Tolerations)
		}
	}
}
