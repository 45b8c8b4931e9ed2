package security

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestParseClientIdentity(t *testing.T) {
	long := "spiffe://example.org/" + strings.Repeat("a", MaxIdentityBytes-len("spiffe://example.org/"))
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"spiffe", "spiffe://example.org/ns/platform/sa/orchestrator", true},
		{"spiffe trust domain with underscore", "spiffe://my_domain.example/a", true},
		{"spiffe segment charset", "spiffe://example.org/A-z_0.9", true},
		{"https host only", "https://client.example.org", true},
		{"https path", "https://client.example.org/agents/ci", true},
		{"https port", "https://client.example.org:8443/x", true},
		{"https sub-delims and colon in path", "https://example.org/a:b@c!$&'()*+,;=~", true},
		{"https required encoding", "https://example.org/a%2Fb%25c%20d%C3%A9", true},
		{"at the length bound", long, true},

		{"empty", "", false},
		{"over the length bound", long + "a", false},
		{"uppercase scheme", "SPIFFE://example.org/a", false},
		{"mixed-case scheme", "Https://example.org", false},
		{"other scheme", "http://example.org/a", false},
		{"no authority", "spiffe:example.org/a", false},
		{"uppercase host", "spiffe://Example.org/a", false},
		{"uppercase https host", "https://EXAMPLE.org", false},
		{"userinfo", "https://user@example.org/a", false},
		{"userinfo spiffe", "spiffe://user@example.org/a", false},
		{"spiffe port", "spiffe://example.org:443/a", false},
		{"https default port", "https://example.org:443/a", false},
		{"https empty port", "https://example.org:/a", false},
		{"https port leading zero", "https://example.org:08443/a", false},
		{"https port out of range", "https://example.org:65536/a", false},
		{"https port not numeric", "https://example.org:84a3/a", false},
		{"query", "spiffe://example.org/a?x=1", false},
		{"empty query", "https://example.org/a?", false},
		{"fragment", "spiffe://example.org/a#x", false},
		{"dot segment", "spiffe://example.org/a/./b", false},
		{"dot-dot segment", "spiffe://example.org/a/../b", false},
		{"empty segment", "spiffe://example.org/a//b", false},
		{"trailing slash", "spiffe://example.org/a/", false},
		{"https trailing slash only", "https://example.org/", false},
		{"spiffe without path", "spiffe://example.org", false},
		{"spiffe percent-encoding", "spiffe://example.org/a%41", false},
		{"spiffe disallowed char", "spiffe://example.org/a:b", false},
		{"unnecessary encoding of unreserved", "https://example.org/%41", false},
		{"unnecessary encoding of tilde", "https://example.org/%7E", false},
		{"unnecessary encoding of sub-delim", "https://example.org/%21", false},
		{"encoded dot", "https://example.org/%2E%2E", false},
		{"lowercase hex", "https://example.org/a%2fb", false},
		{"truncated encoding", "https://example.org/a%2", false},
		{"encoded NUL", "https://example.org/a%00", false},
		{"encoded DEL", "https://example.org/a%7F", false},
		{"raw space", "https://example.org/a b", false},
		{"raw non-ASCII", "https://example.org/é", false},
		{"control character", "spiffe://example.org/a\x00", false},
		{"char needing encoding", "https://example.org/a\"b", false},
		{"empty host", "spiffe:///a", false},
		{"trailing dot host", "spiffe://example.org./a", false},
		{"empty label", "spiffe://example..org/a", false},
		{"long label", "spiffe://" + strings.Repeat("a", 64) + ".org/a", false},
		{"long host", "spiffe://" + strings.Repeat("a.", 127) + "org/a", false},
		{"https underscore host", "https://my_host.example.org", false},
		{"https label starts with hyphen", "https://-a.example.org", false},
		{"https IPv4 literal", "https://127.0.0.1/a", false},
		{"https numeric TLD", "https://example.123", false},
		{"https IPv6 literal", "https://[::1]/a", false},
		{"backslash", "https://example.org\\a", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := ParseClientIdentity(tt.in)
			if tt.ok {
				if err != nil || string(id) != tt.in {
					t.Fatalf("ParseClientIdentity = %q, %v; want accepted unchanged", id, err)
				}
				return
			}
			if !errors.Is(err, ErrNonCanonicalIdentity) {
				t.Fatalf("ParseClientIdentity error = %v; want ErrNonCanonicalIdentity", err)
			}
			if tt.in != "" && strings.Contains(err.Error(), tt.in) {
				t.Fatalf("error %q echoes the value", err)
			}
		})
	}
}

