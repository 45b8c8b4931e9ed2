package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Deadlines of cluster start-up, generous for a loaded 2-core machine (measured warm start:
// apiserver ready in ~2.5 s, everything in ~3.5 s).
const (
	apiServerReadyTimeout = 90 * time.Second
	clusterReadyTimeout   = 90 * time.Second
	pollInterval          = 100 * time.Millisecond
	// nodeLeaseSeconds is KWOK's node lease duration; without it KWOK creates no Leases and
	// kube-controller-manager eventually marks the nodes unknown and evicts their Pods.
	nodeLeaseSeconds = 40
	// serviceCIDR and podCIDR are private ranges: the apiserver allocates from them, and
	// only the real node's kube-proxy routes to Service addresses (on that node).
	serviceCIDR = "10.0.0.0/24"
	podCIDR     = "10.244.0.0/16"
	// apiServiceIP is the kubernetes Service's address (the first of serviceCIDR).
	apiServiceIP = "10.0.0.1"
)

// Options configure Start.
type Options struct {
	// StateDir holds PKI, logs, etcd data, PID files and the mapped volumes. Required.
	StateDir string
	// BinDir holds the binaries; empty means FindBinaries.
	BinDir string
	// Nodes is the number of fake nodes (default 1).
	Nodes int
	// NoFakeNodes, with RealNode, runs the real node alone: no fake node, no KWOK and no
	// node exec endpoint, so that neither needs building (make demo).
	NoFakeNodes bool
	// ImageFiles maps paths inside executor images to local files (see NodeExecConfig).
	ImageFiles map[string]string
	// RealNode, when set, joins a real node (containerd, runc, a kubelet) beside the fake
	// ones: see node.go. It needs root and changes the machine until Stop.
	RealNode *RealNodeOptions
	// Logf reports progress; nil is quiet.
	Logf func(format string, args ...any)
	// VolumeBindDelay and PodStartDelay make the fake node as slow as a real cluster for
	// benchmarks of the cold path: a claim's volume is provisioned this long after the claim
	// is first seen, and a scheduled Pod on a fake node reports Ready this long after it
	// could (KWOK's pod-ready stage delayed). Zero: at once. The real node is unaffected.
	VolumeBindDelay, PodStartDelay time.Duration
}

// Cluster is a running local cluster.
type Cluster struct {
	opts     Options
	pki      *PKI
	procs    processes
	nodeExec *NodeExec
	// stopPodWatch ends the node exec endpoint's watch of Pods.
	stopPodWatch func()
	restConfig   *rest.Config
	kube         *kubernetes.Clientset
	kubeconfig   string
	nodeNames    []string
	realNode     *realNode
	// apiHost is the address the API server listens on and advertises.
	apiHost string
	// registry is the local registry (with the real node); dnsImage CoreDNS's reference.
	registry *localRegistry
	dnsImage string
	// stopBackground ends the in-process controllers (the provisioner).
	stopBackground context.CancelFunc
	// StartupTime is how long Start took.
	StartupTime time.Duration
}

// The controller manager and the scheduler run without their client-side rate limits (20
// and 50 QPS by default), as kwokctl does: on fake nodes those limits, not the API server,
// would bound how fast claims bind and Pods schedule in scale tests.
const (
	kubeAPIQPS   = "--kube-api-qps=5000"
	kubeAPIBurst = "--kube-api-burst=10000"
)

// Start brings the cluster up and returns when the apiserver is ready, every node is Ready
// and untainted, and kube-controller-manager has created the default ServiceAccount. On
// failure everything started is stopped again.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	begin := time.Now()
	if opts.StateDir == "" {
		return nil, errors.New("devcluster: StateDir is required")
	}
	if opts.NoFakeNodes {
		if opts.RealNode == nil {
			return nil, errors.New("devcluster: NoFakeNodes needs RealNode: a cluster needs a node")
		}
		opts.Nodes = 0
	} else if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.BinDir == "" {
		if opts.BinDir, err = FindBinaries(ctx, opts.Nodes > 0); err != nil {
			return nil, err
		}
	}
	if err := checkBinaries(opts.BinDir, opts.Nodes > 0); err != nil {
		return nil, err
	}
	if opts.StateDir, err = filepath.Abs(opts.StateDir); err != nil {
		return nil, err
	}
	c = &Cluster{opts: opts}
	for i := range opts.Nodes {
		c.nodeNames = append(c.nodeNames, fmt.Sprintf("devcluster-node-%d", i))
	}
	// "return nil, err" clears the named result before deferred calls run: stop what was
	// started through a copy.
	started := c
	defer func() {
		if err != nil {
			if stopErr := started.Stop(); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
		}
	}()
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return nil, err
	}
	if c.pki, err = generatePKI(filepath.Join(opts.StateDir, "pki")); err != nil {
		return nil, fmt.Errorf("devcluster: PKI: %w", err)
	}
	// The API server listens on loopback; with a real node, on the node's address instead
	// (on lo, routed nowhere), which Pods reach through their bridge and which it advertises
	// as the kubernetes Service's endpoint, as a node's API server does.
	c.apiHost = "127.0.0.1"
	if opts.RealNode != nil {
		if err := c.prepareRealNode(ctx); err != nil {
			return nil, err
		}
		c.apiHost = realNodeIP
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort, kwokPort := ports[0], ports[1], ports[2], ports[3]
	if err := c.startEtcd(etcdPort, peerPort); err != nil {
		return nil, err
	}
	if err := c.startAPIServer(etcdPort, apiPort); err != nil {
		return nil, err
	}
	opts.Logf("devcluster: kube-apiserver on %s", c.apiURL(apiPort))
	if err := c.waitAPIServer(ctx); err != nil {
		return nil, err
	}
	opts.Logf("devcluster: kube-apiserver ready after %s", time.Since(begin).Round(10*time.Millisecond))
	bin := func(name string) string { return filepath.Join(opts.BinDir, name) }
	// The controller manager and the scheduler are supervised (started again when they exit),
	// as a kubelet does with a control plane's static Pods.
	if _, err := c.procs.startSupervised(opts.StateDir, "kube-controller-manager", bin("kube-controller-manager"),
		"--kubeconfig="+c.kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--service-account-private-key-file="+c.pki.ServiceAccountKey, "--root-ca-file="+c.pki.CACert,
		"--use-service-account-credentials=false", "--service-cluster-ip-range="+serviceCIDR,
		kubeAPIQPS, kubeAPIBurst); err != nil {
		return nil, err
	}
	if _, err := c.procs.startSupervised(opts.StateDir, "kube-scheduler", bin("kube-scheduler"),
		"--kubeconfig="+c.kubeconfig, "--leader-elect=false", "--secure-port=0", kubeAPIQPS, kubeAPIBurst); err != nil {
		return nil, err
	}
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	c.stopBackground = stopBackground
	if err := runProvisioner(bg, c.kube, filepath.Join(opts.StateDir, "node", "volumes"), opts.VolumeBindDelay); err != nil {
		return nil, err
	}
	var execPort int
	if opts.Nodes > 0 {
		if execPort, err = c.startNodeExec(); err != nil {
			return nil, err
		}
		if err := c.startKWOK(execPort, kwokPort); err != nil {
			return nil, err
		}
	}
	if err := c.installFixtures(ctx); err != nil {
		return nil, err
	}
	if opts.RealNode != nil {
		if err := c.startRealNode(ctx, c.apiURL(apiPort)); err != nil {
			return nil, err
		}
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	if opts.RealNode != nil && opts.RealNode.ClusterDNS {
		dir, err := FindDNSBinaries(ctx)
		if err != nil {
			return nil, err
		}
		if c.dnsImage, err = c.startDNS(ctx, dir); err != nil {
			return nil, err
		}
	}
	if opts.RealNode != nil && opts.RealNode.CSI {
		if err := c.startCSI(ctx, bg); err != nil {
			return nil, err
		}
	}
	c.StartupTime = time.Since(begin)
	if err := c.writeEnvFile(apiPort, execPort); err != nil {
		return nil, err
	}
	var nodes []string
	if opts.Nodes > 0 {
		nodes = append(nodes, fmt.Sprintf("%d fake node(s)", opts.Nodes))
	}
	if c.realNode != nil {
		nodes = append(nodes, "the real node "+RealNodeName)
	}
	opts.Logf("devcluster: ready in %s (%s); KUBECONFIG=%s", c.StartupTime.Round(10*time.Millisecond), strings.Join(nodes, " and "), c.kubeconfig)
	return c, nil
}

// apiURL is the API server's URL.
func (c *Cluster) apiURL(port int) string {
	return "https://" + net.JoinHostPort(c.apiHost, strconv.Itoa(port))
}

// Stop stops everything Start started. It is safe to call more than once.
func (c *Cluster) Stop() error {
	var errs []error
	node := c.realNode
	c.realNode = nil
	if node != nil {
		// The node's programs and Pods first, while the API server still answers the
		// kubelet (and before its Pods' watches hold the API server's shutdown).
		node.stopRunning()
	}
	if c.stopBackground != nil {
		c.stopBackground()
		c.stopBackground = nil
	}
	if c.stopPodWatch != nil {
		c.stopPodWatch()
		c.stopPodWatch = nil
	}
	if c.nodeExec != nil {
		errs = append(errs, c.nodeExec.Close())
		c.nodeExec = nil
	}
	if killed := c.procs.stopAll(); len(killed) > 0 {
		c.opts.Logf("devcluster: killed after %s without exiting on SIGTERM: %v", stopGrace, killed)
	}
	if node != nil {
		// The node's changes to the machine last, once the API server, which listens on the
		// node's address, has stopped.
		errs = append(errs, node.stop())
	}
	if c.registry != nil {
		c.registry.stop()
		c.registry = nil
	}
	return errors.Join(errs...)
}

// RESTConfig returns a copy of the admin (system:masters) client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Kube returns an admin clientset.
func (c *Cluster) Kube() *kubernetes.Clientset { return c.kube }

// Kubeconfig returns the path of the admin kubeconfig file.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// RealNodeIP is the real node's address: the API server's with a real node, and the one on
// which NodePorts answer (in nftables mode, kube-proxy's NodePorts do not answer on
// loopback).
func (c *Cluster) RealNodeIP() string { return realNodeIP }

// DNSImage is the reference the real node pulled the cluster DNS server's image by, or ""
// without cluster DNS (RealNodeOptions.ClusterDNS).
func (c *Cluster) DNSImage() string { return c.dnsImage }

// HasRealNode reports whether the cluster runs the real node (RealNodeName).
func (c *Cluster) HasRealNode() bool { return c.realNode != nil }

// NodeNames returns the fake nodes' names.
func (c *Cluster) NodeNames() []string { return append([]string(nil), c.nodeNames...) }

// PKI returns the cluster's certificate paths.
func (c *Cluster) PKI() PKI { return *c.pki }

// BinDir returns the directory of the cluster's binaries (kubectl is there).
func (c *Cluster) BinDir() string { return c.opts.BinDir }

// StateDir returns the cluster's state directory.
func (c *Cluster) StateDir() string { return c.opts.StateDir }

// Healthy reports an error when a cluster process has exited.
func (c *Cluster) Healthy() error { return c.procs.firstExited() }

func (c *Cluster) startEtcd(port, peerPort int) error {
	dataDir := filepath.Join(c.opts.StateDir, "etcd-data")
	if err := os.RemoveAll(dataDir); err != nil {
		return err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", port)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	_, err := c.procs.start(c.opts.StateDir, "etcd", filepath.Join(c.opts.BinDir, "etcd"),
		"--name=devcluster", "--data-dir="+dataDir, "--log-level=warn",
		// State is throw-away: skipping fsync makes every write an order of magnitude faster.
		"--unsafe-no-fsync",
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=devcluster="+peer)
	return err
}

func (c *Cluster) startAPIServer(etcdPort, apiPort int) error {
	p := c.pki
	if _, err := c.procs.start(c.opts.StateDir, "kube-apiserver", filepath.Join(c.opts.BinDir, "kube-apiserver"),
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdPort),
		"--bind-address="+c.apiHost, "--advertise-address="+c.apiHost,
		"--secure-port="+strconv.Itoa(apiPort), "--cert-dir="+filepath.Join(c.opts.StateDir, "apiserver-certs"),
		"--tls-cert-file="+p.APIServerCert, "--tls-private-key-file="+p.APIServerKey,
		"--client-ca-file="+p.CACert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.ServiceAccountPub, "--service-account-signing-key-file="+p.ServiceAccountKey,
		"--service-cluster-ip-range="+serviceCIDR, "--authorization-mode=Node,RBAC",
		"--kubelet-client-certificate="+p.KubeletClientCert, "--kubelet-client-key="+p.KubeletClientKey,
		"--kubelet-certificate-authority="+p.CACert, "--kubelet-preferred-address-types=InternalIP",
		"--allow-privileged=false", "--profiling=false",
		// On loopback the kubernetes Service has no endpoints: the default reconciler refuses
		// a 127.0.0.1 advertise address, and nothing in the cluster could reach it anyway.
		"--endpoint-reconciler-type="+map[bool]string{true: "lease", false: "none"}[c.apiHost != "127.0.0.1"]); err != nil {
		return err
	}
	c.kubeconfig = filepath.Join(c.opts.StateDir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	// Credentials are embedded, not referenced: the file stands alone (for kubectl and the
	// demo), and clients do not watch certificate files for rotation.
	var pem [3][]byte
	for i, path := range []string{p.CACert, p.AdminCert, p.AdminKey} {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pem[i] = data
	}
	kc.Clusters["devcluster"] = &clientcmdapi.Cluster{Server: c.apiURL(apiPort), CertificateAuthorityData: pem[0]}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: pem[1], ClientKeyData: pem[2]}
	kc.Contexts["devcluster"] = &clientcmdapi.Context{Cluster: "devcluster", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "devcluster"
	if err := clientcmd.WriteToFile(*kc, c.kubeconfig); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return err
	}
	// Tests create many objects quickly; the client-side default (5 QPS) would throttle them.
	cfg.QPS, cfg.Burst = 200, 400
	c.restConfig = cfg
	c.kube, err = kubernetes.NewForConfig(cfg)
	return err
}

func (c *Cluster) waitAPIServer(ctx context.Context) error {
	return poll(ctx, apiServerReadyTimeout, func() (bool, error) {
		if err := c.procs.firstExited(); err != nil {
			return false, err
		}
		body, err := c.kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	}, "kube-apiserver /readyz")
}

func (c *Cluster) startNodeExec() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	ne, err := NewNodeExec(NodeExecConfig{
		Kube:         c.kube,
		Root:         filepath.Join(c.opts.StateDir, "node"),
		Nodes:        c.nodeNames,
		ImageFiles:   c.opts.ImageFiles,
		CertFile:     c.pki.KubeletCert,
		KeyFile:      c.pki.KubeletKey,
		ClientCAFile: c.pki.CACert,
	})
	if err != nil {
		l.Close()
		return 0, err
	}
	c.nodeExec = ne
	go func() {
		if err := ne.Serve(l); err != nil {
			c.opts.Logf("devcluster: node exec endpoint stopped: %v", err)
		}
	}()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	c.stopPodWatch = stopWatch
	go ne.WatchPods(watchCtx)
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) startKWOK(execPort, kwokPort int) error {
	var stages []string
	for _, name := range stageFiles {
		if name == "pod-delete" || strings.HasPrefix(name, "pv") {
			// pod-delete: replaced by our stages (stages/pod-terminate.yaml); the volume
			// stages: replaced by the provisioner (provisioner.go).
			continue
		}
		data, err := os.ReadFile(filepath.Join(c.opts.BinDir, "kwok-stages", name+".yaml"))
		if err != nil {
			return err
		}
		stage := strings.TrimSpace(string(data))
		if name == "pod-ready" && c.opts.PodStartDelay > 0 {
			if stage, err = delayStage(stage, c.opts.PodStartDelay); err != nil {
				return err
			}
		}
		stages = append(stages, stage)
	}
	own, err := fs.Glob(ownStages, "stages/*.yaml")
	if err != nil {
		return err
	}
	for _, name := range own {
		data, err := ownStages.ReadFile(name)
		if err != nil {
			return err
		}
		stages = append(stages, strings.TrimSpace(string(data)))
	}
	stagesPath := filepath.Join(c.opts.StateDir, "kwok-stages.yaml")
	if err := os.WriteFile(stagesPath, []byte(strings.Join(stages, "\n---\n")+"\n"), 0o600); err != nil {
		return err
	}
	_, err = c.procs.start(c.opts.StateDir, "kwok", filepath.Join(c.opts.BinDir, kwokName),
		"--kubeconfig="+c.kubeconfig, "-c", stagesPath,
		"--manage-nodes-with-annotation-selector="+kwokNodeAnnotation+"=fake",
		"--node-lease-duration-seconds="+strconv.Itoa(nodeLeaseSeconds),
		"--node-ip=127.0.0.1",
		// Nodes advertise the node exec endpoint as their kubelet port: pods/exec reaches it,
		// while KWOK keeps managing Node and Pod lifecycle.
		"--node-port="+strconv.Itoa(execPort),
		"--server-address=127.0.0.1:"+strconv.Itoa(kwokPort),
		"--tls-cert-file="+c.pki.KubeletCert, "--tls-private-key-file="+c.pki.KubeletKey,
		"--cidr="+podCIDR)
	return err
}

