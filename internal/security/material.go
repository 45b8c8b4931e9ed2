package security

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/execplane/execplane/pkg/problem"
)

// PEM block types.
const (
	pemCertificate   = "CERTIFICATE"
	pemPublicKey     = "PUBLIC KEY"
	pemPrivateKey    = "PRIVATE KEY"     // PKCS#8
	pemECPrivateKey  = "EC PRIVATE KEY"  // SEC 1
	pemRSAPrivateKey = "RSA PRIVATE KEY" // PKCS#1
)

// pemBlocks decodes data as 1..max PEM blocks of the allowed types with nothing but
// whitespace around and between them, and no PEM headers (which is how legacy encrypted
// keys are marked). Anything else is an error: a stray block or trailing text usually means
// the wrong file was mounted.
func pemBlocks(data []byte, max int, allowed ...string) ([]*pem.Block, error) {
	var blocks []*pem.Block
	rest := data
	for {
		// pem.Decode silently skips text before a block; only whitespace is allowed here.
		rest = bytes.TrimLeft(rest, " \t\r\n")
		if len(rest) == 0 {
			break
		}
		if !bytes.HasPrefix(rest, []byte("-----BEGIN ")) {
			return nil, errors.New("data outside PEM blocks")
		}
		b, r := pem.Decode(rest)
		if b == nil {
			return nil, errors.New("malformed PEM block")
		}
		if !slices.Contains(allowed, b.Type) {
			return nil, fmt.Errorf("PEM block of type %q, want %q", truncateText(b.Type), allowed)
		}
		if len(b.Headers) != 0 {
			return nil, errors.New("PEM headers are not allowed (encrypted keys are not supported)")
		}
		blocks = append(blocks, b)
		if len(blocks) > max {
			return nil, fmt.Errorf("more than %d PEM blocks", max)
		}
		rest = r
	}
	if len(blocks) == 0 {
		return nil, errors.New("no PEM block")
	}
	return blocks, nil
}

func truncateText(s string) string {
	const max = 32
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// parseCertificates decodes 1..max PEM certificates.
func parseCertificates(data []byte, max int) ([]*x509.Certificate, error) {
	blocks, err := pemBlocks(data, max, pemCertificate)
	if err != nil {
		return nil, err
	}
	certs := make([]*x509.Certificate, 0, len(blocks))
	for i, b := range blocks {
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse", i)
		}
		certs = append(certs, c)
	}
	return certs, nil
}

// checkPublicKey enforces the key types and sizes accepted anywhere: RSA of
// MinRSAKeyBits..MaxRSAKeyBits, ECDSA on P-256, P-384 or P-521, Ed25519.
func checkPublicKey(pub any) error {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < MinRSAKeyBits || n > MaxRSAKeyBits {
			return fmt.Errorf("RSA key of %d bits, want %d..%d", n, MinRSAKeyBits, MaxRSAKeyBits)
		}
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return errors.New("ECDSA key on an unsupported curve")
		}
	case ed25519.PublicKey:
	default:
		return fmt.Errorf("unsupported public key type %T", pub)
	}
	return nil
}

// hasExtKeyUsage reports whether c lists usage explicitly. A certificate without the
// extension, or with anyExtendedKeyUsage only, does not count: crypto/x509 treats both as
// "any usage", which would let a certificate minted for one purpose serve another.
func hasExtKeyUsage(c *x509.Certificate, usage x509.ExtKeyUsage) bool {
	return slices.Contains(c.ExtKeyUsage, usage)
}

func isCA(c *x509.Certificate) bool { return c.BasicConstraintsValid && c.IsCA }

func validAt(c *x509.Certificate, now time.Time) bool {
	return !now.Before(c.NotBefore) && !now.After(c.NotAfter)
}

