package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/dev/debroot"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devdeploy"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/dev/devsystem"
)

// Files in a stack's state directory.
const (
	pidFile   = "devstack.pid"
	logFile   = "devstack.log"
	readyFile = "ready"
	// InfoFile describes a ready stack (Info, JSON).
	InfoFile = "stack.json"
)

// Timeouts.
const (
	// startTimeout covers a cold build of the cluster binaries (~7–15 min on 2 cores) plus
	// start.
	startTimeout = 20 * time.Minute
	// stopTimeout covers the gateway's drain, the controller's and the cluster's stop — with
	// the real node's undo, whose process sweeps may take up to 30 s each.
	stopTimeout = 150 * time.Second
	// healthInterval is how often serve checks that every process still runs.
	healthInterval = time.Second
)

// DemoProfile is the profile the stack serves (devdeploy.SandboxProfile). On the real node
// it runs the executor image agents use (bash, python3, git from Debian's packages:
// devimage.DebianExecutorRef); on the fake nodes the image is a name only, and the node
// exec endpoint runs the local helper.
const DemoProfile = devdeploy.Profile

// demoProfiles is the stack's profiles file for the node kind.
func demoProfiles(node string) ([]byte, error) {
	p := devdeploy.SandboxProfile("registry.example/sandbox:1")
	if node == NodeReal {
		p = devdeploy.SandboxProfile(devimage.DebianExecutorRef)
		p["nodeSelector"] = map[string]string{devcluster.RealNodeLabel: "true"}
		p["tolerations"] = []map[string]string{{"key": devcluster.RealNodeTaint, "operator": "Exists", "effect": "NoSchedule"}}
	}
	out, err := yaml.Marshal(map[string]any{"profiles": map[string]any{DemoProfile: p}})
	if err != nil {
		return nil, fmt.Errorf("devstack: profiles: %w", err)
	}
	return out, nil
}

// Node kinds the executors run on.
const (
	// NodeReal is the real node (containerd, runc, a kubelet): executors run as containers
	// of the example executor image.
	NodeReal = "real"
	// NodeKWOK is the fake nodes only: executors are the local helper run as processes, for
	// machines without the real node's runtime (not root, no cgroups).
	NodeKWOK = "kwok"
)

// The owner the shell files name, for trying execctl by hand.
const (
	DemoIssuer = "https://idp.example"
	DemoOwner  = "demo-user"
)

// Options configure a stack.
type Options struct {
	StateDir string
	Nodes    int
	// Node is NodeReal or NodeKWOK.
	Node string
	// Helper is the local helper binary: inside the real node's images, or served as the
	// executor images' helper by the fake nodes. Pause is the real node's sandbox process
	// (internal/dev/pause, static).
	Helper, Pause string
	// Controller and Gateway are the binaries to run; both empty runs the cluster alone.
	Controller, Gateway string
	// E2B, with them, is the E2B front end to run beside them (e2b.env points E2B SDK
	// programs at it).
	E2B string
	// CRDs is the directory of the CRD manifests.
	CRDs string
	// DebianLock is the lock of the Debian executor image's packages (debroot.LockPath),
	// built for the real node.
	DebianLock string
	// Chart, when set, installs execplane with this Helm chart instead of running the
	// controller and the gateway as processes (internal/dev/devdeploy): the images of the
	// OCI layouts under Images pushed to the cluster's registry, helm at Helm. Only on the
	// real node, with the cluster's DNS.
	Chart, Images, Helm string
}

func (o Options) system() bool { return o.Controller != "" || o.Gateway != "" }

