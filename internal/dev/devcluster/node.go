package devcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The real node: containerd, runc and a kubelet on this machine, joined to the cluster's API
// server beside the fake nodes. Pods that tolerate RealNodeTaint and select RealNodeLabel
// run on it as real containers; everything else stays on the fake nodes.
const (
	// RealNodeName is the real node's name.
	RealNodeName = "devcluster-real-node"
	// RealNodeLabel (value "true") labels the real node, and RealNodeTaint (NoSchedule)
	// keeps Pods that do not ask for it off it.
	RealNodeLabel = "execplane.dev/real-node"
	RealNodeTaint = RealNodeLabel
	// RealNodePlacement are a profile's fields (YAML, at a profile entry's indentation) that
	// place its executors on the real node: its label selected, its taint tolerated.
	RealNodePlacement = "    nodeSelector:\n      " + RealNodeLabel + ": \"true\"\n" +
		"    tolerations:\n    - {key: " + RealNodeTaint + ", operator: Exists, effect: NoSchedule}\n"
	// NodeBinEnv names the environment variable that points at the real node's binaries
	// (hack/build-node-bins.sh); when unset, that script finds or builds them.
	NodeBinEnv = "EXECPLANE_NODE_BIN"

	// realNodeIP is the node's address, on lo: the kubelet refuses a loopback node IP and
	// this machine's kernel has no dummy link type. It is private and routed nowhere.
	realNodeIP      = "172.31.255.1"
	realNodeAddress = realNodeIP + "/32"
	// realNodeBridge and realNodeSubnet are the Pod network, apart from the fake nodes'
	// podCIDR.
	realNodeBridge = "execplane0"
	realNodeSubnet = "10.88.0.0/24"
	// realNodeCgroupRoot is the cgroup, in every hierarchy, above all of the node's Pods.
	realNodeCgroupRoot = "execplane-devnode"
	// cniNetwork is the Pod network's name: libcni names its cached results after it.
	cniNetwork = "execplane-devnode"
	// realNodePodPidsLimit bounds the processes of one Pod (a fork bomb stays in its Pod).
	realNodePodPidsLimit = 512
	// runcPath and cniBinDir are Debian's runc and CNI plugins (make node-packages).
	runcPath  = "/usr/sbin/runc"
	cniBinDir = "/usr/lib/cni"
	// kubeletPath is the kubelet's PATH: the mount tools it runs, and no iptables, so that it
	// creates no firewall tables on the machine (its KUBE-FIREWALL chain guards kube-proxy's
	// route_localnet, which kube-proxy's nftables mode does not set).
	kubeletPath = "/usr/bin:/bin"
	// nftPath is nft (Debian's nftables, make node-packages): kube-proxy's PATH holds it
	// alone (proxyPathDir), so that kube-proxy touches no iptables tables either.
	nftPath      = "/usr/sbin/nft"
	proxyPathDir = "kube-proxy-path"
	// clusterDNSIP is the cluster DNS Service's address (in serviceCIDR), clusterDomain the
	// cluster's DNS domain: what the kubelet writes into Pods' resolv.conf.
	clusterDNSIP  = "10.0.0.10"
	clusterDomain = "cluster.local"
	// Deadlines of the node's start, generous for a loaded 2-core machine (measured: the
	// kubelet registers in ~0.5 s and is Ready in 3–10 s).
	containerdReadyTimeout = 30 * time.Second
	realNodeReadyTimeout   = 120 * time.Second
)

// nodeBinaries are the programs the real node runs from its bin directory.
var nodeBinaries = []string{"containerd", "containerd-shim-runc-v2", "ctr", "kubelet", "kube-proxy"}

// proxyTables are the nftables tables kube-proxy creates (nftables mode, both families).
var proxyTables = []string{"ip kube-proxy", "ip6 kube-proxy"}

