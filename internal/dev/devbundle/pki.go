package devbundle

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

// backdate starts every certificate's validity this long before the generation time, so a
// loader whose clock is slightly behind still accepts it.
const backdate = 5 * time.Minute

// serialBits is the size of random certificate serial numbers (CA/B Forum: at least 64
// bits of entropy).
const serialBits = 128

// CA is a certificate authority that can issue more certificates for a bundle (tests issue
// extra client certificates with it).
type CA struct {
	// Certificate is the CA certificate.
	Certificate *x509.Certificate
	// Key is its private key.
	Key crypto.Signer
}

// NewCA creates a self-signed ECDSA P-256 CA valid from now-backdate for validity.
func NewCA(name string, now time.Time, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	cert, err := sign(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	return &CA{Certificate: cert, Key: key}, nil
}

// LeafSpec describes a leaf certificate to issue.
type LeafSpec struct {
	// CommonName is informational; identities are in SANs.
	CommonName string
	// Organization is the subject's O (Kubernetes reads groups from it).
	Organization []string
	// ExtKeyUsage lists the extended key usages (serverAuth, clientAuth).
	ExtKeyUsage []x509.ExtKeyUsage
	// DNSNames, IPAddresses and URIs are the subject alternative names.
	DNSNames    []string
	IPAddresses []net.IP
	URIs        []string
	// NotBefore and NotAfter bound the validity.
	NotBefore, NotAfter time.Time
}

// Issue creates an ECDSA P-256 key and a leaf certificate for it signed by ca.
func (ca *CA) Issue(spec LeafSpec) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: spec.CommonName, Organization: spec.Organization},
		NotBefore:             spec.NotBefore,
		NotAfter:              spec.NotAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           spec.ExtKeyUsage,
		BasicConstraintsValid: true,
		DNSNames:              spec.DNSNames,
		IPAddresses:           spec.IPAddresses,
	}
	for _, u := range spec.URIs {
		parsed, err := url.Parse(u)
		if err != nil {
			return nil, nil, fmt.Errorf("URI SAN: %w", err)
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	cert, err := sign(tmpl, ca.Certificate, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), serialBits))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// CertificatePEM encodes certificates as PEM, in order.
func CertificatePEM(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// PrivateKeyPEM encodes a private key as PEM "PRIVATE KEY" (PKCS#8).
func PrivateKeyPEM(key crypto.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// PublicKeyPEM encodes a public key as PEM "PUBLIC KEY" (PKIX).
func PublicKeyPEM(key crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}