// Info describes a ready stack: how to reach it.
type Info struct {
	// Kubeconfig is the cluster's admin kubeconfig; KubectlDir holds kubectl.
	Kubeconfig, KubectlDir string
	// Namespace, ExecutorNamespace, GatewayAddress, ServerName and CAFile are empty for a
	// cluster alone. Namespace is the control plane's; ExecutorNamespace holds the
	// environments and their executor Pods.
	Namespace, ExecutorNamespace, GatewayAddress, ServerName, CAFile string
	// Caller may attest owners; Admin administers every environment.
	Caller, Admin Credentials
	// Profile is the profile the stack serves; Node the kind of node its executors run on.
	Profile, Node string
	// ClusterStartup and SystemStartup are how long each took to become ready.
	ClusterStartup, SystemStartup string
	// Chart is the Helm release when execplane was installed with the chart.
	Chart string `json:",omitempty"`
	// E2BURL is the E2B front end's URL (E2B_API_URL and E2B_SANDBOX_URL) when it runs;
	// e2b.env holds it with the stack's API key.
	E2BURL string `json:",omitempty"`
}

// Credentials are a client's certificate and key files.
type Credentials struct {
	Identity, CertFile, KeyFile string
}

// LoadInfo reads a ready stack's Info from its state directory.
func LoadInfo(stateDir string) (Info, error) {
	var info Info
	data, err := os.ReadFile(filepath.Join(stateDir, InfoFile))
	if errors.Is(err, os.ErrNotExist) {
		return info, fmt.Errorf("no stack is running in %s (start one with: %s up, or make demo)", stateDir, command)
	}
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(data, &info); err != nil {
		return info, fmt.Errorf("%s: %w", filepath.Join(stateDir, InfoFile), err)
	}
	return info, nil
}

// command is the binary that runs these commands (cmd/execplane-dev): the usage and the
// messages name it.
const command = "execplane-dev"