// sanExtension encodes a SubjectAltName extension with the given raw URI entries, so a test
// can write bytes that crypto/x509 itself would never produce.
func sanExtension(t *testing.T, uris ...string) pkix.Extension {
	t.Helper()
	var names []asn1.RawValue
	for _, u := range uris {
		names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: sanURITag, Bytes: []byte(u)})
	}
	names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 2, Bytes: []byte("dns.example.org")})
	der, err := asn1.Marshal(names)
	if err != nil {
		t.Fatal(err)
	}
	return pkix.Extension{Id: oidSubjectAltName, Value: der}
}

func TestIdentityFromCertificate(t *testing.T) {
	ca := newKey(t)
	caCert := rawCert(t, caTemplate("ca"), caTemplate("ca"), ca.Public(), ca)
	issue := func(ext ...pkix.Extension) *x509.Certificate {
		tmpl := clientTemplate(t)
		tmpl.ExtraExtensions = ext
		return rawCert(t, tmpl, caCert, newKey(t).Public(), ca)
	}
	const good = "spiffe://example.org/a"
	tests := []struct {
		name string
		cert *x509.Certificate
		want error
	}{
		{"one canonical URI and a DNS name", issue(sanExtension(t, good)), nil},
		{"no SAN extension", issue(), ErrNoIdentity},
		{"DNS name only", issue(sanExtension(t)), ErrNoIdentity},
		{"two URIs", issue(sanExtension(t, good, "spiffe://example.org/b")), ErrAmbiguousIdentity},
		{"same URI twice", issue(sanExtension(t, good, good)), ErrAmbiguousIdentity},
		{"uppercase scheme kept byte for byte", issue(sanExtension(t, "SPIFFE://example.org/a")), ErrNonCanonicalIdentity},
		{"uppercase host", issue(sanExtension(t, "spiffe://Example.org/a")), ErrNonCanonicalIdentity},
		{"nil certificate", nil, ErrNoIdentity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := IdentityFromCertificate(tt.cert)
			if !errors.Is(err, tt.want) || (tt.want == nil && string(id) != good) {
				t.Fatalf("IdentityFromCertificate = %q, %v; want %v", id, err, tt.want)
			}
		})
	}
}

func TestParseURISANsMalformed(t *testing.T) {
	for _, der := range [][]byte{nil, {0x30}, {0x04, 0x00}, {0x30, 0x00, 0x00}, {0x30, 0x02, 0x86, 0x05}} {
		if _, err := parseURISANs(der); !errors.Is(err, ErrNoIdentity) {
			t.Errorf("parseURISANs(%x) = %v; want ErrNoIdentity", der, err)
		}
	}
}

// FuzzParseClientIdentity checks that the package's own parser never accepts what net/url
// would not reproduce (the cross-check never decides alone), and the accepted form's bounds.
func FuzzParseClientIdentity(f *testing.F) {
	for _, s := range []string{
		"spiffe://example.org/ns/a", "https://h.example.org:8443/a%2Fb", "https://x.org/a:b@c",
		"SPIFFE://a/b", "https://a/%7e", "https://a.b/%C3%A9", "spiffe://a/b/../c",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		own := checkCanonical(s)
		id, err := ParseClientIdentity(s)
		if own == nil && err != nil {
			t.Fatalf("checkCanonical accepted %q but net/url does not reproduce it: %v", s, err)
		}
		if err != nil {
			return
		}
		u, perr := url.Parse(s)
		if perr != nil || u.String() != s || string(id) != s || len(s) > MaxIdentityBytes {
			t.Fatalf("accepted %q: %v", s, perr)
		}
		if u.Scheme != schemeSPIFFE && u.Scheme != schemeHTTPS {
			t.Fatalf("accepted scheme %q", u.Scheme)
		}
		if strings.ToLower(u.Host) != u.Host || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("accepted non-canonical %q", s)
		}
	})
}

// FuzzParseURISANs feeds arbitrary extension bytes to the SAN decoder.
func FuzzParseURISANs(f *testing.F) {
	f.Add([]byte{0x30, 0x00})
	f.Add([]byte{0x30, 0x07, 0x86, 0x05, 'a', ':', '/', '/', 'b'})
	f.Fuzz(func(t *testing.T, der []byte) {
		uris, err := parseURISANs(der)
		if err != nil {
			return
		}
		total := 0
		for _, u := range uris {
			total += len(u)
		}
		if total > len(der) {
			t.Fatalf("decoded %d bytes of URIs from %d bytes", total, len(der))
		}
	})
}