// RealNodeOptions configure the real node.
type RealNodeOptions struct {
	// BinDir holds containerd, containerd-shim-runc-v2, ctr and the kubelet; empty means
	// FindNodeBinaries.
	BinDir string
	// Images is a docker-archive tarball (internal/dev/devimage) imported into containerd:
	// nothing is pulled. It must hold SandboxImage.
	Images string
	// SandboxImage is the Pods' sandbox (pause) image reference.
	SandboxImage string
	// HeldLock, when set, is the machine's real-node lock, already held by the caller
	// (LockRealNode): Start uses it instead of taking the lock, and Stop leaves it held.
	HeldLock *RealNodeLock
	// ClusterDNS runs the cluster's DNS server (dns.go) on the node: Start returns once it is
	// Ready. Its binary comes from FindDNSBinaries.
	ClusterDNS bool
	// CSI runs the host-path CSI driver with snapshots and its sidecars on the node (csi.go):
	// Start returns once the kubelet registered it. Its sidecars come from FindCSIBinaries.
	CSI bool
}

// realNode is the running real node.
type realNode struct {
	opts RealNodeOptions
	// dir holds the node's state (nodeDataDir), logDir its logs.
	dir, logDir string
	lock        *nodeLock
	ledger      *nodeLedger
	before      HostState
	procs       processes
	logf        func(string, ...any)
	// keepLock leaves the lock held on stop: the caller's (HeldLock).
	keepLock bool
	// proxyHealthz is kube-proxy's health URL: 200 once its rules are in place.
	proxyHealthz string
}

// FindNodeBinaries returns the directory of the real node's binaries: $EXECPLANE_NODE_BIN
// when set, otherwise the output of hack/build-node-bins.sh (which builds them once, cached
// by version).
func FindNodeBinaries(ctx context.Context) (string, error) {
	dir, err := BinaryDir(ctx, NodeBinEnv, "build-node-bins.sh", "the real node's binaries")
	if err != nil {
		return "", err
	}
	// The exact path the kernel reports as the programs' executables: stop finds the node's
	// processes (the shims among them) by it.
	if dir, err = filepath.Abs(dir); err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return "", fmt.Errorf("devcluster: the real node's binaries: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("devcluster: the real node's binaries: %w", err)
	}
	for _, e := range entries {
		if !slices.Contains(nodeBinaries, e.Name()) && e.Name() != ".complete" {
			// Stop kills what runs from here by path: a shared directory (/usr/bin) would
			// make the node's programs indistinguishable from the machine's.
			return "", fmt.Errorf("devcluster: %s holds %s beside the node's programs: give the node a directory of its own (hack/build-node-bins.sh)", dir, e.Name())
		}
	}
	var missing []string
	for _, name := range nodeBinaries {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			missing = append(missing, name)
		}
	}
	for _, p := range []string{runcPath, nftPath, filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback")} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p+" (make node-packages)")
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%w in %s: %v (run hack/build-node-bins.sh)", ErrBinariesMissing, dir, missing)
	}
	return dir, nil
}

// RealNodeAvailable reports why this machine cannot run the real node, or nil: it needs
// root, cgroups, overlayfs and bridge netfilter.
func RealNodeAvailable() error {
	if os.Geteuid() != 0 {
		return errors.New("the real node needs root")
	}
	if _, err := os.Stat(filepath.Join(cgroupFS, "memory")); err != nil {
		return fmt.Errorf("the real node needs the cgroup v1 memory hierarchy: %w", err)
	}
	data, err := os.ReadFile("/proc/filesystems")
	if err != nil || !bytes.Contains(data, []byte("overlay")) {
		return errors.New("the real node needs overlayfs")
	}
	if _, err := os.Stat(sysctlPath("net.bridge.bridge-nf-call-iptables")); err != nil {
		return errors.New("the real node needs bridge netfilter (modprobe br_netfilter): kube-proxy's rules must see bridged Pod traffic")
	}
	return nil
}