// RunCommand is the entry point of `execplane-dev [flags] up|down|status|serve`: `up` starts
// a stack that keeps running in the background, `down` stops it, `status` reports it, `serve`
// runs one in the foreground until interrupted. `up` re-executes the running binary
// (os.Executable) with args' flags and `--state-dir DIR serve`, so that binary must hand such
// arguments back to RunCommand.
func RunCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	fs.StringVar(&o.StateDir, "state-dir", ".state/dev", "directory for the stack's state, logs, kubeconfig and development keys")
	fs.IntVar(&o.Nodes, "nodes", -1, "number of fake nodes (default: 1 with --node "+NodeKWOK+", none with --node "+NodeReal+")")
	fs.StringVar(&o.Node, "node", NodeReal, "where executors run: "+NodeReal+" (containerd + runc + a kubelet on this machine; needs root) or "+NodeKWOK+" (the fake nodes run the local helper as a process)")
	fs.StringVar(&o.Helper, "helper", "", "local helper binary (static): in the real node's images, or served as "+devcluster.HelperImagePath+" by the fake nodes")
	fs.StringVar(&o.Pause, "pause", "", "the real node's sandbox binary (static; internal/dev/pause)")
	fs.StringVar(&o.Controller, "controller", "", "controller binary (with --gateway: run execplane on the cluster)")
	fs.StringVar(&o.Gateway, "gateway", "", "gateway binary")
	fs.StringVar(&o.E2B, "e2b", "", "with --controller and --gateway: the E2B front end binary, run beside them (source STATE/e2b.env to point E2B SDK programs at it)")
	fs.StringVar(&o.CRDs, "crds", "deploy/helm/execplane/files/crds", "directory of the CRD manifests")
	fs.StringVar(&o.DebianLock, "executor-debs-lock", debroot.LockPath, "the lock of the real node's executor image's Debian packages (make executor-debs fetches them)")
	fs.StringVar(&o.Chart, "chart", "", "install execplane with this Helm chart, as Pods on the real node (instead of --controller and --gateway)")
	fs.StringVar(&o.Images, "images", "bin/images", "with --chart: the OCI layouts of make images, pushed to the cluster's registry")
	fs.StringVar(&o.Helm, "helm", "", "with --chart: the helm binary")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %[1]s up|down|status [flags]\n       %[1]s demo [--state-dir DIR]\n       %[1]s bundle [flags] DIR   (a development security bundle)\n       %[1]s host [--against FILE]   (what the real node changes on this machine)\n       %[1]s images [flags]   (the product images as OCI layouts: make images)\n\n", command)
		fmt.Fprintln(stderr, "Starts the local Kubernetes cluster (and, with --controller and --gateway, execplane on it)")
		fmt.Fprintln(stderr, "in the background; `make demo` does this with the binaries of `make build`, then runs")
		fmt.Fprintln(stderr, "`demo`: a real client walked through ensure, acquire, files, a command, release, retire")
		fmt.Fprintln(stderr, "and delete-retired. `down` stops everything `up` started.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return cli.Usagef("want exactly one of up, down, status, serve")
	}
	var err error
	if o.StateDir, err = filepath.Abs(o.StateDir); err != nil {
		return err
	}
	for _, p := range []*string{&o.Helper, &o.Pause, &o.Controller, &o.Gateway, &o.E2B, &o.CRDs, &o.Chart, &o.Images, &o.Helm, &o.DebianLock} {
		if *p != "" {
			if *p, err = filepath.Abs(*p); err != nil {
				return err
			}
		}
	}
	if (o.Controller == "") != (o.Gateway == "") {
		return cli.Usagef("--controller and --gateway go together")
	}
	if o.E2B != "" && !o.system() {
		return cli.Usagef("--e2b runs beside --controller and --gateway")
	}
	if o.Chart != "" && (o.system() || o.Node != NodeReal || o.Helm == "") {
		return cli.Usagef("--chart installs execplane on the real node (--node %s) with --helm, instead of --controller and --gateway", NodeReal)
	}
	if o.system() && o.Helper == "" {
		return cli.Usagef("--helper is required to run execplane (the executors run it)")
	}
	starts := fs.Arg(0) == "up" || fs.Arg(0) == "serve"
	if o.Nodes < -1 {
		return cli.Usagef("--nodes: want a number of fake nodes, not %d", o.Nodes)
	}
	switch o.Node {
	case NodeKWOK:
		if o.Nodes == 0 {
			return cli.Usagef("--node %s runs executors on fake nodes: --nodes must be at least 1", NodeKWOK)
		}
	case NodeReal:
		if starts && (o.Helper == "" || o.Pause == "") {
			return cli.Usagef("--node %s needs --helper and --pause (the images are built from them)", NodeReal)
		}
	default:
		return cli.Usagef("--node: want %s or %s, not %q", NodeReal, NodeKWOK, o.Node)
	}
	switch fs.Arg(0) {
	case "serve":
		return serve(ctx, o, stderr)
	case "up":
		return up(ctx, o, withoutCommand(args), stdout, stderr)
	case "down":
		return down(o.StateDir, stdout)
	case "status":
		return status(o.StateDir, stdout)
	default:
		return cli.Usagef("unknown command %q: want up, down, status or serve", fs.Arg(0))
	}
}

