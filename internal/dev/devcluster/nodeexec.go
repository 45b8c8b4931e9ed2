package devcluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// Timeouts of the exec streams, as the kubelet sets them.
const (
	// execIdleTimeout closes a stream with no traffic; long commands keep theirs alive with
	// helper heartbeats.
	execIdleTimeout = 30 * time.Minute
	// streamCreationTimeout bounds the SPDY/WebSocket stream handshake.
	streamCreationTimeout = 30 * time.Second
	// exitIOGrace is how long output copying may continue after the exec'd process exits
	// (a background child holding the pipe open cannot hold the call open forever).
	exitIOGrace = 2 * time.Second
	// lookupTimeout bounds the API reads that map a Pod's volumes.
	lookupTimeout = 10 * time.Second
)

// NodeExecConfig configures a NodeExec.
type NodeExecConfig struct {
	// Kube reads Pods, PVCs and PVs to map volumes.
	Kube kubernetes.Interface
	// Root holds the mapped directories: volumes/<pv> for claims, pods/<uid>/... per Pod.
	Root string
	// Nodes are the node names this endpoint serves; an exec into a Pod on any other node is
	// refused.
	Nodes []string
	// ImageFiles maps absolute paths inside the executor image (such as the helper's) to
	// files on this machine.
	ImageFiles map[string]string
	// CertFile and KeyFile serve TLS; ClientCAFile verifies the apiserver's client
	// certificate (the apiserver's --kubelet-client-certificate).
	CertFile, KeyFile, ClientCAFile string
}

// NodeExec is the kubelet exec endpoint of the local cluster's fake nodes. KWOK manages Node
// and Pod lifecycle; the Nodes advertise this endpoint as their kubelet port, so pods/exec
// runs the requested command as a local process, with each of the Pod's volume mounts mapped
// to a local directory. It passes exit codes and stdin EOF through exactly (KWOK's own exec
// loses both).
type NodeExec struct {
	cfg    NodeExecConfig
	server *http.Server
	// token marks every process this endpoint started, and their descendants, in their
	// environment (podEnv=token/uid): a Pod's processes die with it, as a container's do,
	// and none outlives the endpoint — durable commands' supervisors leave the exec's
	// process group on purpose.
	token string

	mu      sync.Mutex
	running map[int]struct{}
	closed  bool
	// usage is the Pods' CPU for /metrics/resource (nodeusage.go).
	usage nodeUsage
}

// ErrPodNotServed is returned for a Pod on a node this endpoint does not serve.
var ErrPodNotServed = errors.New("pod is not on a node this endpoint serves")

// NewNodeExec builds the endpoint; Serve starts it.
func NewNodeExec(cfg NodeExecConfig) (*NodeExec, error) {
	if cfg.Kube == nil || cfg.Root == "" || len(cfg.Nodes) == 0 {
		return nil, errors.New("node exec: Kube, Root and Nodes are required")
	}
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("node exec: %w", err)
	}
	caPEM, err := os.ReadFile(cfg.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("node exec: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("node exec: no certificate in the client CA file")
	}
	var tok [8]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	n := &NodeExec{cfg: cfg, running: map[int]struct{}{}, token: hex.EncodeToString(tok[:])}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/exec/", n.serveExec)
	mux.HandleFunc("/metrics/resource", n.serveResource)
	n.server = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    pool,
		},
	}
	return n, nil
}

// Serve serves on l until Close.
func (n *NodeExec) Serve(l net.Listener) error {
	err := n.server.ServeTLS(l, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops serving and kills the process group of every command still running, and every
// process any of them left.
func (n *NodeExec) Close() error {
	err := n.server.Close()
	n.mu.Lock()
	n.closed = true
	for pid := range n.running {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	n.mu.Unlock()
	n.killMarked(podEnv + "=" + n.token + "/")
	return err
}

// podEnv is the variable that marks a Pod's processes.
const podEnv = "EXECPLANE_FAKE_NODE_POD"

// WatchPods kills a Pod's processes once it is being deleted, as a kubelet stops its
// containers, until ctx ends. The executor's durable commands outlive every exec, so
// without this a replaced executor's would go on beside its replacement.
func (n *NodeExec) WatchPods(ctx context.Context) {
	factory := informers.NewSharedInformerFactory(n.cfg.Kube, 0)
	inf := factory.Core().V1().Pods().Informer()
	gone := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok || !slices.Contains(n.cfg.Nodes, pod.Spec.NodeName) {
			return
		}
		n.killMarked(podEnv + "=" + n.token + "/" + string(pod.UID))
		n.usage.forget(string(pod.UID))
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*corev1.Pod); ok && pod.DeletionTimestamp != nil {
				gone(pod)
			}
		},
		DeleteFunc: gone,
	})
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}