// prepareRealNode takes the machine's real-node lock, undoes what a crashed run left, and
// records each host change before making it: the node's address (which the API server then
// listens on, so that Pods reach it), its cgroup root and the network's kernel settings.
func (c *Cluster) prepareRealNode(ctx context.Context) (err error) {
	opts := *c.opts.RealNode
	if err := RealNodeAvailable(); err != nil {
		return err
	}
	if opts.BinDir == "" {
		if opts.BinDir, err = FindNodeBinaries(ctx); err != nil {
			return err
		}
	}
	if !filepath.IsAbs(opts.BinDir) {
		return fmt.Errorf("devcluster: the real node's BinDir %q is not absolute", opts.BinDir)
	}
	if opts.Images == "" || opts.SandboxImage == "" {
		return errors.New("devcluster: the real node needs Images and SandboxImage")
	}
	n := &realNode{opts: opts, dir: nodeDataDir, logDir: filepath.Join(c.opts.StateDir, "real-node"), logf: c.opts.Logf}
	if opts.HeldLock != nil {
		n.lock, n.keepLock = opts.HeldLock.l, true
	} else if n.lock, err = lockNode(ctx, c.opts.Logf); err != nil {
		return err
	}
	c.realNode = n
	// Under the lock: taken just now, or held by the caller since LockRealNode (which undid
	// what it found then) and perhaps lent to a child that died with its node up since.
	if err := undoLeftovers(c.opts.Logf); err != nil {
		return err
	}
	if n.before, err = SnapshotHost(); err != nil {
		return fmt.Errorf("devcluster: reading the machine's state: %w", err)
	}
	if hasAddress("lo", realNodeAddress) {
		return fmt.Errorf("devcluster: %s is already on lo, not by a real node of ours", realNodeAddress)
	}
	if _, err := net.InterfaceByName(realNodeBridge); err == nil {
		return fmt.Errorf("devcluster: a link %s exists, not by a real node of ours", realNodeBridge)
	}
	n.ledger = &nodeLedger{PID: os.Getpid(), StateDir: n.dir, LogDir: n.logDir, BinDir: opts.BinDir, Sysctls: n.before.Sysctls,
		Address: realNodeAddress, Bridge: realNodeBridge, CgroupRoot: realNodeCgroupRoot}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			n.ledger.CreatedPaths = append(n.ledger.CreatedPaths, p)
		}
	}
	// The ledger goes first: from here on, a crash leaves a record of what to undo.
	for _, d := range []string{n.dir, n.logDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := n.ledger.write(); err != nil {
		return err
	}
	if err := run("ip", "addr", "add", realNodeAddress, "dev", "lo"); err != nil {
		return err
	}
	if err := createCgroup(realNodeCgroupRoot); err != nil {
		return fmt.Errorf("devcluster: cgroup %s: %w", realNodeCgroupRoot, err)
	}
	for _, k := range networkSysctls {
		if err := writeSysctl(k, nodeSysctls[k]); err != nil {
			return fmt.Errorf("devcluster: sysctl %s: %w", k, err)
		}
	}
	return nil
}

