package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/wrapperspb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/dev/devsystem"
	"github.com/execplane/execplane/internal/kube"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// The benchmark's profile: files up to 8 MiB, so that the 5 MiB transfer fits one call.
const profileName = "bench"

// profilesYAML is the profile for the node kind: on the fake node the image is a name and
// the node exec endpoint runs the helper as a local process; on the real node, the example
// executor image in a container.
func profilesYAML(node string) string {
	image, placement := "registry.example/bench:1", ""
	if node == nodeReal {
		image, placement = devimage.ExecutorRef, devcluster.RealNodePlacement
	}
	return fmt.Sprintf(`profiles:
  bench:
    image: %s
    storageClass: %s
    storageSize: 1Gi
    memoryLimit: 256Mi
    tmpSizeLimit: 16Mi
    maxFileBytes: 8388608
    maxCommandBytes: 65536
    maxCommandDuration: 1m
    maxEnvironments: 10
%s`, image, devcluster.StorageClassName, placement)
}

// Node kinds the executor runs on.
const (
	nodeKWOK = "kwok"
	nodeReal = "real"
)

// Sizes of the transfers the issue names.
const (
	smallFile = 4 << 10
	largeFile = 5 << 20
	// echoPayload is about the size of a ValidateProfile answer.
	echoPayload = 256
)

type options struct {
	n, nLarge, nCold, concurrency, rounds int
	idleSessions                          int
	duration                              time.Duration
	controller, gateway, helper, pause    string
	nodes                                 []string
	only                                  *regexp.Regexp
}

func run(ctx context.Context, args []string) error {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return err
	}
	var o options
	fs := flag.NewFlagSet("bench/gateway", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 300, "samples per side for the small operations")
	fs.IntVar(&o.nLarge, "n-large", 30, "samples per side for the 5 MiB transfers")
	fs.IntVar(&o.nCold, "n-cold", 30, "samples of the first call on a new session (each after 2 s of quiet) and of the persistent raw exec")
	fs.IntVar(&o.concurrency, "concurrency", 50, "concurrent callers for the throughput comparison")
	fs.IntVar(&o.idleSessions, "idle-sessions", 1000, "idle sessions the gateway's pool holds for the memory figure (fake node only)")
	fs.IntVar(&o.rounds, "rounds", 3, "alternating rounds of the throughput comparison (the median is reported)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of one throughput round")
	fs.StringVar(&o.controller, "controller", filepath.Join(root, "bin/controller"), "controller binary (make build)")
	fs.StringVar(&o.gateway, "gateway", filepath.Join(root, "bin/gateway"), "gateway binary (make build)")
	fs.StringVar(&o.helper, "helper", filepath.Join(root, "bin/helper"), "static helper binary (make build)")
	fs.StringVar(&o.pause, "pause", filepath.Join(root, "bin/pause"), "the real node's static sandbox binary (make bin/pause)")
	nodes := fs.String("nodes", nodeKWOK+","+nodeReal, "the node kinds to measure on, in order: "+nodeKWOK+" (the helper a process of this machine) and "+nodeReal+" (a container on the real node)")
	only := fs.String("only", "", "measure only the data operations whose name matches this regular expression (e.g. 'Stream'; the other figures are measured as usual)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.nodes = strings.Split(*nodes, ",")
	if *only != "" {
		if o.only, err = regexp.Compile(*only); err != nil {
			return fmt.Errorf("-only: %w", err)
		}
	}
	bins := []string{o.controller, o.gateway, o.helper}
	for _, n := range o.nodes {
		switch n {
		case nodeKWOK:
		case nodeReal:
			bins = append(bins, o.pause)
		default:
			return fmt.Errorf("-nodes: unknown node kind %q", n)
		}
	}
	for _, bin := range bins {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%w (run make build bin/pause first)", err)
		}
	}
	var results []nodeResult
	for i, node := range o.nodes {
		r, err := benchNode(ctx, o, root, node, i == 0)
		if err != nil {
			return fmt.Errorf("on the %s node: %w", node, err)
		}
		results = append(results, r)
	}
	report(os.Stdout, o, results)
	return nil
}