// serve runs a stack in the foreground until ctx ends or a process of it exits.
func serve(ctx context.Context, o Options, stderr io.Writer) error {
	logf := func(f string, a ...any) { fmt.Fprintf(stderr, time.Now().Format("15:04:05 ")+f+"\n", a...) }
	// A stack starts afresh: new development material, no runs of an earlier stack (the
	// directory "execctl" is the caller's execctl's EXECPLANE_STATE_DIR, where it keeps the
	// runs it holds; the shell files name it).
	for _, f := range []string{readyFile, InfoFile, "system", "execctl", "caller.env", "admin.env", e2bEnvFile, e2bDir} {
		if err := os.RemoveAll(filepath.Join(o.StateDir, f)); err != nil {
			return err
		}
	}
	defer func() {
		for _, f := range []string{readyFile, InfoFile} {
			_ = os.Remove(filepath.Join(o.StateDir, f))
		}
	}()
	// The real node alone unless fake nodes are asked for: KWOK is then neither run nor built.
	copts := devcluster.Options{StateDir: filepath.Join(o.StateDir, "cluster"), Nodes: max(o.Nodes, 0), Logf: logf,
		NoFakeNodes: o.Node == NodeReal && o.Nodes <= 0}
	if o.Helper != "" {
		copts.ImageFiles = map[string]string{devcluster.HelperImagePath: o.Helper}
	}
	if o.Node == NodeReal {
		archive := filepath.Join(o.StateDir, "images.tar")
		lock := o.DebianLock
		if o.Chart != "" {
			lock = "" // the chart's profile runs make images' executor, pulled from the registry
		}
		err := devimage.WriteStack(archive, devimage.Binaries{Helper: o.Helper, Pause: o.Pause, Busybox: devimage.BusyboxPath, DebianLock: lock})
		if errors.Is(err, debroot.ErrNotFetched) {
			return fmt.Errorf("building the real node's images: %w: make executor-debs", err)
		}
		if err != nil {
			return fmt.Errorf("building the real node's images (make node-packages installs busybox-static): %w", err)
		}
		copts.RealNode = &devcluster.RealNodeOptions{Images: archive, SandboxImage: devimage.PauseRef, ClusterDNS: o.Chart != ""}
	}
	c, err := devcluster.Start(ctx, copts)
	if err != nil {
		return err
	}
	defer func() {
		// The real node's stop undoes its changes to the machine and checks them: say so
		// when it could not (the log is what `down` points at).
		if err := c.Stop(); err != nil {
			logf("the cluster's stop: %v", err)
		}
	}()
	info := Info{Kubeconfig: c.Kubeconfig(), KubectlDir: c.BinDir(), ClusterStartup: c.StartupTime.Round(time.Millisecond).String()}
	var sys *devsystem.System
	if o.system() {
		start := time.Now()
		if sys, err = startSystem(ctx, c, o, logf); err != nil {
			return err
		}
		defer sys.Stop()
		m := sys.Material
		info.Namespace, info.ExecutorNamespace = sys.Namespace(), sys.ExecutorNamespace()
		info.GatewayAddress, info.ServerName, info.CAFile = sys.Gateways[0].Listen, "localhost", m.CACert
		info.Caller = Credentials{Identity: m.Caller.Identity, CertFile: m.Caller.CertFile, KeyFile: m.Caller.KeyFile}
		info.Admin = Credentials{Identity: m.Administrator.Identity, CertFile: m.Administrator.CertFile, KeyFile: m.Administrator.KeyFile}
		info.Profile, info.Node = DemoProfile, o.Node
		info.SystemStartup = time.Since(start).Round(time.Millisecond).String()
		logf("execplane ready in %s: gateway %s, namespace %s, executors in %s", info.SystemStartup, info.GatewayAddress, info.Namespace, info.ExecutorNamespace)
	}
	var e2b *frontEnd
	if o.E2B != "" {
		if e2b, err = startE2B(ctx, o, sys, logf); err != nil {
			return err
		}
		defer e2b.stop()
		info.E2BURL = e2b.url
		if err := writeE2BEnv(o.StateDir, e2b.url, e2b.key); err != nil {
			return err
		}
	}
	if o.Chart != "" {
		start := time.Now()
		if err := deploy(ctx, c, o, &info, logf); err != nil {
			return err
		}
		info.SystemStartup = time.Since(start).Round(time.Millisecond).String()
		logf("execplane installed with helm in %s: gateway %s (NodePort), namespace %s, executors in %s", info.SystemStartup, info.GatewayAddress, info.Namespace, info.ExecutorNamespace)
	}
	if err := writeInfo(o.StateDir, info); err != nil {
		return err
	}
	tick := time.NewTicker(healthInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			logf("stopping")
			return nil
		case <-tick.C:
			if err := c.Healthy(); err != nil {
				return err
			}
			if sys != nil {
				if err := sys.Exited(); err != nil {
					return err
				}
			}
			if e2b != nil {
				if err := e2b.exited(); err != nil {
					return err
				}
			}
		}
	}
}

