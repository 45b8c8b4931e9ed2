//go:build upgrade

// The rolling upgrade under load: built only with -tags upgrade (make upgrade-test), so
// that make test neither runs nor skips it.

package chaos_test

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/devdeploy"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/dev/devsystem"
	"github.com/execplane/execplane/internal/dev/history"
	"github.com/execplane/execplane/internal/dev/precondition"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/pkg/client"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
)

// upgradeEnv is the load's duration (a Go duration; the upgrade starts after
// upgradeWarmup); defaultUpgradeLoad when unset.
const (
	upgradeEnv         = "EXECPLANE_UPGRADE_TEST"
	defaultUpgradeLoad = 3 * time.Minute
)

const (
	// upgradeWarmup is the load before helm upgrade starts: every agent holds an
	// environment, the detached command and the terminal run.
	upgradeWarmup = 30 * time.Second
	// detachedLines is how long (in seconds, one line each) the detached command runs: past
	// the upgrade, so that new gateways follow it to its end.
	detachedLines = 100
)

// releaseTarget is the chart's release on the real node as the workload's target: both
// "gateways" are the gateway Service's NodePort, which kube-proxy balances per connection.
type releaseTarget struct {
	d *devdeploy.Deployment
	c *devcluster.Cluster
}

func (r releaseTarget) Dial(name string, _ int, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	who := map[string]devbundle.Client{devsystem.Caller: r.d.Bundle.Caller, devsystem.Administrator: r.d.Bundle.Administrator}[name]
	cfg, err := security.LoadClientTLSConfig(security.ClientFiles{CertFile: who.CertFile, KeyFile: who.KeyFile, CAFile: r.d.Bundle.CACert, ServerName: r.d.ServerName})
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(r.d.GatewayAddress, append([]grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}, opts...)...)
}

func (r releaseTarget) RESTConfig() *rest.Config  { return r.c.RESTConfig() }
func (r releaseTarget) ExecutorNamespace() string { return r.d.ExecutorNamespace }