// delayStage gives a KWOK stage a delay before its next step (spec.delay), inserted before
// its spec.next; a stage without that key is refused rather than left undelayed.
func delayStage(stage string, d time.Duration) (string, error) {
	const next = "\n  next:\n"
	if strings.Count(stage, next) != 1 || strings.Contains(stage, "\n  delay:") {
		return "", errors.New("devcluster: cannot delay a KWOK stage without exactly one spec.next")
	}
	delay := fmt.Sprintf("\n  delay:\n    durationMilliseconds: %d%s", d.Milliseconds(), next)
	return strings.Replace(stage, next, delay, 1), nil
}

func (c *Cluster) writeEnvFile(apiPort, execPort int) error {
	env := fmt.Sprintf("KUBECONFIG=%s\nEXECPLANE_CLUSTER_BIN=%s\nAPISERVER=%s\nNODE_EXEC_PORT=%d\n",
		c.kubeconfig, c.opts.BinDir, c.apiURL(apiPort), execPort)
	return os.WriteFile(filepath.Join(c.opts.StateDir, "env"), []byte(env), 0o600)
}

// HelperImagePath is where executor images carry the helper (the chart's default
// --helper-path).
const HelperImagePath = "/execplane/helper"

// poll calls check every pollInterval until it reports done, returns an error, or timeout
// passes.
func poll(ctx context.Context, timeout time.Duration, check func() (bool, error), what string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		done, err := check()
		if err != nil {
			return fmt.Errorf("devcluster: waiting for %s: %w", what, err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devcluster: waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// Pause stops a component of the control plane (etcd, kube-apiserver, ...) with SIGSTOP:
// it holds its connections and answers nothing until Continue. For fault tests.
func (c *Cluster) Pause(component string) error { return c.procs.signal(component, syscall.SIGSTOP) }

// Continue resumes a paused component.
func (c *Cluster) Continue(component string) error {
	return c.procs.signal(component, syscall.SIGCONT)
}

// Restart kills a component of the control plane (SIGKILL, as a crash) and starts it again
// with the same flags and ports; for the API server it waits until it answers again.
func (c *Cluster) Restart(ctx context.Context, component string) error {
	if err := c.procs.restart(component); err != nil {
		return err
	}
	if component == "kube-apiserver" {
		return c.waitAPIServer(ctx)
	}
	return nil
}
