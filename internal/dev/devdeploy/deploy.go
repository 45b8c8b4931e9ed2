package devdeploy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devimage"
)

// Defaults of Options.
const (
	// Release is the Helm release's name: its objects are execplane-gateway,
	// execplane-controller, ….
	Release = "execplane"
	// Namespace is the release namespace (the control plane); the chart creates the
	// executor namespace, Namespace + "-executors".
	Namespace = "execplane"
	// Profile is the profile the deployment serves: the executor image on the real node.
	Profile = "sandbox"
	// waitTimeout bounds helm's --wait: images pulled from the local registry, four Pods
	// started and ready, the controller's minReadySeconds (about a minute here).
	waitTimeout = 5 * time.Minute
	// repository is where the images go under the local registry.
	repository = "execplane"
)

// The Secrets an operator provides (the chart's defaults: security.sources and
// gateway.controlClientSecret).
const (
	SecuritySecret      = "execplane-security"
	ControlClientSecret = "execplane-gateway-control"
	controlCertKey      = "tls.crt"
	controlKeyKey       = "tls.key"
	controlCAKey        = "ca.crt"
)

// Options configure Install.
type Options struct {
	// Cluster is the local cluster with its real node, registry and cluster DNS.
	Cluster *devcluster.Cluster
	// Helm is the helm binary; Chart the chart's directory.
	Helm, Chart string
	// Dir receives the security bundle and the values file.
	Dir string
	// Images are the release's images (devimage.BuildRelease): gateway, controller and
	// executor are used.
	Images []devimage.Built
	// Namespace is the release namespace; empty means Namespace.
	Namespace string
	// Log receives helm's output; nil discards it.
	Log io.Writer
	// CertManager: cert-manager (StartCertManager, running) issues the server certificate
	// and the gateway's client certificate as docs/deployment.md's recipe has it, the
	// server's renewable in place; otherwise a development bundle holds every certificate.
	CertManager bool
	// Values are more top-level values of the release (e.g. "profiling": true).
	Values map[string]any
}

// Deployment is the installed release and how to reach it.
type Deployment struct {
	Release, Namespace, ExecutorNamespace string
	// Bundle is the security material the Secrets hold (its CA key too: a development
	// bundle).
	Bundle *devbundle.Result
	// Images are the references the node pulls, by name (gateway, controller, executor):
	// registry.execplane.test/execplane/NAME@sha256:….
	Images map[string]string
	// GatewayAddress is the gateway Service's NodePort on the real node's address, and
	// ServerName the name to verify (the Service's DNS name, in the server certificate).
	GatewayAddress, ServerName string
	// Values is the values file the release was installed with.
	Values string

	opts Options
}

// Install pushes the images to the cluster's registry, creates the security material an
// operator provides (a development bundle in two Secrets), and installs the chart with
// `helm install --wait`: two controllers and two gateways on the real node, the gateway's
// Service a NodePort on the node's address.
func Install(ctx context.Context, o Options) (*Deployment, error) {
	if o.Namespace == "" {
		o.Namespace = Namespace
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	c := o.Cluster
	if !c.HasRealNode() || c.RegistryAddress() == "" {
		return nil, fmt.Errorf("devdeploy: the cluster has no real node and registry")
	}
	d := &Deployment{Release: Release, Namespace: o.Namespace, ExecutorNamespace: o.Namespace + "-executors", opts: o,
		Images: map[string]string{}, Values: filepath.Join(o.Dir, "values.yaml")}
	pushed, err := d.Push(ctx, o.Images)
	if err != nil {
		return nil, err
	}
	digests := map[string]string{}
	for name, ref := range pushed {
		d.Images[name] = ref
		digests[name] = ref[strings.LastIndex(ref, "@")+1:]
	}
	for _, name := range []string{"gateway", "controller", "executor"} {
		if d.Images[name] == "" {
			return nil, fmt.Errorf("devdeploy: no %s image among the release's", name)
		}
	}
	gatewayName := d.Release + "-gateway"
	d.ServerName = gatewayName + "." + d.Namespace + ".svc"
	dnsNames := []string{d.ServerName, d.ServerName + ".cluster.local", d.Release + "-controller." + d.Namespace + ".svc"}
	if _, err := c.Kube().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.Namespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("devdeploy: %w", err)
	}
	if o.CertManager {
		err = d.issueWithCertManager(ctx, dnsNames)
	} else {
		d.Bundle, err = devbundle.Generate(filepath.Join(o.Dir, "bundle"), devbundle.Options{
			DNSNames: dnsNames, IPAddresses: []net.IP{net.ParseIP(c.RealNodeIP())},
		})
	}
	if err != nil {
		return nil, err
	}
	if err := d.createSecrets(ctx); err != nil {
		return nil, err
	}
	values, err := d.values(digests, o.Images[0].Tag)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(d.Values, values, 0o600); err != nil {
		return nil, fmt.Errorf("devdeploy: %w", err)
	}
	if err := d.helm(ctx, "install", d.Release, o.Chart, "--namespace", d.Namespace, "-f", d.Values,
		"--wait", "--timeout", waitTimeout.String()); err != nil {
		return nil, err
	}
	svc, err := c.Kube().CoreV1().Services(d.Namespace).Get(ctx, gatewayName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("devdeploy: the gateway Service: %w", err)
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == "api" && p.NodePort != 0 {
			d.GatewayAddress = net.JoinHostPort(c.RealNodeIP(), strconv.Itoa(int(p.NodePort)))
		}
	}
	if d.GatewayAddress == "" {
		return nil, fmt.Errorf("devdeploy: the gateway Service %s has no NodePort for its api port", gatewayName)
	}
	// helm --wait waits for the Pods, not for kube-proxy's rules: the NodePort answers a
	// moment later.
	if err := reachable(ctx, d.GatewayAddress); err != nil {
		return nil, fmt.Errorf("devdeploy: the gateway's NodePort %s: %w", d.GatewayAddress, err)
	}
	return d, nil
}

