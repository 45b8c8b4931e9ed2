package security

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/pkg/grant"
)

func TestBundleDigestConstruction(t *testing.T) {
	f := newFixture(t)
	b := f.mustLoad()
	// The documented construction, computed independently.
	var buf []byte
	entry := func(name string, content []byte) {
		buf = fmt.Appendf(buf, "%s", u64(len(name)))
		buf = append(buf, name...)
		buf = fmt.Appendf(buf, "%s", u64(len(content)))
		buf = append(buf, content...)
	}
	buf = append(buf, "execplane security bundle v1\x00"...)
	entry("", f.read(devbundle.ManifestFile))
	for _, name := range []string{devbundle.CACertFile, devbundle.GrantKeyFile, devbundle.GrantPublicFile, devbundle.RecordKeyFile, devbundle.ServerCertFile, devbundle.ServerKeyFile} {
		entry(name, f.read(name))
	}
	if want := FileDigest(buf); b.Digest() != want {
		t.Fatalf("digest %s; the documented construction gives %s", b.Digest(), want)
	}

	// Framing: moving a byte from a name to a content changes the digest.
	if bundleDigest([]byte("m"), map[string][]byte{"ab": []byte("c")}) == bundleDigest([]byte("m"), map[string][]byte{"a": []byte("bc")}) {
		t.Fatal("framing does not separate names from contents")
	}
	// Every file counts, not only the manifest.
	files := map[string][]byte{"a": []byte("1"), "b": []byte("2")}
	d := bundleDigest([]byte("m"), files)
	files["b"] = []byte("3")
	if bundleDigest([]byte("m"), files) == d {
		t.Fatal("a file's content does not reach the digest")
	}
}

// u64 is a big-endian uint64 as a string of 8 bytes.
func u64(n int) string {
	var b [8]byte
	for i := range 8 {
		b[7-i] = byte(n >> (8 * i))
	}
	return string(b[:])
}

func TestBundleFormatRedactsKeys(t *testing.T) {
	b := newFixture(t).mustLoad()
	holder := struct{ B Bundle }{*b}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%d", "%x", "%q"} {
		for _, v := range []any{b, *b, holder} {
			out := fmt.Sprintf(verb, v)
			if !strings.Contains(out, "security bundle generation 1") || len(out) > 200 {
				t.Errorf("%s of %T = %q", verb, v, out)
			}
		}
	}
}

func TestCheckTransition(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	b1 := f.mustLoad()
	again := f.mustLoad()

	f.m.Issuer = "other"
	f.writeManifest()
	drift := f.mustLoad()

	f.m.Generation = 2
	f.writeManifest()
	b2 := f.mustLoad()

	// Generation 3 switches to a key published just now: refused by grant.CheckRotation.
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	pubPEM, _ := devbundle.PublicKeyPEM(pub)
	privPEM, _ := devbundle.PrivateKeyPEM(priv)
	f.write("next.pub", pubPEM)
	f.write("next.key", privPEM)
	f.m.Generation = 3
	f.m.GrantKeys = []GrantKeyEntry{{ID: "dev-2", State: grant.KeySigning, PublicKeyFile: "next.pub", PrivateKeyFile: "next.key", VerifyFrom: now.Add(-time.Minute).Truncate(time.Second)}}
	f.repin()
	unsafe := f.mustLoad()

	tests := []struct {
		name       string
		prev, next *Bundle
		want       string
	}{
		{"first bundle", nil, b1, ""},
		{"same generation, same content", b1, again, ""},
		{"same generation, other content", b1, drift, "with different content"},
		{"higher generation", b1, b2, ""},
		{"rollback", b2, b1, "lower than the current"},
		{"unsafe key rotation", b2, unsafe, "unsafe key rotation"},
		{"no bundle", b1, nil, "no bundle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckTransition(tt.prev, tt.next, now)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrUnsafeTransition) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckTransition = %v; want %q", err, tt.want)
			}
		})
	}
}

func TestBundleValidAt(t *testing.T) {
	b := newFixture(t).mustLoad()
	if err := b.ValidAt(time.Now()); err != nil {
		t.Fatal(err)
	}
	err := b.ValidAt(b.ExpiresAt().Add(time.Second))
	if !errors.Is(err, ErrInvalidBundle) || !strings.Contains(err.Error(), "server certificate is not valid") {
		t.Fatalf("ValidAt(after expiry) = %v", err)
	}
	if err := b.ValidAt(time.Now().Add(-time.Hour)); err == nil || !strings.Contains(err.Error(), "signing key does not sign") {
		t.Fatalf("ValidAt(before the key) = %v", err)
	}
}
