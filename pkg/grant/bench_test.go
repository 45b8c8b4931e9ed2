package grant

import (
	"crypto/ed25519"
	"strings"
	"testing"
)

// The grant benchmarks sit beside bare Ed25519 over a payload of the same size as a run
// grant's signing input, so that one `go test -bench .` run shows what the JWT layer
// (JSON, base64, claim checks) costs on top of the signature itself. docs/grants.md
// records the figures.

func BenchmarkSignEnvironment(b *testing.B) {
	f := newFixture(b)
	want := testEnvBinding()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.signer.SignEnvironment(want); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSignRun(b *testing.B) {
	f := newFixture(b)
	want := testRunBinding()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.signer.SignRun(want); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyEnvironment(b *testing.B) {
	f := newFixture(b)
	token, want := f.signEnv(b), testEnvBinding()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.verifier.VerifyEnvironment(token, want); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerifyRun(b *testing.B) {
	f := newFixture(b)
	token, want := f.signRun(b), testRunBinding()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.verifier.VerifyRun(token, want); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyRejectForged is the cost of refusing a forged run grant (the work an
// attacker can make a gateway do per call).
func BenchmarkVerifyRejectForged(b *testing.B) {
	f := newFixture(b)
	token := rawToken(b, ourHeader(), runClaims(), signWith(attackerKey))
	want := testRunBinding()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.verifier.VerifyRun(token, want); err == nil {
			b.Fatal("forged token verified")
		}
	}
}

// BenchmarkVerifyRejectOversized is the cost of refusing a token over MaxTokenBytes.
func BenchmarkVerifyRejectOversized(b *testing.B) {
	f := newFixture(b)
	token := strings.Repeat("A", 1<<20)
	want := testRunBinding()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.verifier.VerifyRun(token, want); err == nil {
			b.Fatal("oversized token verified")
		}
	}
}

// runSigningInput is the header.payload of a run grant: what Ed25519 signs inside SignRun.
func runSigningInput(b *testing.B) []byte {
	token := newFixture(b).signRun(b)
	return []byte(token[:strings.LastIndexByte(token, '.')])
}

func BenchmarkEd25519Sign(b *testing.B) {
	msg := runSigningInput(b)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		_ = ed25519.Sign(ourKey, msg)
	}
}

func BenchmarkEd25519Verify(b *testing.B) {
	msg := runSigningInput(b)
	sig := ed25519.Sign(ourKey, msg)
	pub := publicOf(ourKey)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if !ed25519.Verify(pub, msg, sig) {
			b.Fatal("verify failed")
		}
	}
}
