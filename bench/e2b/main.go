// Command e2b measures the E2B front end against the Go SDK on the same local cluster, node
// and profile, each figure a ratio against a baseline measured in the same run (issue: the
// E2B-compatible API):
//
//   - commands.run('echo hi') through the front end with the unmodified E2B SDK ÷ the Go
//     SDK's durable RunCommand of the same command (`/bin/bash -l -c 'echo hi'`) on a warm
//     session;
//   - files.write and files.read of 1 MiB ÷ the Go SDK's WriteFile and ReadFile;
//   - Sandbox.create() from a warm pool (absolute, and ÷ the Go SDK's Ensure from the pool),
//     and cold (no pool).
//
// The E2B SDK runs in node (test/e2b/bench.mjs, reading one operation per line); the sides
// alternate sample by sample so that drift weighs on both alike.
//
//	go run ./bench/e2b        (or: make bench-e2b; -nodes kwok,real for the real node too)
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/execplane/execplane/internal/dev/debroot"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/dev/devsystem"
	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/kube"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/pkg/client"
)

// The benchmark's profiles: the same executor, without and with a warm pool.
const (
	coldProfile   = "bench"
	pooledProfile = "bench-pooled"
	fileBytes     = 1 << 20
)

// Node kinds the executor runs on.
const (
	nodeKWOK = "kwok"
	nodeReal = "real"
)

// profilesYAML is the cold profile and the pooled one, whose pool is sized for the warm
// creates of both sides.
func profilesYAML(node string, pool int) string {
	image, placement := "registry.example/bench:1", ""
	if node == nodeReal {
		// The executor image agents use (bash, python3; /home/user a link to the workspace).
		image, placement = devimage.DebianExecutorRef, devcluster.RealNodePlacement
	}
	entry := func(name, extra string) string {
		return fmt.Sprintf(`  %s:
    image: %s
    storageClass: %s
    storageSize: 1Gi
    memoryLimit: 256Mi
    tmpSizeLimit: 16Mi
    maxFileBytes: 8388608
    maxCommandBytes: 65536
    maxCommandDuration: 1m
    maxEnvironments: 200
%s%s`, name, image, devcluster.StorageClassName, placement, extra)
	}
	return "profiles:\n" + entry(coldProfile, "") + entry(pooledProfile, fmt.Sprintf("    warmPool:\n      size: %d\n", pool))
}

type options struct {
	n, nFiles, nCreate, nCold          int
	controller, gateway, helper, pause string
	e2b, nodeDir                       string
	nodes                              []string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench/e2b:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return err
	}
	var o options
	fs := flag.NewFlagSet("bench/e2b", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 200, "samples per side of commands.run('echo hi')")
	fs.IntVar(&o.nFiles, "n-files", 40, "samples per side of the 1 MiB write and read")
	fs.IntVar(&o.nCreate, "n-create", 20, "samples per side of a create from the warm pool")
	fs.IntVar(&o.nCold, "n-cold", 10, "samples of a cold create")
	fs.StringVar(&o.controller, "controller", filepath.Join(root, "bin/controller"), "controller binary (make build)")
	fs.StringVar(&o.gateway, "gateway", filepath.Join(root, "bin/gateway"), "gateway binary (make build)")
	fs.StringVar(&o.helper, "helper", filepath.Join(root, "bin/helper"), "static helper binary (make build)")
	fs.StringVar(&o.pause, "pause", filepath.Join(root, "bin/pause"), "the real node's static sandbox binary (make bin/pause)")
	fs.StringVar(&o.e2b, "e2b", filepath.Join(root, "bin/e2b"), "the E2B front end (make build)")
	fs.StringVar(&o.nodeDir, "sdk-dir", filepath.Join(root, "test/e2b"), "the folder of bench.mjs with the e2b SDK installed (make npm-packages)")
	nodes := fs.String("nodes", nodeKWOK, "the node kinds to measure on, in order: "+nodeKWOK+" and "+nodeReal)
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.nodes = strings.Split(*nodes, ",")
	for _, bin := range []string{o.controller, o.gateway, o.helper, o.e2b, filepath.Join(o.nodeDir, "node_modules/e2b/package.json")} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%w (run make build bin/pause npm-packages first)", err)
		}
	}
	var results []result
	for _, node := range o.nodes {
		if node != nodeKWOK && node != nodeReal {
			return fmt.Errorf("-nodes: unknown node kind %q", node)
		}
		r, err := benchNode(ctx, o, root, node)
		if err != nil {
			return fmt.Errorf("on the %s node: %w", node, err)
		}
		results = append(results, r)
	}
	report(os.Stdout, results)
	return nil
}

