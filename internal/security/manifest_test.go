package security

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/execplane/execplane/pkg/grant"
)

// pin is a well-formed digest; ParseManifest checks pins' form only.
const pin = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

// validManifest is the brief's example with pins; each test case edits it textually.
var validManifest = `version: 1
generation: 7
serverCertificate: {certFile: server.crt, keyFile: server.key}
clientCABundle: client-ca.crt
grantKeys:
  - id: k1
    state: retired
    publicKeyFile: k1.pub
    verifyFrom: 2026-10-01T00:00:00Z
    verifyUntil: 2026-11-15T00:00:00Z
  - id: k2
    state: signing
    publicKeyFile: k2.pub
    privateKeyFile: k2.key
    verifyFrom: 2026-11-01T00:00:00Z
  - id: k3
    state: verify-only
    publicKeyFile: keys/k3.pub
    verifyFrom: 2026-11-20T00:00:00Z
recordKeys:
  - {id: r2, file: r2.key}
  - {id: r1, file: r1.key}
issuer: execplane
audience: execplane
grantLifetimes: {environment: 10m, run: 5m}
clients:
  - uri: spiffe://example.org/ns/platform/sa/orchestrator
    mayAttestOwner: true
    administrator: false
    administratorFor: []
  - uri: spiffe://example.org/ns/platform/sa/admin
    administrator: true
    administratorFor: [spiffe://example.org/ns/platform/sa/orchestrator]
fileDigests:
  server.crt: ` + pin + `
  server.key: ` + pin + `
  client-ca.crt: ` + pin + `
  k1.pub: ` + pin + `
  k2.pub: ` + pin + `
  k2.key: ` + pin + `
  keys/k3.pub: ` + pin + `
  r2.key: ` + pin + `
  r1.key: ` + pin + `
`

// A manifest of the release before sealing has no record keys: valid (records are then
// unsealed, and answered unverified).
func TestParseManifestWithoutRecordKeys(t *testing.T) {
	m, err := ParseManifest([]byte(strings.Replace(strings.Replace(validManifest,
		"recordKeys:\n  - {id: r2, file: r2.key}\n  - {id: r1, file: r1.key}\n", "", 1),
		"  r2.key: "+pin+"\n  r1.key: "+pin+"\n", "", 1)))
	if err != nil || len(m.RecordKeys) != 0 {
		t.Fatalf("a manifest without record keys: %v %v", m, err)
	}
}

func TestParseManifestValid(t *testing.T) {
	m, err := ParseManifest([]byte(validManifest))
	if err != nil {
		t.Fatal(err)
	}
	if m.Generation != 7 || len(m.GrantKeys) != 3 || len(m.Clients) != 2 {
		t.Fatalf("manifest = %+v", m)
	}
	k2 := m.GrantKeys[1]
	if k2.State != grant.KeySigning || !k2.VerifyFrom.Equal(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)) || !k2.VerifyUntil.IsZero() {
		t.Fatalf("k2 = %+v", k2)
	}
	if time.Duration(m.GrantLifetimes.Run) != 5*time.Minute {
		t.Fatalf("run lifetime = %v", m.GrantLifetimes.Run)
	}
	if p := m.Clients[1].Policy(); !p.AdministersClient(m.Clients[0].URI) {
		t.Fatalf("admin policy = %+v", p)
	}
}

