package devdeploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster"
)

// cert-manager, as docs/deployment.md "Certificates from cert-manager" has an operator use
// it: a self-signed root, a CA Issuer signing with it, a Certificate for the server (the
// bundle's, renewable in place) and one for the gateway's control-API client. The
// deployment's Secrets then hold what the operator provides beside them: the manifest, the
// grant keys and the CA certificate pinned twice.

// The cert-manager objects, by the names docs/deployment.md gives them.
const (
	caSecret       = "execplane-ca"
	ServerSecret   = "execplane-tls"
	caCertificate  = "execplane-ca"
	ServerCertName = "execplane-tls"
	// ControlCertName is the gateway's control-API client Certificate; its Secret is
	// ControlClientSecret.
	ControlCertName = ControlClientSecret
)

var (
	certificates = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}
	issuers      = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "issuers"}
)

// CertManager is cert-manager's controller running against the cluster.
type CertManager struct {
	cmd  *exec.Cmd
	done chan error
}

// StartCertManager installs cert-manager's CRDs and starts its controller, serving namespace
// (dir is hack/build-cert-manager.sh's: cert-manager-controller and crds/). Its output goes
// to log.
func StartCertManager(ctx context.Context, c *devcluster.Cluster, dir, namespace string, log io.Writer) (*CertManager, error) {
	if _, err := c.InstallCRDs(ctx, filepath.Join(dir, "crds")); err != nil {
		return nil, fmt.Errorf("devdeploy: cert-manager's CRDs: %w", err)
	}
	cmd := exec.Command(filepath.Join(dir, "cert-manager-controller"), "--kubeconfig", c.Kubeconfig(), "--namespace", namespace)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("devdeploy: cert-manager: %w", err)
	}
	m := &CertManager{cmd: cmd, done: make(chan error, 1)}
	go func() { m.done <- cmd.Wait() }()
	return m, nil
}

// Stop ends the controller.
func (m *CertManager) Stop() {
	_ = m.cmd.Process.Signal(os.Interrupt)
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
}

// issuersYAML is docs/deployment.md's CA: a self-signed root and a CA Issuer.
const issuersYAML = `apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: execplane-selfsigned}
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: execplane-ca}
spec:
  isCA: true
  commonName: execplane CA
  secretName: execplane-ca
  duration: 87600h
  renewBefore: 8760h
  privateKey: {algorithm: ECDSA, size: 256, rotationPolicy: Never}
  issuerRef: {name: execplane-selfsigned, kind: Issuer}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: execplane-ca}
spec:
  ca: {secretName: execplane-ca}
`

// leavesYAML is docs/deployment.md's server certificate and the gateway's client one.
var leavesYAML = template.Must(template.New("leaves").Parse(`apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: execplane-tls}
spec:
  secretName: execplane-tls
  secretTemplate:
    labels: {app.kubernetes.io/part-of: execplane}
  dnsNames:
{{- range .DNSNames}}
    - {{.}}
{{- end}}
  usages: [digital signature, server auth]
  duration: 720h
  renewBefore: 240h
  privateKey: {algorithm: ECDSA, size: 256, rotationPolicy: Always}
  issuerRef: {name: execplane-ca, kind: Issuer}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: execplane-gateway-control}
spec:
  secretName: execplane-gateway-control
  uris: [{{.GatewayIdentity}}]
  usages: [digital signature, client auth]
  duration: 720h
  renewBefore: 240h
  privateKey: {algorithm: ECDSA, size: 256, rotationPolicy: Always}
  issuerRef: {name: execplane-ca, kind: Issuer}
`))