// routeTimeout bounds the wait for kube-proxy to route a new NodePort (its sync period is a
// second; a minute covers a loaded machine).
const routeTimeout = time.Minute

// reachable waits until a TCP connection to address succeeds.
func reachable(ctx context.Context, address string) error {
	ctx, cancel := context.WithTimeout(ctx, routeTimeout)
	defer cancel()
	var dialer net.Dialer
	for {
		conn, err := dialer.DialContext(ctx, "tcp", address)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Push pushes images to the cluster's registry and returns the references the node pulls
// them by, by name: registry.execplane.test/execplane/NAME@sha256:… (for an upgrade to
// another build: Upgrade with image.digests set to them).
func (d *Deployment) Push(ctx context.Context, images []devimage.Built) (map[string]string, error) {
	c := d.opts.Cluster
	pushed, err := devimage.Push(ctx, devimage.PushOptions{Registry: c.RegistryAddress() + "/" + repository, Insecure: true}, images)
	if err != nil {
		return nil, fmt.Errorf("devdeploy: %w", err)
	}
	refs := map[string]string{}
	for _, p := range pushed {
		refs[p.Name] = devcluster.RegistryName + "/" + repository + "/" + p.Name + "@" + p.Digest.String()
	}
	return refs, nil
}

// Upgrade runs `helm upgrade --wait` of the release with its values and args (more -f or
// --set).
func (d *Deployment) Upgrade(ctx context.Context, args ...string) error {
	return d.helm(ctx, append([]string{"upgrade", d.Release, d.opts.Chart, "--namespace", d.Namespace, "-f", d.Values,
		"--wait", "--timeout", waitTimeout.String()}, args...)...)
}

// rolloutTimeout bounds one Deployment's rollout as kubectl waits for it (a Pod start,
// readiness and minReadySeconds per replica).
const rolloutTimeout = 5 * time.Minute

// WaitRolledOut waits, as an operator does with `kubectl rollout status`, until both
// Deployments have rolled out, and returns kubectl's last words for each.
func (d *Deployment) WaitRolledOut(ctx context.Context) (map[string]string, error) {
	c := d.opts.Cluster
	out := map[string]string{}
	for _, name := range []string{"controller", "gateway"} {
		cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir(), "kubectl"), "--kubeconfig", c.Kubeconfig(), "--namespace", d.Namespace,
			"rollout", "status", "deployment/"+d.Release+"-"+name, "--timeout", rolloutTimeout.String())
		b, err := cmd.CombinedOutput()
		if err != nil {
			return out, fmt.Errorf("devdeploy: kubectl rollout status %s: %w\n%s", name, err, b)
		}
		out[name] = strings.TrimSpace(string(b))
	}
	return out, nil
}

// helm runs helm against the cluster, its state in Dir.
func (d *Deployment) helm(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, d.opts.Helm, args...)
	home := filepath.Join(d.opts.Dir, "helm")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+d.opts.Cluster.Kubeconfig(),
		"HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, d.opts.Log), io.MultiWriter(&out, d.opts.Log)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("devdeploy: helm %s: %w\n%s", args[0], err, out.Bytes())
	}
	return nil
}

