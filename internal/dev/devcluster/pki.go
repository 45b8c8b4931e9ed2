package devcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/execplane/execplane/internal/dev/devbundle"
)

// certLifetime is long enough for any test run or demo session and short enough that a
// leaked state directory does not hold a usable credential for long.
const certLifetime = 7 * 24 * time.Hour

// PKI holds the paths of the local cluster's certificates and keys (PEM files).
type PKI struct {
	Dir string
	// CA signs every certificate below and is the client CA of the apiserver and of the
	// node exec endpoint.
	CACert, CAKey string
	// APIServerCert/Key serve the apiserver (127.0.0.1, the real node's address, the
	// kubernetes Service's, localhost, kubernetes.default...).
	APIServerCert, APIServerKey string
	// AdminCert/Key authenticate as system:masters.
	AdminCert, AdminKey string
	// KubeletCert/Key serve the node exec endpoint and KWOK's kubelet API (127.0.0.1).
	KubeletCert, KubeletKey string
	// KubeletClientCert/Key authenticate the apiserver to the node exec endpoint.
	KubeletClientCert, KubeletClientKey string
	// ServiceAccountKey/Pub sign and verify service-account tokens.
	ServiceAccountKey, ServiceAccountPub string
	// NodeClientCert/Key authenticate the real node's kubelet (system:node:<name> in
	// system:nodes, for the Node authoriser); NodeServingCert/Key serve its API on the node
	// address, which the apiserver verifies against the CA.
	NodeClientCert, NodeClientKey   string
	NodeServingCert, NodeServingKey string
	// ProxyClientCert/Key authenticate the real node's kube-proxy (system:kube-proxy, which
	// the default RBAC binds to system:node-proxier).
	ProxyClientCert, ProxyClientKey string
}

// generatePKI writes a fresh CA and every certificate the cluster needs into dir, using the
// development CA of internal/security/devbundle (ECDSA P-256).
func generatePKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	ca, err := devbundle.NewCA("execplane-devcluster-ca", now, certLifetime)
	if err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir}
	if p.CACert, p.CAKey, err = writePair(dir, "ca", ca.Certificate, ca.Key); err != nil {
		return nil, err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	leaves := []struct {
		name      string
		spec      devbundle.LeafSpec
		cert, key *string
	}{
		{"apiserver", devbundle.LeafSpec{CommonName: "kube-apiserver", ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses: append(loopback, net.ParseIP(realNodeIP), net.ParseIP(apiServiceIP)),
			DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
			&p.APIServerCert, &p.APIServerKey},
		{"admin", devbundle.LeafSpec{CommonName: "admin", Organization: []string{"system:masters"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
			&p.AdminCert, &p.AdminKey},
		{"kubelet", devbundle.LeafSpec{CommonName: "devcluster-kubelet", ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: loopback, DNSNames: []string{"localhost"}},
			&p.KubeletCert, &p.KubeletKey},
		{"kubelet-client", devbundle.LeafSpec{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
			&p.KubeletClientCert, &p.KubeletClientKey},
		{"node-client", devbundle.LeafSpec{CommonName: "system:node:" + RealNodeName, Organization: []string{"system:nodes"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
			&p.NodeClientCert, &p.NodeClientKey},
		{"node-serving", devbundle.LeafSpec{CommonName: RealNodeName, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP(realNodeIP)}, DNSNames: []string{RealNodeName}},
			&p.NodeServingCert, &p.NodeServingKey},
		{"kube-proxy", devbundle.LeafSpec{CommonName: "system:kube-proxy", ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
			&p.ProxyClientCert, &p.ProxyClientKey},
	}
	for _, l := range leaves {
		l.spec.NotBefore, l.spec.NotAfter = now.Add(-time.Minute), now.Add(certLifetime)
		cert, key, err := ca.Issue(l.spec)
		if err != nil {
			return nil, fmt.Errorf("certificate %s: %w", l.name, err)
		}
		if *l.cert, *l.key, err = writePair(dir, l.name, cert, key); err != nil {
			return nil, err
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if _, p.ServiceAccountKey, err = writePair(dir, "sa", nil, saKey); err != nil {
		return nil, err
	}
	pub, err := devbundle.PublicKeyPEM(saKey.Public())
	if err != nil {
		return nil, err
	}
	p.ServiceAccountPub = filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(p.ServiceAccountPub, pub, 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// writePair writes name.crt (when cert is set) and name.key (PKCS#8).
func writePair(dir, name string, cert *x509.Certificate, key crypto.PrivateKey) (certPath, keyPath string, err error) {
	if cert != nil {
		certPath = filepath.Join(dir, name+".crt")
		if err := os.WriteFile(certPath, devbundle.CertificatePEM(cert), 0o600); err != nil {
			return "", "", err
		}
	}
	keyPEM, err := devbundle.PrivateKeyPEM(key)
	if err != nil {
		return "", "", err
	}
	keyPath = filepath.Join(dir, name+".key")
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}