// result is one node kind's samples, each pair E2B SDK then Go SDK.
type result struct {
	node              string
	echo, write, read [2]latencies
	// httpWrite and httpRead are the same /files calls made by Go's HTTP client (a plain
	// multipart POST, a GET) ÷ the Go SDK's: the front end's own cost, without node's.
	httpWrite, httpRead    [2]latencies
	warmCreate, coldCreate [2]latencies
}

type latencies []time.Duration

func (l latencies) p(q float64) time.Duration {
	s := slices.Clone(l)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

func benchNode(ctx context.Context, o options, root, node string) (result, error) {
	res := result{node: node}
	dir, err := os.MkdirTemp("", "bench-e2b-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	copts := devcluster.Options{StateDir: filepath.Join(dir, "cluster"), ImageFiles: map[string]string{devcluster.HelperImagePath: o.helper}}
	if node == nodeReal {
		archive := filepath.Join(dir, "images.tar")
		if err := devimage.WriteStack(archive, devimage.Binaries{Helper: o.helper, Pause: o.pause, Busybox: devimage.BusyboxPath,
			DebianLock: filepath.Join(root, debroot.LockPath)}); err != nil {
			return res, err
		}
		copts.RealNode = &devcluster.RealNodeOptions{Images: archive, SandboxImage: devimage.PauseRef}
	}
	logf("starting the local cluster (executors on the %s node)", node)
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
	logf("starting the controller, a gateway and the E2B front end")
	sys, err := devsystem.Start(ctx, devsystem.Options{Kubeconfig: c.Kubeconfig(), Namespace: ns, Dir: filepath.Join(dir, "system"),
		ControllerBin: o.controller, GatewayBin: o.gateway, Gateways: 1, HelperPath: devcluster.HelperImagePath,
		Profiles: []byte(profilesYAML(node, 2*o.nCreate))})
	if err != nil {
		return res, err
	}
	defer sys.Stop()
	files, err := sys.ClientFiles(devsystem.Caller)
	if err != nil {
		return res, err
	}
	url, key, stopFrontEnd, err := startFrontEnd(ctx, o.e2b, dir, sys, files)
	if err != nil {
		return res, err
	}
	defer stopFrontEnd()
	clients, err := kube.NewClients(kube.ClientOptions{Kubeconfig: c.Kubeconfig(), UserAgent: "bench-e2b", QPS: 100, Burst: 200})
	if err != nil {
		return res, err
	}

	sdk, err := client.Dial(client.Config{Address: sys.Gateways[0].Listen, CAFile: files.CAFile, CertFile: files.CertFile, KeyFile: files.KeyFile, ServerName: files.ServerName})
	if err != nil {
		return res, err
	}
	defer sdk.Close()
	owner := client.Owner{Issuer: "https://idp.example", Subject: "bench-go"}
	env, err := sdk.Ensure(ctx, client.EnsureRequest{Owner: owner, BindingID: "baseline", Profile: coldProfile})
	if err != nil {
		return res, err
	}
	goRun, err := env.Acquire(ctx, client.AcquireOptions{RunID: "bench", TTL: client.MaxRunTTL})
	if err != nil {
		return res, err
	}
	defer goRun.Close(ctx) //nolint:errcheck // the cluster goes with the run

	js, err := startNode(ctx, o.nodeDir, url, key)
	if err != nil {
		return res, err
	}
	defer js.close()
	id, token, err := createSandbox(ctx, url, key, "cold")
	if err != nil {
		return res, err
	}
	if _, err := js.do("connect " + id); err != nil {
		return res, err
	}

	payload := make([]byte, fileBytes)
	_, _ = rand.Read(payload)
	echo := client.Command{Args: []string{"/bin/bash", "-l", "-c", "echo hi"}}
	goEcho := func(ctx context.Context) error {
		var out []byte
		for ev, err := range goRun.Stream(ctx, echo, client.StreamOptions{Detach: true}) {
			if err != nil {
				return err
			}
			if ev.Output != nil {
				out = append(out, ev.Output.Data...)
			}
			if ev.Ended != nil && string(out) != "hi\n" {
				return fmt.Errorf("echo answered %q", out)
			}
		}
		return nil
	}
	logf("commands.run('echo hi'): %d samples per side", o.n)
	if res.echo, err = pairs(ctx, o.n, 10, js, "echo", goEcho); err != nil {
		return res, err
	}
	if _, err := goRun.WriteFile(ctx, "bench-1m", payload); err != nil {
		return res, err
	}
	logf("files write and read of 1 MiB: %d samples per side", o.nFiles)
	if res.write, err = pairs(ctx, o.nFiles, 3, js, "write", func(ctx context.Context) error {
		_, err := goRun.WriteFile(ctx, "bench-1m", payload)
		return err
	}); err != nil {
		return res, err
	}
	if res.read, err = pairs(ctx, o.nFiles, 3, js, "read", func(ctx context.Context) error {
		b, err := goRun.ReadFile(ctx, "bench-1m")
		if err == nil && len(b) != fileBytes {
			err = fmt.Errorf("read %d bytes", len(b))
		}
		return err
	}); err != nil {
		return res, err
	}

	logf("the same /files calls from Go's HTTP client: %d samples per side", o.nFiles)
	envd := envdClient{url: url, sandbox: id, token: token}
	if res.httpWrite, err = goPairs(ctx, o.nFiles, 3, func(ctx context.Context) error { return envd.write(ctx, "bench-1m", payload) }, func(ctx context.Context) error {
		_, err := goRun.WriteFile(ctx, "bench-1m", payload)
		return err
	}); err != nil {
		return res, err
	}
	if res.httpRead, err = goPairs(ctx, o.nFiles, 3, func(ctx context.Context) error { return envd.read(ctx, "bench-1m", fileBytes) }, func(ctx context.Context) error {
		_, err := goRun.ReadFile(ctx, "bench-1m")
		return err
	}); err != nil {
		return res, err
	}

	logf("creates from a warm pool of %d: %d samples per side", 2*o.nCreate, o.nCreate)
	var created []string
	for i := range o.nCreate {
		for j := range 2 {
			// Each create from a full pool on a quiet system (the refill of the one before
			// done, untimed): the latency of a create, not of a create under a refill.
			if err := poolFull(ctx, clients.Kube, ns, 2*o.nCreate); err != nil {
				return res, err
			}
			if (i+j)%2 == 0 {
				d, id, err := js.create("warm")
				if err != nil {
					return res, err
				}
				res.warmCreate[0], created = append(res.warmCreate[0], d), append(created, id)
				continue
			}
			t0 := time.Now()
			if _, err := sdk.Ensure(ctx, client.EnsureRequest{Owner: owner, BindingID: fmt.Sprintf("warm-%d", i), Profile: pooledProfile}); err != nil {
				return res, err
			}
			res.warmCreate[1] = append(res.warmCreate[1], time.Since(t0))
		}
	}
	logf("cold creates: %d samples", o.nCold)
	for range o.nCold {
		d, id, err := js.create("cold")
		if err != nil {
			return res, err
		}
		res.coldCreate[0], created = append(res.coldCreate[0], d), append(created, id)
	}
	for _, id := range created {
		if err := killSandbox(ctx, url, key, id); err != nil {
			return res, err
		}
	}
	return res, nil
}

// pairs alternates the E2B side (op in node) and the Go side n times after warmup, rotating
// which goes first.
func pairs(ctx context.Context, n, warmup int, js *nodeSide, op string, goSide func(context.Context) error) ([2]latencies, error) {
	var out [2]latencies
	for i := range warmup + n {
		for j := range 2 {
			var d time.Duration
			if (i+j)%2 == 0 {
				var err error
				if d, err = js.do(op); err != nil {
					return out, err
				}
				if i >= warmup {
					out[0] = append(out[0], d)
				}
				continue
			}
			t0 := time.Now()
			if err := goSide(ctx); err != nil {
				return out, err
			}
			if i >= warmup {
				out[1] = append(out[1], time.Since(t0))
			}
		}
	}
	return out, nil
}

// poolFull waits until the pooled profile's pool has n ready members, each Pod ready and
// its claim bound (untimed).
func poolFull(ctx context.Context, kube kubernetes.Interface, ns string, n int) error {
	sel := metav1.ListOptions{LabelSelector: executor.LabelPool + "=" + pooledProfile}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, sel)
		if err != nil {
			return err
		}
		claims, err := kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, sel)
		if err != nil {
			return err
		}
		bound := map[string]bool{}
		for _, c := range claims.Items {
			bound[c.Name] = c.Status.Phase == corev1.ClaimBound
		}
		ready := 0
		for i := range pods.Items {
			p := &pods.Items[i]
			for _, c := range p.Status.Conditions {
				if p.DeletionTimestamp == nil && bound[p.Name] && c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the warm pool has %d of %d members ready after 5 minutes", ready, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startFrontEnd runs bin/e2b against the system's gateway as the client files' identity,
// with one API key and the templates "cold" and "warm"; it returns its URL and the key.
func startFrontEnd(ctx context.Context, bin, dir string, sys *devsystem.System, files security.ClientFiles) (string, string, func(), error) {
	var raw [20]byte
	_, _ = rand.Read(raw[:])
	key := "e2b_" + hex.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(key))
	var token [32]byte
	_, _ = rand.Read(token[:])
	if err := os.WriteFile(filepath.Join(dir, "token.key"), []byte(base64.StdEncoding.EncodeToString(token[:])), 0o600); err != nil {
		return "", "", nil, err
	}
	keys := fmt.Sprintf("version: 1\ntokenKeyFile: token.key\nkeys:\n  - {id: bench, sha256: %s, owner: {issuer: https://idp.example, subject: bench-e2b}}\n", hex.EncodeToString(sum[:]))
	if err := os.WriteFile(filepath.Join(dir, "keys.yaml"), []byte(keys), 0o600); err != nil {
		return "", "", nil, err
	}
	addrs, err := devcluster.FreeAddrs(2)
	if err != nil {
		return "", "", nil, err
	}
	log, err := os.Create(filepath.Join(dir, "e2b.log"))
	if err != nil {
		return "", "", nil, err
	}
	cmd := exec.Command(bin, "--listen-address", addrs[0], "--diagnostics-address", addrs[1], "--gateway", sys.Gateways[0].Listen,
		"--gateway-server-name", files.ServerName, "--gateway-ca", files.CAFile, "--client-cert", files.CertFile, "--client-key", files.KeyFile,
		"--keys", filepath.Join(dir, "keys.yaml"), "--template", "cold="+coldProfile, "--template", "warm="+pooledProfile)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return "", "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		log.Close()
	}
	url := "http://" + addrs[0]
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(url + "/sandboxes")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return url, key, stop, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return "", "", nil, fmt.Errorf("the front end did not answer within 30 s (log: %s)", log.Name())
		}
		select {
		case <-ctx.Done():
			stop()
			return "", "", nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// killSandbox kills a sandbox through the control API (untimed).
func killSandbox(ctx context.Context, url, key, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, url+"/sandboxes/"+id, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("kill %s: %s", id, resp.Status)
	}
	return nil
}

// createSandbox creates a sandbox through the control API (untimed) and returns its id and
// envd access token.
func createSandbox(ctx context.Context, url, key, template string) (string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v2/sandboxes", strings.NewReader(`{"templateID":"`+template+`","timeout":3600}`))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	var sb struct {
		SandboxID string `json:"sandboxID"`
		Token     string `json:"envdAccessToken"`
		Message   string `json:"message"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&sb); err != nil || resp.StatusCode != http.StatusCreated {
		return "", "", fmt.Errorf("create: %s %s %v", resp.Status, sb.Message, err)
	}
	return sb.SandboxID, sb.Token, nil
}

func report(w io.Writer, results []result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "node\tfigure\tp50\tp90\tbaseline\tbaseline p50\tratio p50\tsamples\n")
	for _, r := range results {
		row := func(name, baseline string, l [2]latencies) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%d\n", r.node, name, ms(l[0].p(0.5)), ms(l[0].p(0.9)), baseline, ms(l[1].p(0.5)),
				float64(l[0].p(0.5))/float64(l[1].p(0.5)), len(l[0]))
		}
		row("commands.run('echo hi')", "Go SDK durable RunCommand", r.echo)
		row("files.write 1 MiB", "Go SDK WriteFile", r.write)
		row("files.read 1 MiB", "Go SDK ReadFile", r.read)
		row("POST /files 1 MiB, Go HTTP client", "Go SDK WriteFile", r.httpWrite)
		row("GET /files 1 MiB, Go HTTP client", "Go SDK ReadFile", r.httpRead)
		row("Sandbox.create() warm", "Go SDK Ensure (pool)", r.warmCreate)
		fmt.Fprintf(tw, "%s\tSandbox.create() cold\t%s\t%s\t-\t-\t-\t%d\n", r.node, ms(r.coldCreate[0].p(0.5)), ms(r.coldCreate[0].p(0.9)), len(r.coldCreate[0]))
	}
	tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}