func TestParseManifestStrict(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(validManifest, old) {
			t.Fatalf("test bug: %q not in the manifest", old)
		}
		return strings.Replace(validManifest, old, new, 1)
	}
	tests := []struct {
		name string
		doc  string
		want string // a substring of the error
	}{
		{"unknown field", edit("issuer:", "issuers: x\nissuer:"), `unknown field "issuers"`},
		{"unknown nested field", edit("keyFile: server.key}", "keyFile: server.key, chainFile: x}"), `unknown field "serverCertificate.chainFile"`},
		{"duplicate key", edit("issuer: execplane", "issuer: execplane\nissuer: other"), `already set in map`},
		{"key differing in case", edit("generation: 7", "Generation: 7"), `unknown field "Generation"`},
		{"both cases", edit("generation: 7", "generation: 7\nGeneration: 8"), `unknown field "Generation"`},
		{"nested key differing in case", edit("state: signing", "State: signing"), `unknown field "grantKeys[1].State"`},
		{"second document", validManifest + "---\ngeneration: 8\n", "more than one YAML document"},
		{"second empty document", validManifest + "---\n", "more than one YAML document"},
		{"empty", "", "manifest: is empty"},
		{"comment only", "# nothing\n", "manifest: is empty"},
		{"not a mapping", "- a\n", "cannot unmarshal array"},
		{"non-string key", edit("issuer: execplane", "1: x\nissuer: execplane"), "is a int, not a string"},
		{"generation as string", edit("generation: 7", `generation: "7"`), "generation"},
		{"negative generation", edit("generation: 7", "generation: -1"), "generation"},
		{"fractional generation", edit("generation: 7", "generation: 1.5"), "generation"},
		{"generation zero", edit("generation: 7", "generation: 0"), "generation: must be 1.."},
		{"generation over the bound", edit("generation: 7", "generation: 9007199254740992"), "generation: must be 1.."},
		{"version 2", edit("version: 1", "version: 2"), "version: must be 1"},
		{"duration as a number", edit("run: 5m", "run: 300"), "a duration must be a string"},
		{"duration garbage", edit("run: 5m", "run: soon"), "a duration must be a string"},
		{"lifetime above the ceiling", edit("run: 5m", "run: 16m"), "grantLifetimes.run: must be 10s..15m0s"},
		{"lifetime below the floor", edit("run: 5m", "run: 9s"), "grantLifetimes.run: must be 10s..15m0s"},
		{"lifetime with a fraction of a second", edit("run: 5m", "run: 5m0.5s"), "whole seconds"},
		{"missing lifetime", edit("grantLifetimes: {environment: 10m, run: 5m}", "grantLifetimes: {environment: 10m}"), "grantLifetimes.run"},
		{"date without zone", edit("2026-11-01T00:00:00Z", "2026-11-01T00:00:00"), "cannot parse"},
		{"date only", edit("2026-11-01T00:00:00Z", "2026-11-01"), "cannot parse"},
		{"bad state", edit("state: signing", "state: active"), "grantKeys[1].state: must be"},
		{"two signing keys", edit("state: verify-only", "state: signing"), "2 signing keys"},
		{"private key on a verify-only key", edit("publicKeyFile: keys/k3.pub", "publicKeyFile: keys/k3.pub\n    privateKeyFile: k3.key"), "grantKeys[2].privateKeyFile: is refused"},
		{"signing key without private key", edit("    privateKeyFile: k2.key\n", ""), "grantKeys[1].privateKeyFile: is required"},
		{"retired without verifyUntil", edit("    verifyUntil: 2026-11-15T00:00:00Z\n", ""), "grantKeys[0].verifyUntil: is required"},
		{"verifyUntil on the signing key", edit("privateKeyFile: k2.key", "privateKeyFile: k2.key\n    verifyUntil: 2026-12-01T00:00:00Z"), "grantKeys[1].verifyUntil: is only for retired keys"},
		{"hostile kid", edit("id: k2", `id: "../../etc/passwd"`), "grantKeys[1].id"},
		{"duplicate kid", edit("id: k3", "id: k2"), "grantKeys[2].id: duplicate key id"},
		{"no grant keys", edit("grantKeys:", "grantKeys: []\nx:"), "unknown field"},
		{"duplicate record key id", edit("{id: r1, file: r1.key}", "{id: r2, file: r1.key}"), "recordKeys[1].id: duplicate key id"},
		{"hostile record key id", edit("{id: r1,", `{id: "a/b",`), "recordKeys[1].id"},
		{"record key without file", edit("{id: r1, file: r1.key}", "{id: r1}"), "recordKeys[1].file: is required"},
		{"unpinned record key", edit("  r1.key: "+pin+"\n", ""), `fileDigests: has no digest for "r1.key"`},
		{"administratorFor without administrator", edit("administratorFor: []", "administratorFor: [spiffe://example.org/x]"), "administratorFor requires administrator"},
		{"non-canonical client", edit("spiffe://example.org/ns/platform/sa/orchestrator\n", "spiffe://Example.org/x\n"), "clients[0].uri"},
		{"duplicate client", edit("spiffe://example.org/ns/platform/sa/admin", "spiffe://example.org/ns/platform/sa/orchestrator"), "clients[1].uri: duplicate of clients[0]"},
		{"no clients", edit("clients:\n", "clients: []\nxclients:\n"), "unknown field"},
		{"absolute file", edit("clientCABundle: client-ca.crt", "clientCABundle: /etc/ca.crt"), "clientCABundle: must be a clean path"},
		{"dot-dot file", edit("clientCABundle: client-ca.crt", "clientCABundle: ../ca.crt"), "clientCABundle: must be a clean path"},
		{"kubelet data dir", edit("clientCABundle: client-ca.crt", "clientCABundle: ..data/client-ca.crt"), `start with ".."`},
		{"unclean file", edit("clientCABundle: client-ca.crt", "clientCABundle: ./client-ca.crt"), "clientCABundle: must be a clean path"},
		{"dot file", edit("clientCABundle: client-ca.crt", "clientCABundle: ."), `may be "."`},
		{"file with odd characters", edit("clientCABundle: client-ca.crt", `clientCABundle: "ca bundle.crt"`), "file names are"},
		{"one file, two roles", edit("keyFile: server.key", "keyFile: server.crt"), "names the same file as serverCertificate.certFile"},
		{"missing pin", edit("  k1.pub: "+pin+"\n", ""), `fileDigests: has no digest for "k1.pub"`},
		{"extra pin", edit("fileDigests:\n", "fileDigests:\n  other.pem: "+pin+"\n"), `names "other.pem", which the manifest does not reference`},
		{"malformed pin", edit("  k1.pub: "+pin, "  k1.pub: sha256:ABC"), `fileDigests["k1.pub"]: must be`},
		{"missing issuer", edit("issuer: execplane\n", ""), "issuer: is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseManifest([]byte(tt.doc))
			if !errors.Is(err, ErrInvalidBundle) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseManifest error = %v; want ErrInvalidBundle containing %q", err, tt.want)
			}
		})
	}
}