// A rolling upgrade under load loses nothing: the chart installed on the real node with
// images of one build, the fault suite's agents (history-checked), an
// SDK client writing, reading and running commands, a detached command and a terminal all
// running, and helm upgrade to images of another build (both Deployments roll). Every SDK
// call succeeds (its retries absorb the rollout); the agents' histories check Ok; no call
// is cut (no deadline, cancel or internal error); the detached command is followed to its
// end through the new gateways with every line; the terminal, cut at its gateway's drain,
// reconnects; one environment per binding.
func TestRollingUpgradeUnderLoad(t *testing.T) {
	spec := os.Getenv(upgradeEnv)
	if spec == "" {
		spec = defaultUpgradeLoad.String()
	}
	load, err := time.ParseDuration(spec)
	if err != nil || load < 2*upgradeWarmup {
		t.Fatalf("%s=%q: want a duration of at least %s", upgradeEnv, spec, 2*upgradeWarmup)
	}
	if err := devcluster.RealNodeAvailable(); err != nil {
		precondition.Missing(t, "the real node: %v", err)
	}
	dir := t.TempDir()
	helmBin, releases := upgradeImages(t, dir)
	node, err := clustertest.RealNodeImages(dir, "../..")
	if err != nil {
		t.Fatal(err)
	}
	node.ClusterDNS = true
	ctx := t.Context()
	c, err := devcluster.Start(ctx, devcluster.Options{StateDir: filepath.Join(dir, "cluster"), RealNode: node, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	// Profiling on: a stalled call's goroutines can be read (watchStalls).
	d, err := devdeploy.Install(ctx, devdeploy.Options{Cluster: c, Helm: helmBin, Chart: "../../deploy/helm/execplane", Dir: filepath.Join(dir, "deploy"),
		Images: releases[0], Values: map[string]any{"profiling": true}})
	if err != nil {
		t.Fatal(err)
	}
	keep, err := os.MkdirTemp("", "execplane-upgrade-logs-")
	if err != nil {
		t.Fatal(err)
	}
	target := releaseTarget{d: d, c: c}

	// The load.
	b := budget{bindings: 4, agents: 2, seed: uint64(time.Now().UnixNano()), duration: load, maxOps: 1 << 30}
	t.Logf("seed %d, load %s", b.seed, load)
	// The agents without their lifecycle calls and without the administrator's revokes and
	// replacements (each stops executor Pods under calls in flight), with run claims that do
	// not lapse under a call (the API's longest, released by their holder: a lapsed claim
	// taken over by the binding's other agent fences its holder's call), and without probes
	// on the grants of claims they gave up (fenced when the gateway's view catches up with
	// the release). Each ends such a call OUTCOME_UNKNOWN by design; here a call that does
	// not complete must be the upgrade's doing.
	w := newWorkloadOf(target)
	w.profile, w.noLifecycle, w.runTTL, w.noStaleProbes = devdeploy.Profile, true, client.MaxRunTTL, true
	loadCtx, stopLoad := context.WithTimeout(ctx, load)
	defer stopLoad()
	var agents []*agent
	for i := range b.bindings * b.agents {
		agents = append(agents, w.agent(t, i, b.seed, fmt.Sprintf("upgrade-%d", i%b.bindings)))
	}
	var wg, prepared sync.WaitGroup
	start := make(chan struct{})
	prepared.Add(len(agents))
	for _, a := range agents {
		wg.Go(func() { a.loop(loadCtx, &prepared, start) })
	}
	go func() { prepared.Wait(); close(start) }()
	sdk := newSDKLoad(t, d)
	wg.Go(func() { sdk.files(loadCtx) })
	detached := sdk.startDetached(t, ctx)
	wg.Go(func() { sdk.terminal(loadCtx) })

	// The other build's images pushed; the upgrade, once the load runs.
	refs, err := d.Push(ctx, releases[1])
	if err != nil {
		t.Fatal(err)
	}
	digest := func(name string) string { return refs[name][strings.LastIndex(refs[name], "@")+1:] }
	sleep(loadCtx, upgradeWarmup)
	began, beganAt := time.Now(), w.rec.Now()
	events := watchPods(loadCtx, t, c, d.Namespace, began)
	go watchStalls(loadCtx, t, c, d, w.rec, keep)
	// The baseline (EXECPLANE_UPGRADE_BASELINE=1): the same run without the upgrade, to tell
	// the upgrade's effects from the load's.
	baseline := os.Getenv("EXECPLANE_UPGRADE_BASELINE") != ""
	if baseline {
		refs = d.Images
	} else if err := d.Upgrade(ctx, "--set", "image.tag="+releases[1][0].Tag, "--set", "image.digests.gateway="+digest("gateway"),
		"--set", "image.digests.controller="+digest("controller")); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if _, err := d.WaitRolledOut(ctx); err != nil {
		t.Fatal(err)
	}
	upgraded := time.Since(began)
	t.Logf("helm upgrade and both rollouts done in %s", upgraded.Round(time.Millisecond))
	wg.Wait()

	// The detached command, followed to its end through the new gateways.
	lines, followErr := sdk.follow(ctx, detached)

	// The checks.
	commit, stop := context.WithTimeout(ctx, 30*time.Second)
	for _, a := range agents {
		for a.env != nil && a.uncommitted && commit.Err() == nil {
			a.commit(commit)
		}
	}
	stop()
	ops := w.rec.Operations()
	verdicts := history.Check(ops, staleBound, dir)
	w.mu.Lock()
	stats, wrong := maps.Clone(w.stats), slices.Clone(w.wrong)
	w.mu.Unlock()
	var calls, cut, retried int
	for key, n := range stats {
		calls += n
		fields := strings.Fields(key)
		if len(fields) < 3 || fields[1] != history.Unknown.String() {
			continue
		}
		switch fields[2] {
		case "DeadlineExceeded", "Canceled", "Unknown", "Internal", "DataLoss", "OUTCOME_UNKNOWN":
			cut += n // the call may or may not have taken effect: no retry can tell
		default:
			retried += n // UNAVAILABLE, nothing done: the SDK retries it
		}
	}
	// When each call that did not complete was made, from the upgrade's start.
	var cutAt []string
	for _, op := range ops {
		in, out := op.Input.(history.Input), op.Output.(history.Output)
		if out.Result == history.Unknown {
			cutAt = append(cutAt, fmt.Sprintf("%s %s on %s via connection %d at %+.1fs (returned after %.1fs)", in.Kind, out.Reason, in.Binding, in.Gateway,
				time.Duration(in.Called-beganAt).Seconds(), time.Duration(out.Returned-in.Called).Seconds()))
			// The binding's other operations around it: what the environment did meanwhile.
			for _, o := range ops {
				oi, oo := o.Input.(history.Input), o.Output.(history.Output)
				if oi.Binding == in.Binding && oo.Returned > in.Called-int64(3*time.Second) && oi.Called < out.Returned+int64(3*time.Second) {
					cutAt = append(cutAt, fmt.Sprintf("\n    %s: %s %s %s %+.1fs…%+.1fs", oi.Binding, oi.Kind, oo.Result, oo.Reason,
						time.Duration(oi.Called-beganAt).Seconds(), time.Duration(oo.Returned-beganAt).Seconds()))
				}
			}
		}
	}
	t.Logf("calls that did not complete, from the upgrade's start (upgrade %s): %v", upgraded.Round(time.Millisecond), cutAt)
	t.Logf("the release's Pods, from the upgrade's start:\n%s", strings.Join(events(), "\n"))
	if len(cutAt) > 0 {
		// What the gateways said, and what their environment views did, for the cut calls.
		kubectl := filepath.Join(c.BinDir(), "kubectl")
		logs, _ := exec.Command(kubectl, "--kubeconfig", c.Kubeconfig(), "--namespace", d.Namespace, "logs", "--prefix", "--tail=400",
			"-l", "app.kubernetes.io/component=gateway").CombinedOutput()
		t.Logf("the gateways' logs:\n%s", logs)
		keepLogs(t, c, d, keep)
	} else {
		_ = os.RemoveAll(keep)
	}
	duplicates := duplicateEnvironments(t, target)
	report := upgradeReport(b, load, upgraded, calls, retried, cut, stats, verdicts, wrong, sdk, lines, followErr, duplicates)
	t.Log("\n" + report)
	if path := os.Getenv(reportEnv); path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			fmt.Fprintf(f, "%s\n%s\n", t.Name(), report)
			f.Close()
		}
	}
	for _, v := range verdicts {
		if v.Result != porcupine.Ok {
			t.Errorf("the %s history is %s", v.Model, v.Result)
		}
	}
	if cut > 0 || len(wrong) > 0 || sdk.failed.Load() > 0 || len(duplicates) > 0 {
		t.Errorf("%d calls cut, %d wrong answers, %d SDK calls failed, duplicate environments %v", cut, len(wrong), sdk.failed.Load(), duplicates)
	}
	if followErr != nil || lines != detachedLines {
		t.Errorf("the detached command: %d of %d lines followed to its end (%v)", lines, detachedLines, followErr)
	}
	if sdk.terminalTicks.Load() == 0 {
		t.Error("the terminal never answered")
	}
	if err := d.CheckPods(t.Context(), refs, nil); err != nil {
		t.Errorf("after the upgrade: %v", err)
	}
}

