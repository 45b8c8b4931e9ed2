// Command fork measures how long a caller waits for a fork of a workspace on the real node
// (kubelet, containerd, runc) — CreateSnapshot of an environment holding -mib MiB, then
// EnsureEnvironment from it until Ready (the Go SDK's Environment.Fork) — by both snapshot
// methods, beside Ensure cold and warm measured in the same run on the same node:
//
//   - fork, copy: the snapshot a copy Pod's mirror of the quiesced workspace into a claim of
//     its own; the fork's claim filled by a second copy Pod before its executor starts;
//   - fork, csi: the snapshot a VolumeSnapshot of the local cluster's host-path CSI driver
//     (a full directory copy, not copy-on-write: no reference for a cloud driver); the
//     fork's claim provisioned from it;
//   - cold: EnsureEnvironment of a new binding until Ready, on each method's storage;
//   - warm: EnsureEnvironment of a new binding of a profile with a warm pool until Ready.
//
// Samples alternate between the sides; every figure is a p50 and the forks are also given
// as ratios against cold Ensure on the same storage. Each fork and its snapshot are
// deleted before the next sample.
//
//	go run ./bench/fork        (or: make bench-fork)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/dev/devsystem"
	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/pkg/client"
)

// Profiles: one per storage, and one with a warm pool.
const (
	profileCopy   = "copy"
	profileCSI    = "csi"
	profilePooled = "pooled"
	poolSize      = 3
)

func profilesYAML() string {
	shape := func(name, class, extra string) string {
		return fmt.Sprintf(`  %s:
    image: %s
    storageClass: %s
    storageSize: 1Gi
    memoryLimit: 256Mi
    tmpSizeLimit: 16Mi
    maxFileBytes: 1048576
    maxCommandBytes: 65536
    maxCommandDuration: 5m
    maxEnvironments: 100
%s%s`, name, devimage.ExecutorRef, class, extra, devcluster.RealNodePlacement)
	}
	return "profiles:\n" + shape(profileCopy, devcluster.StorageClassName, "    snapshots:\n      method: copy\n") +
		shape(profileCSI, devcluster.CSIStorageClassName, "    snapshots:\n      volumeSnapshotClassName: "+devcluster.CSISnapshotClassName+"\n") +
		shape(profilePooled, devcluster.StorageClassName, fmt.Sprintf("    warmPool:\n      size: %d\n", poolSize))
}

