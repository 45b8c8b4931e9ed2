package security

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/execplane/execplane/pkg/problem"
)

// MaxServerNames bounds the names of a renewable server certificate (serverCertificate.renewal's
// dnsNames, ipAddresses and uris together). A Service has four DNS forms; public CAs cap a
// certificate at 100 names, and no deployment of two Services needs more.
const MaxServerNames = 100

// ServerLeaf identifies the server certificate of a bundle whose certificate is renewable in
// place: what the high-water mark records, so that an older certificate is refused by every
// replica, a restarted one included.
type ServerLeaf struct {
	// NotBefore is the leaf's notBefore: renewals are ordered by it.
	NotBefore time.Time
	// Digest is FileDigest of the leaf's DER encoding (its SHA-256 fingerprint).
	Digest string
}

// validityWindow is when one verified chain of a renewable leaf is valid: the latest
// notBefore and the earliest notAfter of its certificates, the issuing CA included.
type validityWindow struct{ from, until time.Time }

func (w validityWindow) contains(now time.Time) bool {
	return !now.Before(w.from) && !now.After(w.until)
}

// validate records the problems of serverCertificate.renewal that need no file: the issuer
// file is required (its path and pin are checked with the other files), the names are in
// canonical form, unique, within MaxServerNames, and include a DNS name or an IP address.
func (r *ServerCertificateRenewal) validate(p *problem.List) {
	const at = "serverCertificate.renewal"
	if r.IssuerCABundle == "" {
		p.Add(at+".issuerCABundle", "is required: the CAs a renewed certificate must chain to")
	}
	if n := len(r.DNSNames) + len(r.IPAddresses) + len(r.URIs); n > MaxServerNames {
		p.Add(at, "%d names, at most %d", n, MaxServerNames)
		return
	}
	if len(r.DNSNames) == 0 && len(r.IPAddresses) == 0 {
		p.Add(at, "needs a DNS name or an IP address: the names clients verify")
	}
	checkNames(p, at+".dnsNames", r.DNSNames, checkDNSName)
	checkNames(p, at+".ipAddresses", r.IPAddresses, func(s string) error {
		if ip := net.ParseIP(s); ip == nil || ip.String() != s {
			return errors.New("must be an IP address in canonical form (as net.IP prints it)")
		}
		return nil
	})
	checkNames(p, at+".uris", r.URIs, func(s string) error {
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" || u.String() != s || len(s) > MaxIdentityBytes || !printableASCII(s) {
			return fmt.Errorf("must be an absolute URI of at most %d printable ASCII bytes, as net/url prints it", MaxIdentityBytes)
		}
		return nil
	})
}

// checkNames checks each name with check and that none repeats.
func checkNames(p *problem.List, at string, names []string, check func(string) error) {
	seen := make(map[string]int, len(names))
	for i, n := range names {
		if err := check(n); err != nil {
			p.Add(fmt.Sprintf("%s[%d]", at, i), "%v", err)
		} else if first, dup := seen[n]; dup {
			p.Add(fmt.Sprintf("%s[%d]", at, i), "duplicate of %s[%d]", at, first)
		} else {
			seen[n] = i
		}
	}
}

// checkDNSName accepts a lowercase DNS name of LDH labels (RFC 1123), at most 253 bytes,
// whose first label may be the wildcard "*". Lowercase only, so that the set comparison with
// a leaf's names (compared lowercased) is exact.
func checkDNSName(s string) error {
	bad := errors.New(`must be a lowercase DNS name: dot-separated labels of [a-z0-9-], not starting or ending with "-", the first one possibly "*"`)
	if len(s) == 0 || len(s) > maxHostBytes {
		return bad
	}
	for i, label := range strings.Split(s, ".") {
		if i == 0 && label == "*" {
			continue
		}
		if len(label) == 0 || len(label) > maxLabelBytes || label[0] == '-' || label[len(label)-1] == '-' {
			return bad
		}
		for j := 0; j < len(label); j++ {
			if c := label[j]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return bad
			}
		}
	}
	return nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// checkRenewal checks a renewable server certificate against serverCertificate.renewal at