// upgradeImages builds helm and two releases' images of different builds (their programs
// carry different versions): the one installed, the one upgraded to. The executor image is
// the first release's in both (the profile does not change).
func upgradeImages(t *testing.T, dir string) (string, [2][]devimage.Built) {
	t.Helper()
	helmBin := filepath.Join(dir, "helm")
	if err := clustertest.GoBuild("../..", helmBin, "helm.sh/helm/v3/cmd/helm", "-modfile=hack/tools/go.mod"); err != nil {
		t.Fatal(err)
	}
	var out [2][]devimage.Built
	ps, err := devimage.ParsePlatforms("linux/" + runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	for i, version := range []string{"0.0.0-upgrade-a", "0.0.0-upgrade-b"} {
		bin := filepath.Join(dir, version)
		for _, p := range []string{"gateway", "controller", "helper", "e2b"} {
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X github.com/execplane/execplane/internal/version.Version="+version,
				"-o", filepath.Join(bin, "linux_"+runtime.GOARCH, p), "./cmd/"+p)
			cmd.Dir, cmd.Env = "../..", append(os.Environ(), "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("building %s %s: %v\n%s", p, version, err, b)
			}
		}
		built, err := devimage.BuildRelease(devimage.Release{Version: version, Commit: version, Created: time.Unix(1<<30, 0),
			Platforms: ps, BinDir: bin, Userland: devimage.BusyboxUserland(devimage.BusyboxPath)})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = built
	}
	// The second release without its executor: the installed profile's image stays.
	out[1] = slices.DeleteFunc(out[1], func(b devimage.Built) bool { return b.Name == "executor" })
	return helmBin, out
}