// checkServerCertificate validates the server chain and key and returns the TLS
// certificate: the key matches the leaf; the leaf is no CA, carries the serverAuth extended
// key usage and a DNS or IP SAN, and is valid at now; every certificate's key is of an
// accepted type and size; each certificate is signed by the next one.
func checkServerCertificate(p *problem.List, certPEM, keyPEM []byte, now time.Time) (tls.Certificate, bool) {
	const certAt, keyAt = "serverCertificate.certFile", "serverCertificate.keyFile"
	ok := true
	chain, err := parseCertificates(certPEM, MaxServerChainCertificates)
	if err != nil {
		p.Add(certAt, "%v", err)
		ok = false
	}
	if _, err := pemBlocks(keyPEM, 1, pemPrivateKey, pemECPrivateKey, pemRSAPrivateKey); err != nil {
		p.Add(keyAt, "%v", err)
		ok = false
	}
	if !ok {
		return tls.Certificate{}, false
	}
	for i, c := range chain {
		if err := checkPublicKey(c.PublicKey); err != nil {
			p.Add(certAt, "certificate %d: %v", i, err)
			ok = false
		}
		if i+1 < len(chain) && c.CheckSignatureFrom(chain[i+1]) != nil {
			p.Add(certAt, "certificate %d is not signed by certificate %d: the chain is not in order", i, i+1)
			ok = false
		}
	}
	leaf := chain[0]
	if isCA(leaf) {
		p.Add(certAt, "the leaf is a CA certificate")
		ok = false
	}
	if !hasExtKeyUsage(leaf, x509.ExtKeyUsageServerAuth) {
		p.Add(certAt, "the leaf lacks the serverAuth extended key usage")
		ok = false
	}
	if len(leaf.DNSNames) == 0 && len(leaf.IPAddresses) == 0 {
		p.Add(certAt, "the leaf has no DNS or IP subject alternative name")
		ok = false
	}
	if !validAt(leaf, now) {
		p.Add(certAt, "the leaf is not valid now (valid %s..%s)",
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
		ok = false
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// The library's message names the mismatch or the key encoding, never the key.
		p.Add(keyAt, "does not match the certificate or does not parse")
		return tls.Certificate{}, false
	}
	if cert.Leaf == nil {
		cert.Leaf = leaf
	}
	return cert, ok
}

// checkCABundle validates a CA bundle (the client CA bundle, a renewable server
// certificate's issuers), reporting problems at the field path at: 1..MaxClientCAs
// certificates, each a CA (basic constraints) whose key usage, when present, allows
// certificate signing, with an accepted key; at least one valid at now. CAs that have
// expired are tolerated (they verify nothing), so that a bundle does not become invalid
// merely because an old CA, kept for a rotation, ran out.
func checkCABundle(p *problem.List, at string, data []byte, now time.Time) ([]*x509.Certificate, bool) {
	cas, err := parseCertificates(data, MaxClientCAs)
	if err != nil {
		p.Add(at, "%v", err)
		return nil, false
	}
	ok := true
	current := 0
	for i, c := range cas {
		if !isCA(c) {
			p.Add(at, "certificate %d is not a CA certificate", i)
			ok = false
		}
		if c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0 {
			p.Add(at, "certificate %d may not sign certificates (key usage)", i)
			ok = false
		}
		if err := checkPublicKey(c.PublicKey); err != nil {
			p.Add(at, "certificate %d: %v", i, err)
			ok = false
		}
		if validAt(c, now) {
			current++
		}
	}
	if current == 0 {
		p.Add(at, "no CA certificate is valid now")
		ok = false
	}
	return cas, ok
}

// parseGrantPublicKey decodes a PEM "PUBLIC KEY" (PKIX) Ed25519 key.
func parseGrantPublicKey(data []byte) (ed25519.PublicKey, error) {
	blocks, err := pemBlocks(data, 1, pemPublicKey)
	if err != nil {
		return nil, err
	}
	pub, err := x509.ParsePKIXPublicKey(blocks[0].Bytes)
	if err != nil {
		return nil, errors.New("not a PKIX public key")
	}
	k, ok := pub.(ed25519.PublicKey)
	if !ok {
		return nil, errors.New("not an Ed25519 key")
	}
	return k, nil
}

// parseGrantPrivateKey decodes a PEM "PRIVATE KEY" (PKCS#8) Ed25519 key.
func parseGrantPrivateKey(data []byte) (ed25519.PrivateKey, error) {
	blocks, err := pemBlocks(data, 1, pemPrivateKey)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(blocks[0].Bytes)
	if err != nil {
		return nil, errors.New("not a PKCS#8 private key")
	}
	k, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, errors.New("not an Ed25519 key")
	}
	return k, nil
}