type options struct {
	n, mib                      int
	pause                       string
	controller, gateway, helper string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench/fork:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return err
	}
	var o options
	fs := flag.NewFlagSet("bench/fork", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 10, "samples per side")
	fs.IntVar(&o.mib, "mib", 100, "the source workspace's size in MiB (files of 1 MiB)")
	fs.StringVar(&o.pause, "pause", filepath.Join(root, "bin/pause"), "the real node's sandbox binary (make bin/pause)")
	fs.StringVar(&o.controller, "controller", filepath.Join(root, "bin/controller"), "controller binary (make build)")
	fs.StringVar(&o.gateway, "gateway", filepath.Join(root, "bin/gateway"), "gateway binary (make build)")
	fs.StringVar(&o.helper, "helper", filepath.Join(root, "bin/helper"), "static helper binary (make build)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, bin := range []string{o.controller, o.gateway, o.helper, o.pause} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%w (run make build bin/pause first)", err)
		}
	}
	dir, err := os.MkdirTemp("", "bench-fork-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	archive := filepath.Join(dir, "images.tar")
	if err := devimage.WriteStack(archive, devimage.Binaries{Helper: o.helper, Pause: o.pause, Busybox: devimage.BusyboxPath}); err != nil {
		return err
	}
	logf("starting the local cluster with the real node and its CSI driver")
	c, err := devcluster.Start(ctx, devcluster.Options{StateDir: filepath.Join(dir, "cluster"),
		ImageFiles: map[string]string{devcluster.HelperImagePath: o.helper},
		RealNode:   &devcluster.RealNodeOptions{Images: archive, SandboxImage: devimage.PauseRef, CSI: true}})
	if err != nil {
		return err
	}
	defer c.Stop()
	if _, err := c.InstallCRDs(ctx, filepath.Join(root, "deploy/helm/execplane/files/crds")); err != nil {
		return err
	}
	ns, err := c.CreateNamespace(ctx, "bench")
	if err != nil {
		return err
	}
	sys, err := devsystem.Start(ctx, devsystem.Options{Kubeconfig: c.Kubeconfig(), Namespace: ns, Dir: filepath.Join(dir, "system"),
		ControllerBin: o.controller, GatewayBin: o.gateway, Gateways: 1, HelperPath: devcluster.HelperImagePath,
		Profiles: []byte(profilesYAML())})
	if err != nil {
		return err
	}
	defer sys.Stop()
	if err := sys.WaitReady(ctx, time.Minute); err != nil {
		return err
	}
	conn, err := sys.Dial(devsystem.Caller, 0)
	if err != nil {
		return err
	}
	defer conn.Close()
	b := &bench{sdk: client.NewFromConn(conn, client.Config{}), owner: client.Owner{Issuer: "https://idp.example", Subject: "bench"},
		kube: c.Kube(), ns: sys.ExecutorNamespace()}

	sources := map[string]*client.Environment{}
	for _, p := range []string{profileCopy, profileCSI} {
		logf("writing %d MiB into the %s source", o.mib, p)
		if sources[p], err = b.source(ctx, p, o.mib); err != nil {
			return err
		}
	}
	logf("measuring %d samples per side", o.n)
	sides := []struct {
		name string
		f    func(i int) (time.Duration, error)
	}{
		{"fork (copy)", func(i int) (time.Duration, error) { return b.fork(ctx, sources[profileCopy], profileCopy, i) }},
		{"fork (csi)", func(i int) (time.Duration, error) { return b.fork(ctx, sources[profileCSI], profileCSI, i) }},
		{"cold (copy's storage)", func(i int) (time.Duration, error) { return b.ensure(ctx, profileCopy, "cold-copy-"+strconv.Itoa(i)) }},
		{"cold (csi's storage)", func(i int) (time.Duration, error) { return b.ensure(ctx, profileCSI, "cold-csi-"+strconv.Itoa(i)) }},
		{"warm (pool hit)", func(i int) (time.Duration, error) { return b.warm(ctx, i) }},
	}
	got := make([]latencies, len(sides))
	for i := range o.n + 1 { // the first round warms up and is not counted
		for j := range sides {
			k := (i + j) % len(sides)
			d, err := sides[k].f(i)
			if err != nil {
				return fmt.Errorf("%s: %w", sides[k].name, err)
			}
			if i > 0 {
				got[k] = append(got[k], d)
			}
		}
	}
	report(os.Stdout, o, got, b)
	return nil
}

type bench struct {
	sdk   *client.Client
	owner client.Owner
	kube  kubernetes.Interface
	ns    string
	// snap and restore are the two halves of each fork.
	snap, restore map[string]latencies
}

// source ensures the profile's source environment and writes mib files of 1 MiB into it.
func (b *bench) source(ctx context.Context, profileName string, mib int) (*client.Environment, error) {
	env, err := b.sdk.Ensure(ctx, client.EnsureRequest{Owner: b.owner, BindingID: "source-" + profileName, Profile: profileName})
	if err != nil {
		return nil, err
	}
	run, err := env.Acquire(ctx, client.AcquireOptions{RunID: "fill"})
	if err != nil {
		return nil, err
	}
	defer run.Close(context.Background())
	res, err := run.Run(ctx, client.Command{Timeout: 4 * time.Minute, Shell: fmt.Sprintf(
		`set -e; mkdir -p data; i=0; while [ $i -lt %d ]; do head -c 1048576 /dev/urandom > data/f$i; i=$((i+1)); done; du -sm data`, mib)})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("filling the source: exit %d: %s", res.ExitCode, res.Stderr)
	}
	return env, nil
}