// duplicateEnvironments lists the bindings with more than one environment.
func duplicateEnvironments(t *testing.T, tg target) []string {
	t.Helper()
	envs, err := versioned.NewForConfig(tg.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	list, err := envs.ExecutionV1alpha1().ExecutionEnvironments(tg.ExecutorNamespace()).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, e := range list.Items {
		count[e.Spec.OwnerHash+"/"+e.Spec.BindingID]++
	}
	var dup []string
	for k, n := range count {
		if n > 1 {
			dup = append(dup, k)
		}
	}
	return dup
}

// sdkLoad is a caller on the Go SDK beside the fault suite's agents: its errors are what a
// user would see, after the SDK's retries.
type sdkLoad struct {
	t      *testing.T
	c      *client.Client
	calls  atomic.Int64
	failed atomic.Int64
	// erred counts the SDK's unary attempts answered with an error: with no call failed in
	// the end, every one was retried.
	erred atomic.Int64
	// terminalTicks counts commands the terminal echoed, terminalReconnects the terminals
	// opened again after one was cut.
	terminalTicks, terminalReconnects atomic.Int64
	mu                                sync.Mutex
	errs                              []string
}

func newSDKLoad(t *testing.T, d *devdeploy.Deployment) *sdkLoad {
	s := &sdkLoad{t: t}
	// Every attempt of the SDK's retry loop passes this interceptor: the attempts answered
	// with an error, less the calls that failed in the end, are the ones it retried.
	attempts := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil {
			s.erred.Add(1)
		}
		return err
	})
	c, err := client.Dial(client.Config{Address: d.GatewayAddress, ServerName: d.ServerName, CAFile: d.Bundle.CACert,
		CertFile: d.Bundle.Caller.CertFile, KeyFile: d.Bundle.Caller.KeyFile, DialOptions: []grpc.DialOption{attempts}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s.c = c
	return s
}

func (s *sdkLoad) fail(what string, err error) {
	s.failed.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) < 10 {
		s.errs = append(s.errs, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), what, err))
	}
}

// run acquires a run of binding's environment (ensured first).
func (s *sdkLoad) run(ctx context.Context, binding string) (*client.Run, error) {
	env, err := s.c.Ensure(ctx, client.EnsureRequest{Owner: client.Owner{Issuer: owner.GetIssuer(), Subject: "sdk"}, BindingID: binding, Profile: devdeploy.Profile})
	if err != nil {
		return nil, fmt.Errorf("ensure: %w", err)
	}
	run, err := env.Acquire(ctx, client.AcquireOptions{RunID: binding + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)})
	if err != nil {
		return nil, fmt.Errorf("acquire: %w", err)
	}
	return run, nil
}