// createSecrets creates what docs/deployment.md has an operator create with kubectl: the
// bundle's manifest and the files it names in SecuritySecret, the gateway's control-API
// client material in ControlClientSecret — with cert-manager, the manifest, the grant keys
// and the pinned CA certificate only (cert-manager's Secrets hold the rest).
func (d *Deployment) createSecrets(ctx context.Context) error {
	kube := d.opts.Cluster.Kube()
	b := d.Bundle
	files := map[string]map[string]string{
		SecuritySecret: {
			devbundle.ManifestFile: b.Manifest, devbundle.CACertFile: b.CACert, devbundle.ServerCertFile: b.ServerCert,
			devbundle.ServerKeyFile: b.ServerKey, devbundle.GrantPublicFile: b.GrantPublicKey, devbundle.GrantKeyFile: b.GrantPrivateKey,
			devbundle.RecordKeyFile: b.RecordKey,
		},
		ControlClientSecret: {controlCertKey: b.Gateway.CertFile, controlKeyKey: b.Gateway.KeyFile, controlCAKey: b.CACert},
	}
	if d.opts.CertManager {
		files = map[string]map[string]string{SecuritySecret: {
			devbundle.ManifestFile: b.Manifest, devbundle.CACertFile: b.CACert, devbundle.ServerIssuerFile: b.ServerIssuer,
			devbundle.GrantPublicFile: b.GrantPublicKey, devbundle.GrantKeyFile: b.GrantPrivateKey, devbundle.RecordKeyFile: b.RecordKey,
		}}
	}
	for name, keys := range files {
		data := map[string][]byte{}
		for key, path := range keys {
			content, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("devdeploy: %w", err)
			}
			data[key] = content
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}
		if _, err := kube.CoreV1().Secrets(d.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("devdeploy: Secret %s: %w", name, err)
		}
	}
	return nil
}

// SandboxProfile is the Profile's definition with image: small limits, fit for trying
// things out; the chart's release here and the development stack's profiles file alike.
func SandboxProfile(image string) map[string]any {
	return map[string]any{
		"image":              image,
		"storageClass":       devcluster.StorageClassName,
		"storageSize":        "1Gi",
		"memoryLimit":        "256Mi",
		"tmpSizeLimit":       "64Mi",
		"maxFileBytes":       8 << 20,
		"maxCommandBytes":    1 << 20,
		"maxCommandDuration": "10m",
		"maxEnvironments":    100,
	}
}

// values are the release's values: the pushed images by digest, the bundle's gateway
// identity, both Deployments on the real node, the gateway Service a NodePort, and one
// profile running the executor image there.
func (d *Deployment) values(digests map[string]string, tag string) ([]byte, error) {
	onRealNode := map[string]any{
		"nodeSelector": map[string]string{devcluster.RealNodeLabel: "true"},
		"tolerations":  []map[string]string{{"key": devcluster.RealNodeTaint, "operator": "Exists", "effect": "NoSchedule"}},
	}
	with := func(m map[string]any) map[string]any {
		for k, v := range onRealNode {
			m[k] = v
		}
		return m
	}
	v := map[string]any{
		"image": map[string]any{
			"repository": devcluster.RegistryName + "/" + repository,
			"tag":        tag,
			"digests":    map[string]string{"gateway": digests["gateway"], "controller": digests["controller"]},
		},
		"controller": with(map[string]any{"gatewayIdentities": []string{d.Bundle.Gateway.Identity}}),
		"gateway":    with(map[string]any{"service": map[string]any{"type": "NodePort", "port": 8443}}),
		"profiles":   map[string]any{Profile: with(SandboxProfile(d.Images["executor"]))},
	}
	for k, val := range d.opts.Values {
		v[k] = val
	}
	if d.opts.CertManager {
		// cert-manager's Secret projected beside the operator's, its keys mapped onto the
		// manifest's names and its ca.crt left out (docs/deployment.md).
		v["security"] = map[string]any{"sources": []any{
			map[string]any{"secret": map[string]any{"name": SecuritySecret}},
			map[string]any{"secret": map[string]any{"name": ServerSecret, "items": []map[string]string{
				{"key": corev1.TLSCertKey, "path": devbundle.ServerCertFile},
				{"key": corev1.TLSPrivateKeyKey, "path": devbundle.ServerKeyFile},
			}}},
		}}
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("devdeploy: values: %w", err)
	}
	return out, nil
}