// startRealNode starts containerd, a kubelet and kube-proxy joined to the API server at
// apiServer (on the node's address, prepareRealNode). It returns once the node is
// registered; waitReady waits for Ready and for kube-proxy's rules.
func (c *Cluster) startRealNode(ctx context.Context, apiServer string) error {
	n, opts := c.realNode, c.realNode.opts
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	cfg := nodeConfig{
		State: n.dir, Logs: n.logDir, Socket: filepath.Join(n.dir, "containerd.sock"), Runc: runcPath, CNIBin: cniBinDir,
		SandboxImage: opts.SandboxImage, Bridge: realNodeBridge, Subnet: realNodeSubnet, Network: cniNetwork,
		NodeName: RealNodeName, NodeIP: realNodeIP, CgroupRoot: realNodeCgroupRoot, HealthzPort: ports[0], ClientCA: c.pki.CACert,
		ServingCert: c.pki.NodeServingCert, ServingKey: c.pki.NodeServingKey, TaintKey: RealNodeTaint,
		PodPidsLimit: realNodePodPidsLimit, ClusterDNS: clusterDNSIP, ClusterDomain: clusterDomain,
		APIServer: apiServer, ProxyKubeconfig: filepath.Join(n.dir, "kube-proxy.kubeconfig"),
		ProxyHealthzPort: ports[1], ProxyMetricsPort: ports[2],
	}
	if err := n.writeConfig(cfg, c.pki); err != nil {
		return err
	}
	if c.registry, err = startRegistry(); err != nil {
		return err
	}
	if err := c.registry.writeHosts(filepath.Join(n.dir, "containerd", "certs.d")); err != nil {
		return err
	}
	if err := n.startContainerd(ctx, cfg.Socket); err != nil {
		return err
	}
	if err := n.importImages(ctx, cfg.Socket); err != nil {
		return err
	}
	if _, err := n.procs.startWithPath(n.logDir, "kubelet", kubeletPath, filepath.Join(opts.BinDir, "kubelet"),
		"--config="+filepath.Join(n.dir, "kubelet.yaml"), "--kubeconfig="+filepath.Join(n.dir, "kubelet.kubeconfig"),
		"--root-dir="+filepath.Join(n.dir, "kubelet"), "--cert-dir="+filepath.Join(n.dir, "kubelet-pki"),
		"--hostname-override="+RealNodeName, "--node-ip="+realNodeIP,
		"--node-labels="+RealNodeLabel+"=true", "--v=2"); err != nil {
		return err
	}
	// The ledger names kube-proxy's tables before they exist.
	n.ledger.NFTables = proxyTables
	if err := n.ledger.write(); err != nil {
		return err
	}
	n.proxyHealthz = fmt.Sprintf("http://127.0.0.1:%d/healthz", cfg.ProxyHealthzPort)
	_, err = n.procs.startWithPath(n.logDir, "kube-proxy", filepath.Join(n.dir, proxyPathDir), filepath.Join(opts.BinDir, "kube-proxy"),
		"--config="+filepath.Join(n.dir, "kube-proxy.yaml"), "--v=2")
	return err
}

func (n *realNode) writeConfig(cfg nodeConfig, pki *PKI) error {
	dirs := []string{filepath.Join(n.logDir, "pod-logs")}
	for _, d := range []string{"containerd", "cni/net.d", "cni/ipam", "kubelet", "kubelet-pki", proxyPathDir} {
		dirs = append(dirs, filepath.Join(n.dir, d))
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		path   string
		render func() ([]byte, error)
	}{
		{"containerd/config.toml", func() ([]byte, error) { return render(containerdTemplate, cfg) }},
		{"cni/net.d/10-execplane.conflist", func() ([]byte, error) { return render(cniTemplate, cfg) }},
		{"kubelet.yaml", func() ([]byte, error) { return render(kubeletTemplate, cfg) }},
		{"kube-proxy.yaml", func() ([]byte, error) { return render(kubeProxyTemplate, cfg) }},
	} {
		data, err := f.render()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(n.dir, f.path), data, 0o600); err != nil {
			return err
		}
	}
	// kube-proxy runs nft and nothing else (nftPath).
	if err := os.Symlink(nftPath, filepath.Join(n.dir, proxyPathDir, "nft")); err != nil {
		return err
	}
	for _, k := range []struct{ file, user, cert, key string }{
		{"kubelet.kubeconfig", "kubelet", pki.NodeClientCert, pki.NodeClientKey},
		{"kube-proxy.kubeconfig", "kube-proxy", pki.ProxyClientCert, pki.ProxyClientKey},
	} {
		kc := clientcmdapi.NewConfig()
		kc.Clusters["devcluster"] = &clientcmdapi.Cluster{Server: cfg.APIServer, CertificateAuthority: pki.CACert}
		kc.AuthInfos[k.user] = &clientcmdapi.AuthInfo{ClientCertificate: k.cert, ClientKey: k.key}
		kc.Contexts["devcluster"] = &clientcmdapi.Context{Cluster: "devcluster", AuthInfo: k.user}
		kc.CurrentContext = "devcluster"
		if err := clientcmd.WriteToFile(*kc, filepath.Join(n.dir, k.file)); err != nil {
			return err
		}
	}
	return nil
}