// nodeResult is what one node kind measured; the throughput (no exec) only on the first,
// the idle sessions only on the fake node (each session is a helper process there).
type nodeResult struct {
	node       string
	pairs      []comparison
	concurrent rates
	upgrades   upgrades
	idle       *idleCost
	tp         *rates
	durable    *durableResult
	cost       *sessionCost
}

// benchNode runs the measurements on a fresh local cluster whose executor runs on node.
func benchNode(ctx context.Context, o options, root, node string, withThroughput bool) (nodeResult, error) {
	res := nodeResult{node: node}

	dir, err := os.MkdirTemp("", "bench-gateway-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	copts := devcluster.Options{StateDir: filepath.Join(dir, "cluster"), ImageFiles: map[string]string{devcluster.HelperImagePath: o.helper}}
	if node == nodeReal {
		archive := filepath.Join(dir, "images.tar")
		if err := devimage.WriteStack(archive, devimage.Binaries{Helper: o.helper, Pause: o.pause, Busybox: devimage.BusyboxPath}); err != nil {
			return res, err
		}
		copts.RealNode = &devcluster.RealNodeOptions{Images: archive, SandboxImage: devimage.PauseRef}
	}
	logf("starting the local cluster (executor on the %s node)", node)
	c, err := devcluster.Start(ctx, copts)
	if err != nil {
		return res, err
	}
	defer c.Stop()
	if _, err := c.InstallCRDs(ctx, filepath.Join(root, "deploy/helm/execplane/files/crds")); err != nil {
		return res, err
	}
	ns, err := c.CreateNamespace(ctx, "bench")
	if err != nil {
		return res, err
	}
	logf("starting the controller and a gateway")
	sys, err := devsystem.Start(ctx, devsystem.Options{Kubeconfig: c.Kubeconfig(), Namespace: ns, Dir: filepath.Join(dir, "system"),
		ControllerBin: o.controller, GatewayBin: o.gateway, Gateways: 1, HelperPath: devcluster.HelperImagePath,
		Profiles: []byte(profilesYAML(node))})
	if err != nil {
		return res, err
	}
	defer sys.Stop()

	// Two gateways: with sessions (the default) and with --sessions=false (one exec per
	// operation), so both ways are measured in one run on the same executor Pod.
	if _, err := sys.StartGateway("gateway-per-exec", devcluster.HelperImagePath, "--sessions=false"); err != nil {
		return res, err
	}
	// A third, whose sessions close after a second idle: its first call after a pause opens
	// a new session (the cold figure).
	if _, err := sys.StartGateway("gateway-cold", devcluster.HelperImagePath, "--session-idle="+coldIdle.String()); err != nil {
		return res, err
	}
	if err := sys.WaitReady(ctx, time.Minute); err != nil {
		return res, err
	}
	// The default receive cap (4 MiB) is below a 5 MiB read: callers that move large files
	// raise it to the gateway's own bound, as the SDK does.
	var apis [3]executionv1grpc.ExecutionProviderServiceClient
	var first *grpc.ClientConn
	for i := range apis {
		conn, err := sys.Dial(devsystem.Caller, i, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			return res, err
		}
		defer conn.Close()
		apis[i] = executionv1grpc.NewExecutionProviderServiceClient(conn)
		if i == 0 {
			first = conn
		}
	}
	api := apis[0]
	logf("ensuring an environment and waiting until it is ready")
	run, err := acquire(ctx, client.NewFromConn(first, client.Config{}), api)
	if err != nil {
		return res, err
	}

	clients, err := kube.NewClients(kube.ClientOptions{Kubeconfig: c.Kubeconfig(), UserAgent: "bench-gateway", QPS: 1000, Burst: 2000})
	if err != nil {
		return res, err
	}
	restCfg := clients.REST
	env, err := clients.Execution.ExecutionV1alpha1().ExecutionEnvironments(ns).Get(ctx, run.ref.GetId(), metav1.GetOptions{})
	if err != nil {
		return res, err
	}
	if env.Status.Pod == nil {
		return res, errors.New("the environment records no executor Pod")
	}
	raw := rawExec{rest: restCfg, kube: clients.Kube, namespace: ns, pod: env.Status.Pod.Name}
	sides := [2]dataSide{{api: apis[0], run: run}, {api: apis[1], run: run}}
	if res.pairs, err = measureData(ctx, o, sides, raw); err != nil {
		return res, err
	}
	if o.only == nil || o.only.MatchString("cold") {
		logf("Files read 4 KiB: warm and cold sessions, and a persistent raw exec, %d samples each", o.nCold)
		cost, err := measureSessionCost(ctx, o.nCold, sides[0], dataSide{api: apis[2], run: run}, raw)
		if err != nil {
			return res, err
		}
		res.cost = &cost
	}
	if o.only == nil || o.only.MatchString("durable") {
		logf("durable output: a command writing %d MiB, streamed and in the foreground, %d samples each", durableOutputBytes>>20, o.nLarge)
		d, err := measureDurable(ctx, o.nLarge, sides[0])
		if err != nil {
			return res, err
		}
		res.durable = &d
	}
	logf("small reads at concurrency %d on one environment: %d rounds of %s per side", sessionConcurrency, o.rounds, o.duration)
	if res.concurrent, err = measureConcurrentReads(ctx, o, sides); err != nil {
		return res, err
	}
	logf("exec upgrades at the API server per %d data calls", upgradeCalls)
	if res.upgrades, err = measureUpgrades(ctx, clients.Kube, sides); err != nil {
		return res, err
	}
	if node == nodeKWOK {
		logf("%d idle sessions held by the gateway's pool", o.idleSessions)
		idle, err := measureIdleSessions(ctx, c.Kubeconfig(), ns, env, o.idleSessions)
		if err != nil {
			return res, err
		}
		res.idle = &idle
	}
	if withThroughput {
		logf("throughput: %d callers, %d rounds of %s per side", o.concurrency, o.rounds, o.duration)
		tp, err := measureThroughput(ctx, o, sys, api)
		if err != nil {
			return res, err
		}
		res.tp = &tp
	}
	return res, nil
}

// measureData compares each data operation through the gateway with sessions, through the
// gateway one exec per operation, and as a raw exec doing the same work, on the same Pod.
func measureData(ctx context.Context, o options, sides [2]dataSide, raw rawExec) ([]comparison, error) {
	small, large := random(smallFile), random(largeFile)
	if err := sides[0].write(ctx, "bench-4k", small); err != nil {
		return nil, fmt.Errorf("writing the 4 KiB file: %w", err)
	}
	if err := sides[0].write(ctx, "bench-5m", large); err != nil {
		return nil, fmt.Errorf("writing the 5 MiB file: %w", err)
	}
	cat := func(path string, want []byte) func(context.Context) error {
		return func(ctx context.Context) error {
			out, err := raw.run(ctx, nil, "cat", path)
			if err == nil && !bytes.Equal(out, want) {
				err = fmt.Errorf("raw cat %s: %d bytes, not the %d written", path, len(out), len(want))
			}
			return err
		}
	}
	cases := []struct {
		name, baseline string
		n              int
		side           func(d dataSide) func(context.Context) error
		raw            func(context.Context) error
	}{
		{"Files read 4 KiB", "exec `cat`", o.n,
			func(d dataSide) func(context.Context) error { return d.reader("bench-4k", small) }, cat("bench-4k", small)},
		{"StartCommand `true`", "exec `true`", o.n,
			func(d dataSide) func(context.Context) error { return d.runTrue },
			func(ctx context.Context) error { _, err := raw.run(ctx, nil, "true"); return err }},
		{"Files write 5 MiB", "exec `sh -c 'cat > f'`", o.nLarge,
			func(d dataSide) func(context.Context) error {
				return func(ctx context.Context) error { return d.write(ctx, "bench-5m", large) }
			},
			func(ctx context.Context) error {
				_, err := raw.run(ctx, large, "sh", "-c", "cat > bench-5m.raw")
				return err
			}},
		{"Files read 5 MiB", "exec `cat`", o.nLarge,
			func(d dataSide) func(context.Context) error { return d.reader("bench-5m", large) }, cat("bench-5m", large)},
		{"WriteFileStream 5 MiB", "exec `sh -c 'cat > f'`", o.nLarge,
			func(d dataSide) func(context.Context) error {
				return func(ctx context.Context) error { return d.writeStream(ctx, "bench-5m", large) }
			},
			func(ctx context.Context) error {
				_, err := raw.run(ctx, large, "sh", "-c", "cat > bench-5m.raw")
				return err
			}},
		{"ReadFileStream 5 MiB", "exec `cat`", o.nLarge,
			func(d dataSide) func(context.Context) error { return d.streamReader("bench-5m", large) }, cat("bench-5m", large)},
	}
	var out []comparison
	for _, c := range cases {
		if o.only != nil && !o.only.MatchString(c.name) {
			continue
		}
		logf("%s: %d samples per side", c.name, c.n)
		samples, err := measure(ctx, c.n, max(c.n/10, 3), c.side(sides[0]), c.side(sides[1]), c.raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		out = append(out, comparison{name: c.name, baseline: c.baseline, session: samples[0], perExec: samples[1], raw: samples[2]})
	}
	return out, nil
}

// measureThroughput compares authorised ValidateProfile calls through the gateway with a
// bare mTLS echo server, alternating rounds, each side on one connection.
func measureThroughput(ctx context.Context, o options, sys *devsystem.System, api executionv1grpc.ExecutionProviderServiceClient) (rates, error) {
	m := sys.Material
	self, err := os.Executable()
	if err != nil {
		return rates{}, err
	}
	cmd := exec.CommandContext(ctx, self, echoServerCommand, "-cert", m.ServerCert, "-key", m.ServerKey, "-ca", m.CACert)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return rates{}, err
	}
	if err := cmd.Start(); err != nil {
		return rates{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return rates{}, fmt.Errorf("echo server address: %w", err)
	}
	files, err := sys.ClientFiles(devsystem.Caller)
	if err != nil {
		return rates{}, err
	}
	tlsCfg, err := security.LoadClientTLSConfig(files)
	if err != nil {
		return rates{}, err
	}
	echoConn, err := grpc.NewClient(strings.TrimSpace(addr), grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		return rates{}, err
	}
	defer echoConn.Close()

	payload := wrapperspb.Bytes(random(echoPayload))
	echo := func(ctx context.Context) error {
		return echoConn.Invoke(ctx, echoMethod, payload, new(wrapperspb.BytesValue))
	}
	validate := func(ctx context.Context) error {
		_, err := api.ValidateProfile(ctx, &executionv1.ValidateProfileRequest{Profile: profileName})
		return err
	}
	// Warm both connections (handshakes, HTTP/2 windows).
	for _, f := range []func(context.Context) error{echo, validate} {
		if _, err := throughput(ctx, o.concurrency, time.Second, f); err != nil {
			return rates{}, err
		}
	}
	var r rates
	for range o.rounds {
		g, err := throughput(ctx, o.concurrency, o.duration, validate)
		if err != nil {
			return r, fmt.Errorf("gateway throughput: %w", err)
		}
		b, err := throughput(ctx, o.concurrency, o.duration, echo)
		if err != nil {
			return r, fmt.Errorf("echo throughput: %w", err)
		}
		r.gateway, r.baseline = append(r.gateway, g), append(r.baseline, b)
	}
	return r, nil
}

func report(w io.Writer, o options, results []nodeResult) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
	fmt.Fprintf(w, "\n| operation | node | samples per side | sessions p50 / p90 (ms) | one exec per operation p50 / p90 (ms) | baseline | baseline p50 / p90 (ms) | **sessions ÷ baseline** | one exec per operation ÷ baseline |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|\n")
	for i := range results[0].pairs {
		for _, r := range results {
			c := r.pairs[i]
			fmt.Fprintf(w, "| %s | %s | %d | %s / %s | %s / %s | %s | %s / %s | **%.2f** | %.2f |\n", c.name, r.node, len(c.session),
				ms(c.session.quantile(0.5)), ms(c.session.quantile(0.9)), ms(c.perExec.quantile(0.5)), ms(c.perExec.quantile(0.9)),
				c.baseline, ms(c.raw.quantile(0.5)), ms(c.raw.quantile(0.9)), ratio(c.session, c.raw), ratio(c.perExec, c.raw))
		}
	}
	fmt.Fprintf(w, "\n| small reads on one environment at concurrency %d | node | rounds | median ops/s | every round |\n|---|---|---|---|---|\n", sessionConcurrency)
	for _, r := range results {
		s, p := median(r.concurrent.gateway), median(r.concurrent.baseline)
		fmt.Fprintf(w, "| with sessions | %s | %d × %s | %.0f | %s |\n", r.node, len(r.concurrent.gateway), o.duration, s, join(r.concurrent.gateway))
		fmt.Fprintf(w, "| one exec per operation | %s | %d × %s | %.0f | %s |\n", r.node, len(r.concurrent.baseline), o.duration, p, join(r.concurrent.baseline))
		fmt.Fprintf(w, "| **sessions ÷ one exec per operation** | %s | | **%.1f** | |\n", r.node, s/p)
	}
	fmt.Fprintf(w, "\n| pods/exec requests at the API server per %d small reads | node | with sessions | one exec per operation |\n|---|---|---|---|\n", upgradeCalls)
	for _, r := range results {
		fmt.Fprintf(w, "| apiserver_request_total{subresource=\"exec\"} | %s | **%.0f** | %.0f |\n", r.node, r.upgrades.session, r.upgrades.perExec)
	}
	for _, r := range results {
		if r.idle == nil {
			continue
		}
		fmt.Fprintf(w, "\n| idle sessions held by the gateway's pool (%s node) | sessions | goroutines per session | heap in use per session | resident memory per session |\n|---|---|---|---|---|\n", r.node)
		fmt.Fprintf(w, "| podexec.Pool over podexec.Exec (client-go WebSocket exec), a process of its own | %d | %.1f | %.1f KiB | %.1f KiB |\n", r.idle.N, r.idle.Goroutines, r.idle.HeapBytes/1024, r.idle.RSSBytes/1024)
	}
	reportCost(w, results)
	reportDurable(w, results)
	for _, r := range results {
		if r.tp == nil {
			continue
		}
		g, b := median(r.tp.gateway), median(r.tp.baseline)
		fmt.Fprintf(w, "\n| throughput at concurrency %d | rounds | median RPC/s | every round |\n|---|---|---|---|\n", o.concurrency)
		fmt.Fprintf(w, "| gateway: authorised ValidateProfile | %d × %s | %.0f | %s |\n", len(r.tp.gateway), o.duration, g, join(r.tp.gateway))
		fmt.Fprintf(w, "| baseline: bare grpc-go mTLS echo | %d × %s | %.0f | %s |\n", len(r.tp.baseline), o.duration, b, join(r.tp.baseline))
		fmt.Fprintf(w, "| **gateway ÷ baseline** | | **%.2f** | |\n", g/b)
	}
}

func join(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(s, ", ")
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}