func startSystem(ctx context.Context, c *devcluster.Cluster, o Options, logf func(string, ...any)) (*devsystem.System, error) {
	logf("installing the CRD from %s", o.CRDs)
	if _, err := c.InstallCRDs(ctx, o.CRDs); err != nil {
		return nil, err
	}
	// Two namespaces, as the chart deploys it: the control plane's, and the executors'.
	ns, err := c.CreateNamespace(ctx, "execplane")
	if err != nil {
		return nil, err
	}
	executors, err := c.CreateNamespace(ctx, "execplane-executors")
	if err != nil {
		return nil, err
	}
	profiles, err := demoProfiles(o.Node)
	if err != nil {
		return nil, err
	}
	logf("starting the controller and a gateway in namespace %s, executors in %s", ns, executors)
	return devsystem.Start(ctx, devsystem.Options{Kubeconfig: c.Kubeconfig(), Namespace: ns, ExecutorNamespace: executors, Dir: filepath.Join(o.StateDir, "system"),
		ControllerBin: o.Controller, GatewayBin: o.Gateway, Gateways: 1, HelperPath: devcluster.HelperImagePath,
		Profiles: profiles, ControllerArgs: []string{"--log-format", "text"}, GatewayArgs: []string{"--log-format", "text"}})
}

// deploy installs the chart on the real node (internal/dev/devdeploy) and describes it in
// info.
func deploy(ctx context.Context, c *devcluster.Cluster, o Options, info *Info, logf func(string, ...any)) error {
	images, err := devimage.ReadLayouts(o.Images, "gateway", "controller", "executor")
	if err != nil {
		return err
	}
	logf("pushing the images of %s and installing %s with helm", o.Images, o.Chart)
	dir := filepath.Join(o.StateDir, "deploy")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	helmLog, err := os.Create(filepath.Join(o.StateDir, "helm.log"))
	if err != nil {
		return err
	}
	defer helmLog.Close()
	d, err := devdeploy.Install(ctx, devdeploy.Options{Cluster: c, Helm: o.Helm, Chart: o.Chart, Dir: dir, Images: images, Log: helmLog})
	if err != nil {
		return err
	}
	b := d.Bundle
	info.Namespace, info.ExecutorNamespace = d.Namespace, d.ExecutorNamespace
	info.GatewayAddress, info.ServerName, info.CAFile = d.GatewayAddress, d.ServerName, b.CACert
	info.Caller = Credentials{Identity: b.Caller.Identity, CertFile: b.Caller.CertFile, KeyFile: b.Caller.KeyFile}
	info.Admin = Credentials{Identity: b.Administrator.Identity, CertFile: b.Administrator.CertFile, KeyFile: b.Administrator.KeyFile}
	info.Profile, info.Node, info.Chart = devdeploy.Profile, o.Node, d.Release
	return nil
}

// writeInfo writes the Info and the shell files, then marks the stack ready.
func writeInfo(dir string, info Info) error {
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, InfoFile), append(data, '\n'), 0o600); err != nil {
		return err
	}
	if info.GatewayAddress != "" {
		for name, who := range map[string]Credentials{"caller.env": info.Caller, "admin.env": info.Admin} {
			env := fmt.Sprintf("export EXECPLANE_ADDRESS=%s\nexport EXECPLANE_SERVER_NAME=%s\nexport EXECPLANE_CA=%s\nexport EXECPLANE_CERT=%s\nexport EXECPLANE_KEY=%s\n"+
				"export EXECPLANE_ISSUER=%s\nexport EXECPLANE_OWNER=%s\nexport EXECPLANE_STATE_DIR=%s\nexport KUBECONFIG=%s\nexport PATH=%s:$PATH\n",
				shq(info.GatewayAddress), shq(info.ServerName), shq(info.CAFile), shq(who.CertFile), shq(who.KeyFile), shq(DemoIssuer), shq(DemoOwner),
				shq(filepath.Join(dir, "execctl")), shq(info.Kubeconfig), shq(info.KubectlDir))
			if err := os.WriteFile(filepath.Join(dir, name), []byte(env), 0o600); err != nil {
				return err
			}
		}
	}
	return os.WriteFile(filepath.Join(dir, readyFile), nil, 0o600)
}