func TestParseManifestReportsEveryProblem(t *testing.T) {
	doc := strings.NewReplacer(
		"version: 1", "version: 3",
		"generation: 7", "generation: 0",
		"run: 5m", "run: 1h",
		"state: verify-only", "state: signing",
	).Replace(validManifest)
	_, err := ParseManifest([]byte(doc))
	for _, want := range []string{"version:", "generation:", "grantLifetimes.run:", "2 signing keys"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// TestParseManifestHostileYAML: inputs that are cheap to write and expensive to expand are
// refused in bounded time (yaml.v2's alias and depth limits, then the strict decoder).
func TestParseManifestHostileYAML(t *testing.T) {
	laughs := `a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]` + "\n"
	for c, prev := 'b', 'a'; c <= 'i'; c, prev = c+1, c {
		laughs += fmt.Sprintf("%c: &%c [%s]\n", c, c, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*%c,", prev), 9), ","))
	}
	for name, doc := range map[string]string{
		"alias expansion": laughs,
		"deep nesting":    strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000),
		"self alias":      "a: &a [*a]\n",
	} {
		start := time.Now()
		if _, err := ParseManifest([]byte(doc)); !errors.Is(err, ErrInvalidBundle) {
			t.Errorf("%s: %v", name, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: took %s", name, d)
		}
	}
}

func TestParseManifestOversized(t *testing.T) {
	doc := validManifest + "#" + strings.Repeat("x", MaxManifestBytes)
	if _, err := ParseManifest([]byte(doc)); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("ParseManifest(oversized) = %v", err)
	}
}

// FuzzParseManifest checks that the decoder never panics, that whatever it accepts satisfies
// the manifest's rules, and that an accepted manifest written back and read again is the
// same (decoding is deterministic and loses nothing).
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(validManifest))
	f.Add([]byte(validRenewableManifest))
	f.Add([]byte("version: 1\n---\n"))
	f.Add([]byte("{version: 1, Version: 2, generation: 1e3}"))
	f.Add([]byte("generation: &a 7\nversion: *a\n"))
	f.Add([]byte("clients: [{uri: 'https://a.b', administratorFor: [x]}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidBundle) {
				t.Fatalf("error %v does not wrap ErrInvalidBundle", err)
			}
			return
		}
		if m.Version != ManifestVersion || m.Generation < 1 || m.Generation > MaxGeneration {
			t.Fatalf("accepted version %d generation %d", m.Version, m.Generation)
		}
		signing := 0
		for _, k := range m.GrantKeys {
			if k.State == grant.KeySigning {
				signing++
			}
		}
		pinned := 0
		for _, f := range m.files() {
			if f.pinned {
				pinned++
			}
		}
		if signing != 1 || len(m.Clients) == 0 || len(m.FileDigests) != pinned {
			t.Fatalf("accepted an inconsistent manifest: %+v", m)
		}
		for _, c := range m.Clients {
			if _, err := ParseClientIdentity(string(c.URI)); err != nil {
				t.Fatalf("accepted client %q: %v", c.URI, err)
			}
		}
		again, err := yaml.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := ParseManifest(again)
		if err != nil {
			t.Fatalf("re-reading an accepted manifest: %v\n%s", err, again)
		}
		if !reflect.DeepEqual(normalised(m), normalised(m2)) {
			t.Fatalf("round trip changed the manifest:\n%+v\n%+v", m, m2)
		}
	})
}

// normalised returns m with empty lists as nil: "administratorFor: []" and an absent list
// mean the same, and the second is what a round trip writes.
func normalised(m *Manifest) Manifest {
	out := *m
	out.Clients = append([]ClientEntry(nil), m.Clients...)
	for i := range out.Clients {
		if len(out.Clients[i].AdministratorFor) == 0 {
			out.Clients[i].AdministratorFor = nil
		}
	}
	if r := m.ServerCertificate.Renewal; r != nil {
		n := *r
		for _, l := range []*[]string{&n.DNSNames, &n.IPAddresses, &n.URIs} {
			if len(*l) == 0 {
				*l = nil
			}
		}
		out.ServerCertificate.Renewal = &n
	}
	return out
}

func BenchmarkParseManifest(b *testing.B) {
	for b.Loop() {
		if _, err := ParseManifest([]byte(validManifest)); err != nil {
			b.Fatal(err)
		}
	}
}
