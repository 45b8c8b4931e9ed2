package chart_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/client"
)

// sessionValues make the chart deployable on the local cluster: a profile on its storage
// class, the development bundle's gateway identity.
const sessionValues = `controller:
  gatewayIdentities: [%q]
profiles:
  sandbox:
    image: registry.example/sandbox:1
    storageClass: kwok-volume
    storageSize: 1Gi
    memoryLimit: 64Mi
    tmpSizeLimit: 16Mi
    maxFileBytes: 1048576
    maxCommandBytes: 65536
    maxCommandDuration: 5m
    maxEnvironments: 10
`

// The controller and the gateway run as local processes with exactly what the chart renders
// — arguments, environment, and the files of their mounted volumes, materialised from the
// very Secrets and ConfigMaps the Pods would mount — under their own ServiceAccounts' tokens
// (so the chart's RBAC is all they have), and a caller's SDK session passes through them.
// Two substitutions only, for what a Pod network would provide: each volume's mount path
// becomes a local directory, and the controller Service's host becomes 127.0.0.1.
func TestChartRenderedProcessesServeASession(t *testing.T) {
	c := clustertest.Cluster(t)
	ctx := t.Context()
	if _, err := c.InstallCRDs(ctx, chartDir+"/files/crds"); err != nil {
		t.Fatal(err)
	}
	ns := clustertest.Namespace(t)
	dir := t.TempDir()
	bundle, err := devbundle.Generate(filepath.Join(dir, "bundle"), devbundle.Options{DNSNames: []string{"execplane-controller." + ns + ".svc"}})
	if err != nil {
		t.Fatal(err)
	}
	kube := c.Kube()
	// The material, as an operator provides it: the bundle in one Secret, the gateway's
	// control-API client material in another.
	security := map[string][]byte{}
	for _, f := range []string{devbundle.ManifestFile, devbundle.CACertFile, devbundle.ServerCertFile, devbundle.ServerKeyFile, devbundle.GrantPublicFile, devbundle.GrantKeyFile, devbundle.RecordKeyFile} {
		if security[f], err = os.ReadFile(filepath.Join(bundle.Dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	control := map[string][]byte{}
	for key, path := range map[string]string{"tls.crt": bundle.Gateway.CertFile, "tls.key": bundle.Gateway.KeyFile, "ca.crt": bundle.CACert} {
		if control[key], err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]map[string][]byte{"execplane-security": security, "execplane-gateway-control": control} {
		if _, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	values := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(values, []byte(fmt.Sprintf(sessionValues, bundle.Gateway.Identity)), 0o600); err != nil {
		t.Fatal(err)
	}
	// The CRD is installed above, shared by the package's tests: the cleanup below must not
	// delete it.
	out, err := helm(t, "template", "execplane", chartDir, "--namespace", ns, "--kube-version", kubeVersion, "-f", values, "--set", "crds.install=false")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	manifests := filepath.Join(dir, "manifests.yaml")
	if err := os.WriteFile(manifests, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(c.BinDir(), "kubectl")
	t.Cleanup(func() {
		_ = exec.Command(kubectl, "--kubeconfig", c.Kubeconfig(), "delete", "--wait=false", "--ignore-not-found", "-f", manifests).Run()
	})
	if b, err := exec.Command(kubectl, "--kubeconfig", c.Kubeconfig(), "apply", "--server-side", "-f", manifests).CombinedOutput(); err != nil {
		t.Fatalf("apply: %v\n%s", err, b)
	}
	// The Deployments' Pods are fake here (KWOK runs nothing); the processes below stand in
	// for their containers.
	procs := map[string]*chartProcess{}
	for _, d := range documents[appsv1.Deployment](t, out, "Deployment") {
		procs[d.Spec.Template.Spec.Containers[0].Name] = startRendered(t, c, kube, ns, d, dir)
	}
	for _, name := range []string{"controller", "gateway"} {
		clustertest.Eventually(t, 90*time.Second, name+" ready", func() bool {
			if err := procs[name].exited(); err != nil {
				t.Fatalf("%s exited: %v\n%s", name, err, procs[name].log.String())
			}
			return procs[name].ready()
		})
	}

	// A caller's session through the chart-configured gateway.
	sdk, err := client.Dial(client.Config{Address: "127.0.0.1:8443", ServerName: "localhost", CAFile: bundle.CACert,
		CertFile: bundle.Caller.CertFile, KeyFile: bundle.Caller.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	env, err := sdk.Ensure(cctx, client.EnsureRequest{Owner: client.Owner{Issuer: "https://idp.example", Subject: "alice"}, BindingID: "conv-1", Profile: "sandbox"})
	if err != nil {
		t.Fatalf("ensure: %v\ncontroller:\n%s\ngateway:\n%s", err, procs["controller"].log.String(), procs["gateway"].log.String())
	}
	run, err := env.Acquire(cctx, client.AcquireOptions{RunID: "turn-1"})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if _, err := run.WriteFile(cctx, "hello.txt", []byte("through the chart\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	res, err := run.Run(cctx, client.Command{Args: []string{"cat", "hello.txt"}})
	if err != nil || res.Stdout.String() != "through the chart\n" {
		t.Fatalf("command: %+v %v", res, err)
	}
	if err := run.Close(cctx); err != nil {
		t.Fatalf("release: %v", err)
	}
}

type chartProcess struct {
	cmd  *exec.Cmd
	diag string
	log  *clustertest.SyncBuffer
	done chan error
	err  error
}

func (p *chartProcess) exited() error {
	select {
	case err := <-p.done:
		p.err = fmt.Errorf("exit: %v", err)
		p.done <- err
		return p.err
	default:
		return nil
	}
}

func (p *chartProcess) ready() bool {
	resp, err := (&http.Client{Timeout: time.Second}).Get("http://" + p.diag + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// startRendered runs the Deployment's container as a local process: its args and env as
// rendered, its volumes materialised from the cluster, a kubeconfig with a token of its
// ServiceAccount.
func startRendered(t *testing.T, c *devcluster.Cluster, kube kubernetes.Interface, ns string, d appsv1.Deployment, dir string) *chartProcess {
	t.Helper()
	spec := d.Spec.Template.Spec
	ctr := spec.Containers[0]
	root := filepath.Join(dir, ctr.Name)
	mounts := map[string]string{} // mount path → local directory
	for _, m := range ctr.VolumeMounts {
		local := filepath.Join(root, m.Name)
		if err := os.MkdirAll(local, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name {
				materialise(t, kube, ns, v, local)
			}
		}
		mounts[m.MountPath] = local
	}
	// POD_IP: the address the controller publishes while it leads (a documentation address:
	// nothing dials it here, the gateway is pointed at 127.0.0.1 below).
	env := map[string]string{"POD_NAMESPACE": ns, "POD_NAME": d.Name + "-0", "POD_IP": "192.0.2.10"}
	var args []string
	for _, a := range ctr.Args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		for mp, local := range mounts {
			a = strings.ReplaceAll(a, "="+mp+"/", "="+local+"/")
		}
		a = strings.Replace(a, "--controller-address=execplane-controller."+ns+".svc:", "--controller-address=127.0.0.1:", 1)
		args = append(args, a)
	}
	args = append(args, "--kubeconfig="+serviceAccountKubeconfig(t, c, kube, ns, spec.ServiceAccountName, root))
	bin := map[string]string{"gateway": gatewayBin, "controller": controllerBin}[ctr.Name]
	p := &chartProcess{cmd: exec.Command(bin, args...), log: &clustertest.SyncBuffer{}, done: make(chan error, 1)}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	for _, port := range ctr.Ports {
		if port.Name == "diagnostics" {
			p.diag = fmt.Sprintf("127.0.0.1:%d", port.ContainerPort)
		}
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(45 * time.Second):
			_ = p.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("--- %s (%s) ---\n%s", ctr.Name, strings.Join(args, " "), p.log.String())
		}
	})
	return p
}

// materialise writes a volume's files as the kubelet would: Secrets, ConfigMaps, and
// projections of them (with their items).
func materialise(t *testing.T, kube kubernetes.Interface, ns string, v corev1.Volume, dir string) {
	t.Helper()
	write := func(data map[string][]byte, items []corev1.KeyToPath) {
		if len(items) == 0 {
			for k, b := range data {
				if err := os.WriteFile(filepath.Join(dir, k), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			return
		}
		for _, it := range items {
			if err := os.WriteFile(filepath.Join(dir, it.Path), data[it.Key], 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	secret := func(name string, items []corev1.KeyToPath) {
		s, err := kube.CoreV1().Secrets(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("volume %s: %v", v.Name, err)
		}
		write(s.Data, items)
	}
	configMap := func(name string, items []corev1.KeyToPath) {
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("volume %s: %v", v.Name, err)
		}
		data := map[string][]byte{}
		for k, s := range cm.Data {
			data[k] = []byte(s)
		}
		write(data, items)
	}
	switch {
	case v.Secret != nil:
		secret(v.Secret.SecretName, v.Secret.Items)
	case v.ConfigMap != nil:
		configMap(v.ConfigMap.Name, v.ConfigMap.Items)
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			switch {
			case src.Secret != nil:
				secret(src.Secret.Name, src.Secret.Items)
			case src.ConfigMap != nil:
				configMap(src.ConfigMap.Name, src.ConfigMap.Items)
			default:
				t.Fatalf("volume %s: a projection this test cannot materialise", v.Name)
			}
		}
	default:
		t.Fatalf("volume %s: a kind this test cannot materialise", v.Name)
	}
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the ServiceAccount
// (a TokenRequest), as the in-cluster configuration would.
func serviceAccountKubeconfig(t *testing.T, c *devcluster.Cluster, kube kubernetes.Interface, ns, sa, dir string) string {
	t.Helper()
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	rc := c.RESTConfig()
	caFile := rc.CAFile
	if caFile == "" {
		caFile = filepath.Join(dir, "cluster-ca.crt")
		if err := os.WriteFile(caFile, rc.CAData, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: sa, user: {token: %q}}]
contexts: [{name: sa, context: {cluster: local, user: sa, namespace: %q}}]
current-context: sa
`, rc.Host, caFile, tr.Status.Token, ns)
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func ptrTo[T any](v T) *T { return &v }
