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
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/wrapperspb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/dev/devsystem"
	"github.com/execplane/execplane/internal/gateway"
	"github.com/execplane/execplane/internal/kube"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
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
	n, nLarge, concurrency, rounds     int
	duration                           time.Duration
	controller, gateway, helper, pause string
	nodes                              []string
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
	fs.IntVar(&o.concurrency, "concurrency", 50, "concurrent callers for the throughput comparison")
	fs.IntVar(&o.rounds, "rounds", 3, "alternating rounds of the throughput comparison (the median is reported)")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of one throughput round")
	fs.StringVar(&o.controller, "controller", filepath.Join(root, "bin/controller"), "controller binary (make build)")
	fs.StringVar(&o.gateway, "gateway", filepath.Join(root, "bin/gateway"), "gateway binary (make build)")
	fs.StringVar(&o.helper, "helper", filepath.Join(root, "bin/helper"), "static helper binary (make build)")
	fs.StringVar(&o.pause, "pause", filepath.Join(root, "bin/pause"), "the real node's static sandbox binary (make bin/pause)")
	nodes := fs.String("nodes", nodeKWOK+","+nodeReal, "the node kinds to measure on, in order: "+nodeKWOK+" (the helper a process of this machine) and "+nodeReal+" (a container on the real node)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.nodes = strings.Split(*nodes, ",")
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

// nodeResult is what one node kind measured; the throughput (no exec) only on the first.
type nodeResult struct {
	node  string
	pairs []comparison
	tp    *rates
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
	if _, err := c.InstallCRDs(ctx, filepath.Join(root, "deploy/helm/execplane/crds")); err != nil {
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

	// The default receive cap (4 MiB) is below a 5 MiB read: callers that move large files
	// raise it to the gateway's own bound, as the SDK does.
	conn, err := sys.Dial(devsystem.Caller, 0, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return res, err
	}
	defer conn.Close()
	api := executionv1grpc.NewExecutionProviderServiceClient(conn)
	sdk := client.NewFromConn(conn, client.Config{})
	logf("ensuring an environment and waiting until it is ready")
	e, err := sdk.Ensure(ctx, client.EnsureRequest{Owner: client.Owner{Issuer: "https://idp.example", Subject: "bench"}, BindingID: "bench", Profile: profileName})
	if err != nil {
		return res, err
	}
	s, err := e.Acquire(ctx, client.AcquireOptions{RunID: "bench", TTL: client.MaxRunTTL})
	if err != nil {
		return res, err
	}
	defer s.Close(context.WithoutCancel(ctx))

	clients, err := kube.NewClients(kube.ClientOptions{Kubeconfig: c.Kubeconfig(), UserAgent: "bench-gateway", QPS: 1000, Burst: 2000})
	if err != nil {
		return res, err
	}
	restCfg := clients.REST
	env, err := clients.Execution.ExecutionV1alpha1().ExecutionEnvironments(ns).Get(ctx, e.ID(), metav1.GetOptions{})
	if err != nil {
		return res, err
	}
	if env.Status.Pod == nil {
		return res, errors.New("the environment records no executor Pod")
	}
	raw := rawExec{rest: restCfg, kube: clients.Kube, namespace: ns, pod: env.Status.Pod.Name}

	executor, err := gateway.NewPodExecutor(gateway.PodExecutorConfig{HelperPath: devcluster.HelperImagePath}, restCfg, ns)
	if err != nil {
		return res, err
	}
	leg := &helperLeg{executor: executor, pod: gateway.PodRef{Name: env.Status.Pod.Name, UID: env.Status.Pod.UID}}
	if res.pairs, err = measureData(ctx, o, s, leg, raw); err != nil {
		return res, err
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

// measureData compares the data plane with its exec leg and with raw exec on the same Pod.
func measureData(ctx context.Context, o options, s *client.Run, leg *helperLeg, raw rawExec) ([]comparison, error) {
	small, large := random(smallFile), random(largeFile)
	if _, err := s.WriteFile(ctx, "bench-4k", small); err != nil {
		return nil, fmt.Errorf("writing the 4 KiB file: %w", err)
	}
	if _, err := s.WriteFile(ctx, "bench-5m", large); err != nil {
		return nil, fmt.Errorf("writing the 5 MiB file: %w", err)
	}
	read := func(path string, want []byte) func(context.Context) error {
		return func(ctx context.Context) error {
			got, err := s.ReadFile(ctx, path)
			if err == nil && !bytes.Equal(got, want) {
				err = fmt.Errorf("read %s: %d bytes, not the %d written", path, len(got), len(want))
			}
			return err
		}
	}
	write := func(path string, content []byte) func(context.Context) error {
		return func(ctx context.Context) error { _, err := s.WriteFile(ctx, path, content); return err }
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
	trueCmd := &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: []string{"true"}}}}
	cases := []struct {
		name, baseline string
		n              int
		gateway, raw   func(context.Context) error
		op             func() *helperv1.Request
	}{
		{"Files read 4 KiB", "exec `cat`", o.n,
			read("bench-4k", small), cat("bench-4k", small),
			func() *helperv1.Request { return fileRequest(readOp("bench-4k")) }},
		{"StartCommand `true`", "exec `true`", o.n,
			func(ctx context.Context) error {
				r, err := s.Run(ctx, client.Command{Args: []string{"true"}})
				if err == nil && !r.Succeeded() {
					err = fmt.Errorf("true ended %s", r.State)
				}
				return err
			},
			func(ctx context.Context) error { _, err := raw.run(ctx, nil, "true"); return err },
			func() *helperv1.Request { return commandRequest(trueCmd) }},
		{"Files write 5 MiB", "exec `sh -c 'cat > f'`", o.nLarge,
			write("bench-5m", large),
			func(ctx context.Context) error {
				_, err := raw.run(ctx, large, "sh", "-c", "cat > bench-5m.raw")
				return err
			},
			func() *helperv1.Request { return fileRequest(writeOp("bench-5m.leg", large)) }},
		{"Files read 5 MiB", "exec `cat`", o.nLarge,
			read("bench-5m", large), cat("bench-5m", large),
			func() *helperv1.Request { return fileRequest(readOp("bench-5m")) }},
	}
	var out []comparison
	for _, c := range cases {
		logf("%s: %d samples per side", c.name, c.n)
		legCall := func(ctx context.Context) error { return leg.call(ctx, c.op()) }
		samples, err := measure(ctx, c.n, max(c.n/10, 3), c.gateway, legCall, c.raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		out = append(out, comparison{name: c.name, baseline: c.baseline, gateway: samples[0], leg: samples[1], raw: samples[2]})
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
	fmt.Fprintf(w, "\n| operation | node | samples per side | gateway p50 / p90 (ms) | exec leg alone p50 / p90 (ms) | baseline | baseline p50 / p90 (ms) | **gateway ÷ baseline** | gateway ÷ exec leg |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|\n")
	for i := range results[0].pairs {
		for _, r := range results {
			c := r.pairs[i]
			fmt.Fprintf(w, "| %s | %s | %d | %s / %s | %s / %s | %s | %s / %s | **%.2f** | %.2f |\n", c.name, r.node, len(c.gateway),
				ms(c.gateway.quantile(0.5)), ms(c.gateway.quantile(0.9)), ms(c.leg.quantile(0.5)), ms(c.leg.quantile(0.9)),
				c.baseline, ms(c.raw.quantile(0.5)), ms(c.raw.quantile(0.9)), c.ratio(), c.overhead())
		}
	}
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