// issueWithCertManager has cert-manager issue the CA, generates the rest of the bundle
// signed by it (the manifest with the server certificate renewable in place for exactly the
// Certificate's names, the grant keys, callers' certificates), then has cert-manager issue
// the server and gateway certificates.
func (d *Deployment) issueWithCertManager(ctx context.Context, dnsNames []string) error {
	if err := d.apply(ctx, []byte(issuersYAML)); err != nil {
		return err
	}
	if err := d.waitCertificate(ctx, caCertificate); err != nil {
		return err
	}
	s, err := d.opts.Cluster.Kube().CoreV1().Secrets(d.Namespace).Get(ctx, caSecret, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("devdeploy: the CA's Secret: %w", err)
	}
	ca, err := devbundle.ParseCA(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return err
	}
	d.Bundle, err = devbundle.Generate(filepath.Join(d.opts.Dir, "bundle"), devbundle.Options{
		CA: ca, DNSNames: dnsNames, ExactServerNames: true, RenewableServer: true,
	})
	if err != nil {
		return err
	}
	var leaves bytes.Buffer
	if err := leavesYAML.Execute(&leaves, map[string]any{"DNSNames": dnsNames, "GatewayIdentity": d.Bundle.Gateway.Identity}); err != nil {
		return fmt.Errorf("devdeploy: %w", err)
	}
	if err := d.apply(ctx, leaves.Bytes()); err != nil {
		return err
	}
	for _, name := range []string{ServerCertName, ControlCertName} {
		if err := d.waitCertificate(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// apply creates the cert-manager objects of a YAML stream in the release namespace.
func (d *Deployment) apply(ctx context.Context, stream []byte) error {
	client, err := dynamic.NewForConfig(d.opts.Cluster.RESTConfig())
	if err != nil {
		return err
	}
	for doc := range strings.SplitSeq(string(stream), "\n---\n") {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return fmt.Errorf("devdeploy: %w", err)
		}
		gvr := issuers
		if u.GetKind() == "Certificate" {
			gvr = certificates
		}
		if _, err := client.Resource(gvr).Namespace(d.Namespace).Create(ctx, &u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("devdeploy: %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// issueTimeout bounds cert-manager's issuance of one Certificate: a key, a request,
// its approval and signature, the Secret written (seconds here).
const issueTimeout = 2 * time.Minute

// waitCertificate waits until the Certificate name is Ready and its Secret written.
func (d *Deployment) waitCertificate(ctx context.Context, name string) error {
	client, err := dynamic.NewForConfig(d.opts.Cluster.RESTConfig())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, issueTimeout)
	defer cancel()
	var last string
	for {
		u, err := client.Resource(certificates).Namespace(d.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			if ready, message := condition(u, "Ready"); ready {
				return nil
			} else {
				last = message
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devdeploy: Certificate %s not ready within %s: %s", name, issueTimeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// condition reports whether the object's status condition kind is True, with its message.
func condition(u *unstructured.Unstructured, kind string) (bool, string) {
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		if m["type"] == kind {
			msg, _ := m["message"].(string)
			return m["status"] == "True", msg
		}
	}
	return false, "no " + kind + " condition"
}

// Renew has cert-manager reissue the Certificate name now, as `cmctl renew` does: the
// Issuing condition set True, reason ManuallyTriggered, on its status. It returns once the
// Certificate's Secret holds a certificate other than the one it held before.
func (d *Deployment) Renew(ctx context.Context, name string) (before, after []byte, err error) {
	client, err := dynamic.NewForConfig(d.opts.Cluster.RESTConfig())
	if err != nil {
		return nil, nil, err
	}
	certs := client.Resource(certificates).Namespace(d.Namespace)
	u, err := certs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("devdeploy: %w", err)
	}
	secretName, _, _ := unstructured.NestedString(u.Object, "spec", "secretName")
	secrets := d.opts.Cluster.Kube().CoreV1().Secrets(d.Namespace)
	s, err := secrets.Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("devdeploy: %w", err)
	}
	before = s.Data[corev1.TLSCertKey]
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	conditions = append(conditions, map[string]any{
		"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
		"message": "Certificate re-issuance manually triggered", "observedGeneration": u.GetGeneration(),
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	})
	if err := unstructured.SetNestedSlice(u.Object, conditions, "status", "conditions"); err != nil {
		return nil, nil, err
	}
	if _, err := certs.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		return nil, nil, fmt.Errorf("devdeploy: renewing %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, issueTimeout)
	defer cancel()
	for {
		s, err := secrets.Get(ctx, secretName, metav1.GetOptions{})
		if err == nil && len(s.Data[corev1.TLSCertKey]) > 0 && !bytes.Equal(s.Data[corev1.TLSCertKey], before) {
			if err := d.waitCertificate(ctx, name); err != nil {
				return nil, nil, err
			}
			return before, s.Data[corev1.TLSCertKey], nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, errors.Join(fmt.Errorf("devdeploy: %s was not reissued within %s", name, issueTimeout), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CertManagerBinEnv names the environment variable that points at cert-manager's directory
// (hack/build-cert-manager.sh); when unset, that script finds or builds it.
const CertManagerBinEnv = "EXECPLANE_CERT_MANAGER_BIN"

// FindCertManager returns cert-manager's directory: $EXECPLANE_CERT_MANAGER_BIN when set,
// otherwise the output of hack/build-cert-manager.sh (built once, cached by version).
func FindCertManager(ctx context.Context) (string, error) {
	dir, err := devcluster.BinaryDir(ctx, CertManagerBinEnv, "build-cert-manager.sh", "cert-manager")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "cert-manager-controller")); err != nil {
		return "", fmt.Errorf("%w in %s: cert-manager-controller (run hack/build-cert-manager.sh)", devcluster.ErrBinariesMissing, dir)
	}
	return dir, nil
}
