package devcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
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
	// APIServerCert/Key serve the apiserver (127.0.0.1, localhost, kubernetes.default...).
	APIServerCert, APIServerKey string
	// AdminCert/Key authenticate as system:masters.
	AdminCert, AdminKey string
	// KubeletCert/Key serve the node exec endpoint and KWOK's kubelet API (127.0.0.1).
	KubeletCert, KubeletKey string
	// KubeletClientCert/Key authenticate the apiserver to the node exec endpoint.
	KubeletClientCert, KubeletClientKey string
	// ServiceAccountKey/Pub sign and verify service-account tokens.
	ServiceAccountKey, ServiceAccountPub string
}

type certSpec struct {
	name     string
	subject  pkix.Name
	usage    x509.ExtKeyUsage
	ips      []net.IP
	dnsNames []string
}

// generatePKI writes a fresh CA and every certificate the cluster needs into dir.
func generatePKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "execplane-devcluster-ca"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	if p.CACert, p.CAKey, err = writePair(dir, "ca", caDER, caKey); err != nil {
		return nil, err
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1")}
	specs := []struct {
		spec      certSpec
		cert, key *string
	}{
		{certSpec{"apiserver", pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
			append(loopback, net.ParseIP("10.0.0.1")),
			[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
			&p.APIServerCert, &p.APIServerKey},
		{certSpec{"admin", pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, nil, nil},
			&p.AdminCert, &p.AdminKey},
		{certSpec{"kubelet", pkix.Name{CommonName: "devcluster-kubelet"}, x509.ExtKeyUsageServerAuth, loopback, []string{"localhost"}},
			&p.KubeletCert, &p.KubeletKey},
		{certSpec{"kubelet-client", pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, nil, nil},
			&p.KubeletClientCert, &p.KubeletClientKey},
	}
	for i, s := range specs {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)),
			Subject:      s.spec.subject,
			NotBefore:    now.Add(-time.Minute),
			NotAfter:     now.Add(certLifetime),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{s.spec.usage},
			IPAddresses:  s.spec.ips,
			DNSNames:     s.spec.dnsNames,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return nil, fmt.Errorf("certificate %s: %w", s.spec.name, err)
		}
		if *s.cert, *s.key, err = writePair(dir, s.spec.name, der, key); err != nil {
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
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	p.ServiceAccountPub = filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(p.ServiceAccountPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// writePair writes name.crt (when der is set) and name.key.
func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) (certPath, keyPath string, err error) {
	if der != nil {
		certPath = filepath.Join(dir, name+".crt")
		if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
			return "", "", err
		}
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	keyPath = filepath.Join(dir, name+".key")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}
