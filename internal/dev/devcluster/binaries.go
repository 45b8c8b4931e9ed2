package devcluster

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// BinEnv names the environment variable that points at a directory holding the cluster's
// binaries (as built by hack/build-cluster-bins.sh). The Makefile sets it; when it is unset,
// the binaries are located (and built on first use) by running that script.
const BinEnv = "EXECPLANE_CLUSTER_BIN"

// binaryNames are the programs every cluster runs (hack/build-cluster-bins.sh core); KWOK
// runs the fake nodes (its part kwok). kubectl (its part kubectl) is for people and
// devdeploy, not for Start.
var binaryNames = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// kwokName is KWOK's program.
const kwokName = "kwok"

// stageFiles are the KWOK stages the cluster uses, copied beside the binaries by the build
// script from the pinned KWOK module: node initialisation and lease heartbeats, Pod
// readiness, completion and deletion, and PVC provisioning and binding.
var stageFiles = []string{
	"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete",
	"pvc-provision", "pv-bind", "pvc-delete", "pv-delete",
}

// ownStages replace KWOK's pod-delete stage with the kubelet's two steps: report the
// terminal phase, then delete (held by finalizers), so that the executor's termination can be
// observed before the Pod goes.
//
//go:embed stages/*.yaml
var ownStages embed.FS

// ErrBinariesMissing is returned when the bin directory is incomplete.
var ErrBinariesMissing = errors.New("local cluster binaries missing")

// FindBinaries returns the directory holding the cluster's binaries: $EXECPLANE_CLUSTER_BIN
// when set, otherwise the output of hack/build-cluster-bins.sh (which builds them once, cached
// by version): its parts core and kubectl (tests run it), and kwok too for a cluster with
// fake nodes. make demo sets the variable to a directory of the core alone.
func FindBinaries(ctx context.Context, fakeNodes bool) (string, error) {
	args := []string{"core", "kubectl"}
	if fakeNodes {
		args = append(args, "kwok")
	}
	dir, err := BinaryDir(ctx, BinEnv, "build-cluster-bins.sh", "the local cluster binaries", args...)
	if err != nil {
		return "", err
	}
	return dir, checkBinaries(dir, fakeNodes)
}

// BinaryDir is $env when set, otherwise the directory hack/<script> prints (building the
// binaries once, cached by version).
func BinaryDir(ctx context.Context, env, script, what string, args ...string) (string, error) {
	if dir := os.Getenv(env); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", script), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", what, err)
	}
	return strings.TrimSpace(out.String()), nil
}

// checkBinaries fails naming what dir lacks: the core programs, and KWOK with its stages for
// fake nodes.
func checkBinaries(dir string, fakeNodes bool) error {
	var missing []string
	names := binaryNames
	if fakeNodes {
		names = append(slices.Clone(names), kwokName)
	}
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			missing = append(missing, name)
		}
	}
	if fakeNodes {
		for _, name := range stageFiles {
			if _, err := os.Stat(filepath.Join(dir, "kwok-stages", name+".yaml")); err != nil {
				missing = append(missing, "kwok-stages/"+name+".yaml")
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w in %s: %v (run hack/build-cluster-bins.sh)", ErrBinariesMissing, dir, missing)
	}
	return nil
}

// RepoRoot finds the project's root: the nearest directory above the working directory
// whose go.mod declares the execplane module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/execplane/execplane\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the execplane repository (no go.mod for github.com/execplane/execplane above the working directory)")
		}
		dir = parent
	}
}