// fork snapshots the source and ensures a new binding from the snapshot until Ready; the
// fork and the snapshot are deleted afterwards, outside the measurement.
func (b *bench) fork(ctx context.Context, src *client.Environment, profileName string, i int) (time.Duration, error) {
	name, binding := "fork-"+profileName+"-"+strconv.Itoa(i), "fork-"+profileName+"-"+strconv.Itoa(i)
	start := time.Now()
	snap, err := src.Snapshot(ctx, name)
	if err != nil {
		return 0, err
	}
	if snap.GetState() != client.SnapshotReady {
		return 0, fmt.Errorf("snapshot %s: %v %v", name, snap.GetState(), snap.GetFailureMessage())
	}
	cut := time.Since(start)
	env, err := b.sdk.Ensure(ctx, client.EnsureRequest{Owner: b.owner, BindingID: binding, Profile: profileName, FromSnapshot: name})
	if err != nil {
		return 0, err
	}
	if !env.Status().GetReady() {
		return 0, errors.New("the fork is not ready")
	}
	total := time.Since(start)
	if b.snap == nil {
		b.snap, b.restore = map[string]latencies{}, map[string]latencies{}
	}
	if i > 0 {
		b.snap[profileName] = append(b.snap[profileName], cut)
		b.restore[profileName] = append(b.restore[profileName], total-cut)
	}
	if err := env.Delete(ctx, 30*time.Second); err != nil {
		return 0, err
	}
	if _, err := b.sdk.DeleteSnapshot(ctx, b.owner, name); err != nil {
		return 0, err
	}
	return total, nil
}

// ensure ensures a new binding of the profile until Ready, then deletes it.
func (b *bench) ensure(ctx context.Context, profileName, binding string) (time.Duration, error) {
	start := time.Now()
	env, err := b.sdk.Ensure(ctx, client.EnsureRequest{Owner: b.owner, BindingID: binding, Profile: profileName})
	if err != nil {
		return 0, err
	}
	if !env.Status().GetReady() {
		return 0, errors.New("the ensured environment is not ready")
	}
	d := time.Since(start)
	return d, env.Delete(ctx, 30*time.Second)
}

// warm is ensure from the warm pool, once the pool is full again (waited for outside the
// measurement).
func (b *bench) warm(ctx context.Context, i int) (time.Duration, error) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if ready, err := b.poolReady(ctx); err != nil {
			return 0, err
		} else if ready >= poolSize {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
	}
	return b.ensure(ctx, profilePooled, "warm-"+strconv.Itoa(i))
}

// poolReady counts the pool's members Ready with their claims bound.
func (b *bench) poolReady(ctx context.Context) (int, error) {
	pods, err := b.kube.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: executor.LabelPool + "=" + profilePooled})
	if err != nil {
		return 0, err
	}
	ready := 0
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				ready++
			}
		}
	}
	return ready, nil
}

type latencies []time.Duration

func (l latencies) p50() time.Duration {
	s := slices.Clone(l)
	slices.Sort(s)
	return s[len(s)/2]
}

func report(w io.Writer, o options, got []latencies, b *bench) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }
	fmt.Fprintf(w, "\nFork of a %d MiB workspace on the real node (kubelet, containerd, runc; the local host-path CSI driver), concurrency 1, %d samples per side\n\n", o.mib, o.n)
	fmt.Fprintln(w, "| path | p50 ms | snapshot p50 ms | restore → Ready p50 ms |")
	fmt.Fprintln(w, "|---|---|---|---|")
	rows := []struct {
		name, profile string
		l             latencies
	}{
		{"fork, copy method: CreateSnapshot + EnsureEnvironment(from_snapshot) → Ready", profileCopy, got[0]},
		{"fork, csi method (host-path driver: a full copy)", profileCSI, got[1]},
		{"cold: EnsureEnvironment → Ready (the copy profile's storage)", "", got[2]},
		{"cold: EnsureEnvironment → Ready (the CSI driver's storage)", "", got[3]},
		{"warm: EnsureEnvironment → Ready (pool hit)", "", got[4]},
	}
	for _, r := range rows {
		snap, restore := "", ""
		if r.profile != "" {
			snap, restore = ms(b.snap[r.profile].p50()), ms(b.restore[r.profile].p50())
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r.name, ms(r.l.p50()), snap, restore)
	}
	ratio := func(a, b latencies) string { return fmt.Sprintf("%.2f", float64(a.p50())/float64(b.p50())) }
	fmt.Fprintf(w, "\n**fork ÷ cold (p50): copy %s, csi %s**   fork ÷ warm: copy %s, csi %s\n",
		ratio(got[0], got[2]), ratio(got[1], got[3]), ratio(got[0], got[4]), ratio(got[1], got[4]))
	fmt.Fprintln(w, strings.TrimSpace(`
The host-path driver's snapshot and restore are full directory copies (cp -a), like the copy
method's mirror; a cloud CSI driver's are copy-on-write and asynchronous: neither figure is
a reference for one.`))
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}