// files writes, reads back and runs a command over a file until ctx ends, in runs of 20
// operations (release, acquire again).
func (s *sdkLoad) files(ctx context.Context) {
	for i := 0; ctx.Err() == nil; {
		run, err := s.run(ctx, "sdk-files")
		s.calls.Add(2)
		if err != nil {
			if ctx.Err() == nil {
				s.fail("run", err)
			}
			continue
		}
		for j := 0; j < 20 && ctx.Err() == nil; j, i = j+1, i+1 {
			content := fmt.Sprintf("write %d\n", i)
			s.calls.Add(3)
			if _, err := run.WriteFile(ctx, "sdk.txt", []byte(content)); err != nil {
				if ctx.Err() == nil {
					s.fail("write", err)
				}
				continue
			}
			got, err := run.ReadFile(ctx, "sdk.txt")
			if err != nil || string(got) != content {
				if ctx.Err() == nil {
					s.fail("read back", fmt.Errorf("%q, %w", got, err))
				}
				continue
			}
			res, err := run.Run(ctx, client.Command{Shell: "wc -c < sdk.txt", Timeout: 10 * time.Second})
			if err != nil || strings.TrimSpace(res.Stdout.String()) != strconv.Itoa(len(content)) {
				if ctx.Err() == nil {
					s.fail("command", fmt.Errorf("%+v, %w", res, err))
				}
			}
		}
		s.calls.Add(1)
		if err := run.Close(context.WithoutCancel(ctx)); err != nil {
			s.fail("release", err)
		}
	}
}