func (n *realNode) startContainerd(ctx context.Context, socket string) error {
	// The shim is looked up on PATH: the node's own first, never a system one (stop finds the
	// node's shims by their executable's path).
	p, err := n.procs.startWithPath(n.logDir, "containerd", n.opts.BinDir+":/usr/sbin:/usr/bin:/sbin:/bin", filepath.Join(n.opts.BinDir, "containerd"),
		"--config="+filepath.Join(n.dir, "containerd", "config.toml"))
	if err != nil {
		return err
	}
	return poll(ctx, containerdReadyTimeout, func() (bool, error) {
		if err := p.exited(); err != nil {
			return false, err
		}
		return n.ctr(ctx, socket, "version") == nil, nil
	}, "containerd")
}

func (n *realNode) importImages(ctx context.Context, socket string) error {
	if err := n.ctr(ctx, socket, "--namespace=k8s.io", "images", "import", "--local", n.opts.Images); err != nil {
		return fmt.Errorf("devcluster: importing %s: %w", n.opts.Images, err)
	}
	return nil
}

func (n *realNode) ctr(ctx context.Context, socket string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(n.opts.BinDir, "ctr"), append([]string{"--address=" + socket}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// ready reports whether the real node is Ready and carries no taint but its own.
func (n *realNode) ready(ctx context.Context, c *Cluster) (bool, error) {
	if err := n.procs.firstExited(); err != nil {
		return false, err
	}
	node, err := c.kube.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
	if err != nil || !nodeReady(node) {
		return false, nil
	}
	for _, t := range node.Spec.Taints {
		if t.Key != RealNodeTaint || t.Effect != corev1.TaintEffectNoSchedule {
			return false, nil
		}
	}
	return n.proxyReady(ctx), nil
}

// proxyReady reports whether kube-proxy has synced its rules (its healthz answers 200).
func (n *realNode) proxyReady(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.proxyHealthz, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// stopRunning ends the node's programs, then what they leave running (shims, containers).
// Stop undoes the rest.
func (n *realNode) stopRunning() {
	n.procs.stopAll()
	if n.ledger != nil {
		_ = killPrograms(n.ledger.BinDir, nodeBinaries)
		_ = killPrograms(n.ledger.CSIBinDir, csiSidecars)
		_ = killCgroup(n.ledger.CgroupRoot)
	}
}

// stop ends the node and undoes every host change: the kubelet and containerd, then what
// they leave running (shims, containers) and mounted, the address, the bridge, the kernel
// settings, the directories. It then compares the machine with the start's snapshot and
// reports any difference. The lock is released last.
func (n *realNode) stop() error {
	if !n.keepLock {
		defer n.lock.release()
	}
	if n.ledger == nil {
		return nil
	}
	n.procs.stopAll()
	if err := n.ledger.undo(); err != nil {
		return err
	}
	after, err := SnapshotHost()
	if err != nil {
		return err
	}
	if d := after.owned(n.ledger).Diff(n.before.owned(n.ledger)); len(d) > 0 {
		return fmt.Errorf("devcluster: the real node left the machine changed:\n  %s", strings.Join(d, "\n  "))
	}
	n.logf("devcluster: real node stopped; the machine is as before")
	return nil
}

// RealNodeCtr runs containerd's ctr against the real node (in the Kubernetes namespace,
// k8s.io) and returns its output: for tests that check what runs on the node.
func (c *Cluster) RealNodeCtr(ctx context.Context, args ...string) ([]byte, error) {
	n := c.realNode
	if n == nil {
		return nil, errors.New("devcluster: no real node")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(n.opts.BinDir, "ctr"),
		append([]string{"--address=" + filepath.Join(n.dir, "containerd.sock"), "--namespace=k8s.io"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}