// now: the leaf chains (with the chain file's intermediates) to one of issuers for the
// serverAuth usage, every certificate of that chain valid now, and its subject alternative
// names are exactly r's. It returns the validity windows of the verified chains, for ValidAt.
// What every server certificate must satisfy (key match, no CA, serverAuth, a SAN, the leaf
// valid now) is checkServerCertificate's.
func checkRenewal(p *problem.List, r *ServerCertificateRenewal, cert tls.Certificate, issuers []*x509.Certificate, now time.Time) []validityWindow {
	const at = "serverCertificate.certFile"
	leaf := cert.Leaf
	roots := x509.NewCertPool()
	for _, c := range issuers {
		roots.AddCert(c)
	}
	intermediates := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil { // parsed once already
			intermediates.AddCert(c)
		}
	}
	checkLeafNames(p, at, r, leaf)
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: intermediates,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		// crypto/x509's text is dropped, as for client chains (classifyVerifyError).
		var invalid x509.CertificateInvalidError
		if errors.As(err, &invalid) && invalid.Reason == x509.Expired {
			p.Add(at, "a certificate of the chain to serverCertificate.renewal.issuerCABundle is not valid now")
		} else {
			p.Add(at, "the leaf does not chain to serverCertificate.renewal.issuerCABundle for the serverAuth usage: "+
				"a renewed certificate must come from the pinned issuers")
		}
		return nil
	}
	windows := make([]validityWindow, 0, len(chains))
	for _, chain := range chains {
		w := validityWindow{from: chain[0].NotBefore, until: chain[0].NotAfter}
		for _, c := range chain[1:] {
			if c.NotBefore.After(w.from) {
				w.from = c.NotBefore
			}
			if c.NotAfter.Before(w.until) {
				w.until = c.NotAfter
			}
		}
		windows = append(windows, w)
	}
	return windows
}

// checkLeafNames compares the leaf's subject alternative names with r's, as sets: DNS names
// case-insensitively (DNS is), IP addresses in canonical form, URIs as net/url prints them.
// Email addresses are refused.
func checkLeafNames(p *problem.List, at string, r *ServerCertificateRenewal, leaf *x509.Certificate) {
	var dns, ips, uris []string
	for _, n := range leaf.DNSNames {
		dns = append(dns, strings.ToLower(n))
	}
	for _, ip := range leaf.IPAddresses {
		ips = append(ips, ip.String())
	}
	for _, u := range leaf.URIs {
		uris = append(uris, u.String())
	}
	compareNames(p, at, "DNS names", r.DNSNames, dns)
	compareNames(p, at, "IP addresses", r.IPAddresses, ips)
	compareNames(p, at, "URIs", r.URIs, uris)
	if len(leaf.EmailAddresses) > 0 {
		p.Add(at, "the leaf has email addresses among its names; serverCertificate.renewal allows none")
	}
}

// maxNamesShown bounds how many differing names one problem message quotes.
const maxNamesShown = 4

// compareNames records a problem when the leaf's names of one kind are not exactly want.
func compareNames(p *problem.List, at, kind string, want, got []string) {
	missing := difference(want, got)
	extra := difference(got, want)
	if len(missing) == 0 && len(extra) == 0 {
		return
	}
	p.Add(at, "the leaf's %s are not exactly serverCertificate.renewal's: missing %s, not allowed %s",
		kind, quoteNames(missing), quoteNames(extra))
}

// difference returns the members of a that are not in b, sorted and without repeats.
func difference(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

func quoteNames(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	shown := make([]string, 0, maxNamesShown+1)
	for i, n := range names {
		if i == maxNamesShown {
			shown = append(shown, fmt.Sprintf("and %d more", len(names)-i))
			break
		}
		shown = append(shown, quoteName(n))
	}
	return strings.Join(shown, ", ")
}