// killRounds bounds the passes of killMarked: each stops what it finds before killing it,
// so a process forking meanwhile leaves at most children to the next pass.
const killRounds = 10

// killMarked kills every process whose environment holds an entry starting with mark, as a
// container's end does: all of them stopped first (none reacts, none records an end the
// others did not reach), then killed, pass after pass until none is found.
func (n *NodeExec) killMarked(mark string) {
	for range killRounds {
		pids := marked(mark)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// marked lists the live processes whose environment holds an entry starting with mark.
func marked(mark string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err != nil || bytes.Contains(stat, []byte(") Z ")) {
			continue // gone, or a zombie its parent has yet to reap
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.HasPrefix(kv, []byte(mark)) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// serveExec handles the kubelet paths /exec/{ns}/{pod}/{container} and
// /exec/{ns}/{pod}/{uid}/{container}.
func (n *NodeExec) serveExec(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/exec/"), "/")
	if len(parts) != 3 && len(parts) != 4 {
		http.Error(w, "want /exec/{namespace}/{pod}[/{uid}]/{container}", http.StatusBadRequest)
		return
	}
	ns, pod, container, uid := parts[0], parts[1], parts[len(parts)-1], ""
	if len(parts) == 4 {
		uid = parts[2]
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	remotecommand.ServeExec(w, r, n, ns+"/"+pod, uid, container, r.URL.Query()["command"], opts,
		execIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// ExecInContainer implements remotecommand.Executor.
func (n *NodeExec) ExecInContainer(ctx context.Context, name, uid, container string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	if tty {
		return errors.New("node exec: tty is not supported")
	}
	if len(cmd) == 0 {
		return errors.New("node exec: empty command")
	}
	ns, podName, _ := strings.Cut(name, "/")
	lookupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
	defer cancel()
	pod, err := n.cfg.Kube.CoreV1().Pods(ns).Get(lookupCtx, podName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node exec: %w", err)
	}
	if uid != "" && string(pod.UID) != uid {
		return fmt.Errorf("node exec: pod %s has UID %s, not %s", name, pod.UID, uid)
	}
	if !slices.Contains(n.cfg.Nodes, pod.Spec.NodeName) {
		return fmt.Errorf("node exec: %w: %s is on %q", ErrPodNotServed, name, pod.Spec.NodeName)
	}

	fs, err := n.mapPod(lookupCtx, pod, container)
	if err != nil {
		return fmt.Errorf("node exec: %w", err)
	}
	c := exec.Command(fs.translate(cmd[0]), cmd[1:]...)
	c.Args[0] = cmd[0]
	c.Dir = fs.workDir
	c.Env = fs.env
	if in != nil {
		// Through a pipe of our own, not exec's copying goroutine, which Wait would wait
		// for: a container runtime reports the exit as soon as the process is gone, while
		// the caller may still hold stdin open (the gateway does, until it has an answer).
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("node exec: %w", err)
		}
		defer r.Close()
		go func() {
			_, _ = io.Copy(w, in)
			w.Close()
		}()
		c.Stdin = r
	}
	c.Stdout, c.Stderr = out, errOut
	c.WaitDelay = exitIOGrace
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	n.usage.ran(string(pod.UID), pod.Namespace, pod.Name, container, nil)
	if err := n.startTracked(c); err != nil {
		// The container runtime's answer to a missing binary: exit code 127 on stderr.
		fmt.Fprintf(errOut, "exec: %v\n", err)
		return utilexec.CodeExitError{Err: err, Code: 127}
	}
	err = c.Wait()
	n.untrack(c.Process.Pid)
	n.usage.ran(string(pod.UID), pod.Namespace, pod.Name, container, c.ProcessState)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			// As container runtimes report it: 128 + the signal number.
			return utilexec.CodeExitError{Err: err, Code: 128 + int(ws.Signal())}
		}
		return utilexec.CodeExitError{Err: err, Code: ee.ExitCode()}
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		return nil
	}
	return err
}

func (n *NodeExec) startTracked(c *exec.Cmd) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errors.New("node exec endpoint is shutting down")
	}
	if err := c.Start(); err != nil {
		return err
	}
	n.running[c.Process.Pid] = struct{}{}
	return nil
}

func (n *NodeExec) untrack(pid int) {
	n.mu.Lock()
	delete(n.running, pid)
	n.mu.Unlock()
}

// podFS is how one container's paths map onto this machine.
type podFS struct {
	mounts  []mount // longest container path first
	images  map[string]string
	workDir string
	env     []string
}

type mount struct {
	containerPath string
	localPath     string
}

// translate maps a container path to a local one: beneath a volume mount, or a file of the
// image (ImageFiles); anything else (sh, cat) is taken from this machine as it is.
func (f *podFS) translate(p string) string {
	if local, ok := f.images[p]; ok {
		return local
	}
	for _, m := range f.mounts {
		if p == m.containerPath {
			return m.localPath
		}
		if rest, ok := strings.CutPrefix(p, m.containerPath+"/"); ok {
			return filepath.Join(m.localPath, rest)
		}
	}
	return p
}

// mapPod resolves the container's volume mounts, working directory and environment.
func (n *NodeExec) mapPod(ctx context.Context, pod *corev1.Pod, container string) (*podFS, error) {
	var ctr *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == container {
			ctr = &pod.Spec.Containers[i]
		}
	}
	if ctr == nil {
		return nil, fmt.Errorf("pod %s/%s has no container %q", pod.Namespace, pod.Name, container)
	}
	podDir := filepath.Join(n.cfg.Root, "pods", string(pod.UID))
	fs := &podFS{images: n.cfg.ImageFiles, workDir: filepath.Join(podDir, "rootfs")}
	for _, vm := range ctr.VolumeMounts {
		local, err := n.volumeDir(ctx, pod, podDir, vm.Name)
		if err != nil {
			return nil, err
		}
		if vm.SubPath != "" {
			local = filepath.Join(local, filepath.Clean("/"+vm.SubPath))
		}
		fs.mounts = append(fs.mounts, mount{containerPath: filepath.Clean(vm.MountPath), localPath: local})
	}
	slices.SortFunc(fs.mounts, func(a, b mount) int { return len(b.containerPath) - len(a.containerPath) })
	dirs := []string{fs.workDir}
	for _, m := range fs.mounts {
		dirs = append(dirs, m.localPath)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if ctr.WorkingDir != "" {
		fs.workDir = fs.translate(ctr.WorkingDir)
	}
	env := map[string]string{"PATH": os.Getenv("PATH"), "HOSTNAME": pod.Name, "HOME": fs.workDir, podEnv: n.token + "/" + string(pod.UID)}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			env[e.Name] = fs.translate(e.Value)
		}
	}
	for k, v := range env {
		fs.env = append(fs.env, k+"="+v)
	}
	slices.Sort(fs.env)
	return fs, nil
}

// volumeDir returns the local directory backing one of the Pod's volumes: the bound
// PersistentVolume's directory for a claim (shared by every Pod on that claim), a per-Pod
// directory for anything else.
func (n *NodeExec) volumeDir(ctx context.Context, pod *corev1.Pod, podDir, name string) (string, error) {
	for _, v := range pod.Spec.Volumes {
		if v.Name != name {
			continue
		}
		if v.PersistentVolumeClaim == nil {
			return filepath.Join(podDir, "volumes", name), nil
		}
		pvc, err := n.cfg.Kube.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
			return "", fmt.Errorf("claim %s/%s is not bound", pod.Namespace, pvc.Name)
		}
		return filepath.Join(n.cfg.Root, "volumes", pvc.Spec.VolumeName), nil
	}
	return "", fmt.Errorf("pod %s/%s mounts unknown volume %q", pod.Namespace, pod.Name, name)
}