// startDetached starts a command that prints detachedLines lines, one a second, detached.
func (s *sdkLoad) startDetached(t *testing.T, ctx context.Context) *detachedCommand {
	run, err := s.run(ctx, "sdk-detached")
	if err != nil {
		t.Fatalf("the detached command's run: %v", err)
	}
	info, err := run.Start(ctx, client.Command{Shell: fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo line $i; i=$((i+1)); sleep 1; done", detachedLines)},
		client.StartOptions{}) // Start detaches: the command outlives the call
	if err != nil {
		t.Fatalf("starting the detached command: %v", err)
	}
	return &detachedCommand{run: run, id: info.ID}
}

type detachedCommand struct {
	run *client.Run
	id  string
}

// follow waits for the detached command's end through whichever gateway answers, and
// counts the lines of its output, read from the start.
func (s *sdkLoad) follow(ctx context.Context, d *detachedCommand) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	info, err := d.run.Wait(ctx, d.id)
	if err != nil {
		return 0, fmt.Errorf("wait: %w", err)
	}
	if info.Result == nil || !info.Result.Succeeded() {
		return 0, fmt.Errorf("ended %+v", info)
	}
	var out strings.Builder
	for ev, err := range d.run.Output(ctx, d.id, client.Cursor{}) {
		if err != nil {
			return 0, fmt.Errorf("output: %w", err)
		}
		if ev.Output != nil && ev.Output.Stream == client.Stdout {
			out.Write(ev.Output.Data)
		}
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	for i, l := range lines {
		if l != "line "+strconv.Itoa(i) {
			return i, fmt.Errorf("line %d is %q", i, l)
		}
	}
	_ = d.run.Close(context.WithoutCancel(ctx))
	return len(lines), nil
}

// terminal keeps an interactive shell busy: a command a second, its echo read back. A
// terminal cut at its gateway's drain is opened again.
func (s *sdkLoad) terminal(ctx context.Context) {
	run, err := s.run(ctx, "sdk-terminal")
	if err != nil {
		s.fail("the terminal's run", err)
		return
	}
	defer run.Close(context.WithoutCancel(ctx))
	for opened := 0; ctx.Err() == nil; opened++ {
		if opened > 0 {
			s.terminalReconnects.Add(1)
		}
		term, err := run.Terminal(ctx, client.Command{Args: []string{"sh"}}, client.TerminalOptions{Rows: 24, Columns: 80})
		if err != nil {
			if ctx.Err() == nil {
				s.fail("terminal", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		s.talk(ctx, term)
		term.Close()
	}
}

// talk types into term until it breaks or ctx ends.
func (s *sdkLoad) talk(ctx context.Context, term *client.Terminal) {
	buf := make([]byte, 4096)
	for n := 0; ctx.Err() == nil; n++ {
		want := fmt.Sprintf("tick-%d-done", n)
		if _, err := io.WriteString(term, "echo tick-"+strconv.Itoa(n)+"-done\n"); err != nil {
			return
		}
		var seen strings.Builder
		for !strings.Contains(seen.String(), want+"\r\n") {
			k, err := term.Read(buf)
			if err != nil {
				return
			}
			seen.Write(buf[:k])
		}
		s.terminalTicks.Add(1)
		sleep(ctx, time.Second)
	}
}

func upgradeReport(b budget, load, upgraded time.Duration, calls, retried, cut int, stats map[string]int, verdicts []history.Verdict, wrong []string,
	sdk *sdkLoad, lines int, followErr error, duplicates []string) string {
	var r strings.Builder
	fmt.Fprintf(&r, "rolling upgrade under load: seed %d, %d bindings × %d agents, load %s; helm upgrade and both rollouts %s\n",
		b.seed, b.bindings, b.agents, load, upgraded.Round(time.Millisecond))
	fmt.Fprintf(&r, "agents' calls %d: retryable answers %d (UNAVAILABLE), cut %d, wrong answers %d\n", calls, retried, cut, len(wrong))
	for _, v := range verdicts {
		fmt.Fprintf(&r, "  history %s: %s (%d operations)\n", v.Model, v.Result, v.Operations)
		if v.Result != porcupine.Ok {
			fmt.Fprintf(&r, "%s(visualization: %s)\n", v.Violation, v.Visualization)
		}
	}
	keys := slices.Sorted(maps.Keys(stats))
	for _, k := range keys {
		fmt.Fprintf(&r, "  %-48s %d\n", k, stats[k])
	}
	fmt.Fprintf(&r, "SDK calls %d, attempts answered with an error %d, failed %d; terminal commands %d, reconnects %d\n", sdk.calls.Load(), sdk.erred.Load(),
		sdk.failed.Load(), sdk.terminalTicks.Load(), sdk.terminalReconnects.Load())
	sdk.mu.Lock()
	for _, e := range sdk.errs {
		fmt.Fprintf(&r, "  SDK: %s\n", e)
	}
	sdk.mu.Unlock()
	fmt.Fprintf(&r, "detached command: %d of %d lines, followed to its end (%v); duplicate environments: %d\n", lines, detachedLines, errOrNone(followErr), len(duplicates))
	return r.String()
}

func errOrNone(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// watchPods records, until ctx ends, when each Pod of the namespace starts terminating,
// becomes ready and is deleted, from start: the timeline a cut call is read against.
func watchPods(ctx context.Context, t *testing.T, c *devcluster.Cluster, ns string, start time.Time) func() []string {
	var mu sync.Mutex
	var events []string
	add := func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, fmt.Sprintf("%+6.1fs ", time.Since(start).Seconds())+fmt.Sprintf(f, a...))
	}
	w, err := c.Kube().CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			state := "pending"
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					state = "ready"
				}
			}
			if p.DeletionTimestamp != nil {
				state = "terminating"
			}
			if ev.Type == "DELETED" {
				state = "deleted"
			}
			if seen[p.Name] != state {
				seen[p.Name] = state
				add("%s %s", p.Name, state)
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(events)
	}
}

// keepLogs copies what the cluster's processes and the release's Pods logged to a directory
// that outlives the test, for a cut call to be traced through the API server, the kubelet
// and the runtime.
func keepLogs(t *testing.T, c *devcluster.Cluster, d *devdeploy.Deployment, dir string) {
	_ = filepath.WalkDir(c.StateDir(), func(path string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(path, ".log") {
			if b, err := os.ReadFile(path); err == nil {
				rel, _ := filepath.Rel(c.StateDir(), path)
				_ = os.WriteFile(filepath.Join(dir, strings.ReplaceAll(rel, string(filepath.Separator), "_")), b, 0o644)
			}
		}
		return nil
	})
	kubectl := filepath.Join(c.BinDir(), "kubectl")
	for _, component := range []string{"controller", "gateway"} {
		logs, _ := exec.Command(kubectl, "--kubeconfig", c.Kubeconfig(), "--namespace", d.Namespace, "logs", "--prefix", "--tail=-1",
			"-l", "app.kubernetes.io/component="+component).CombinedOutput()
		_ = os.WriteFile(filepath.Join(dir, component+"-pods.log"), logs, 0o644)
	}
	t.Logf("the cluster's and the release's logs are kept in %s", dir)
}

// watchStalls: the first time an agent's call has waited stallAfter (calls take well under
// a second), what the release's Pods were doing — their goroutines, from /debug/pprof — and
// the machine's and the gateways' TCP sockets and connection tracking go into dir, twice
// five seconds apart: a stalled call's cause is then in the kept logs.
// stallAfter is how long an agent's call waits before watchStalls takes its pictures.
const stallAfter = 6 * time.Second

func watchStalls(ctx context.Context, t *testing.T, c *devcluster.Cluster, d *devdeploy.Deployment, rec *history.Recorder, dir string) {
	pods := c.Kube().CoreV1().Pods(d.Namespace)
	for rec.Oldest() < stallAfter {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	for i := range 2 {
		stamp := time.Now().Format("150405")
		save := func(name string, b []byte) { _ = os.WriteFile(filepath.Join(dir, "stall-"+stamp+"-"+name), b, 0o644) }
		// What runs, and how: the machine's processes, their state and wait channel.
		ps, _ := exec.Command("ps", "-eo", "pid,stat,pcpu,rss,etime,wchan:32,comm", "--sort=-pcpu").CombinedOutput()
		save("ps.txt", ps)
		ss, _ := exec.Command("ss", "-tnoip").CombinedOutput()
		save("ss.txt", ss)
		// The gateways' own view of their connections, from inside their network namespace.
		if pids, err := exec.Command("pgrep", "-x", "gateway").Output(); err == nil {
			for pid := range strings.FieldsSeq(string(pids)) {
				ss, _ := exec.Command("nsenter", "-t", pid, "-n", "ss", "-tnoi").CombinedOutput()
				save("gateway-"+pid+"-ss.txt", ss)
			}
		}
		if ct, err := os.ReadFile("/proc/net/nf_conntrack"); err == nil {
			save("conntrack.txt", ct)
		}
		if nft, err := exec.Command("nft", "list", "ruleset").CombinedOutput(); err == nil && i == 0 {
			save("nft.txt", nft)
		}
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + d.Release})
		if err == nil {
			web := http.Client{Timeout: 5 * time.Second}
			for _, p := range list.Items {
				port := "9090" // the gateway's diagnostics port; the controller's is 9091
				if p.Labels["app.kubernetes.io/component"] == "controller" {
					port = "9091"
				}
				resp, err := web.Get("http://" + net.JoinHostPort(p.Status.PodIP, port) + "/debug/pprof/goroutine?debug=2")
				if err != nil {
					save(p.Name+"-goroutines.txt", []byte(err.Error()))
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				save(p.Name+"-goroutines.txt", b)
			}
		}
		t.Logf("a call waited %s: goroutines and sockets at %s kept in %s", stallAfter, stamp, dir)
		if i == 0 {
			sleep(ctx, 5*time.Second)
		}
	}
}
