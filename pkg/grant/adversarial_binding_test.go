package grant

import (
	"errors"
	"strings"
	"testing"

	"github.com/execplane/execplane/pkg/ident"
)

// The Grants cases of ADVERSARIAL.md about binding claims: revocation, epochs, and grants
// used on something they were not issued for. The tokens are genuine grants from our
// signer; only the expectation (the request and the current environment) differs.

// bindingCase changes the expectation a genuine grant is checked against.
type bindingCase struct {
	name  string
	want  func(*RunBinding)
	err   error
	claim Claim // for ErrMismatch: the claim the error must name
	// runOnly: the case changes only run fields, which environment grants do not carry.
	runOnly bool
}

func runBindingCases(t *testing.T, cases []bindingCase) {
	t.Helper()
	f := newFixture(t)
	env, run := f.signEnv(t), f.signRun(t)
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			want := testRunBinding()
			tt.want(&want)
			_, err := f.verifier.VerifyRun(run, want)
			checkBindingErr(t, run, err, tt.err, tt.claim)
			if tt.runOnly {
				return
			}
			_, err = f.verifier.VerifyEnvironment(env, want.EnvironmentBinding)
			checkBindingErr(t, env, err, tt.err, tt.claim)
		})
	}
}

func checkBindingErr(t *testing.T, token string, err, want error, claim Claim) {
	t.Helper()
	expectErr(t, token, err, want)
	if claim == "" {
		return
	}
	var m *MismatchError
	if !errors.As(err, &m) || m.Claim != claim {
		t.Fatalf("want a mismatch on %q, got %v", claim, err)
	}
}

func TestReplayAfterRevoke(t *testing.T) {
	runBindingCases(t, []bindingCase{
		{"generation revoked once", func(w *RunBinding) { w.GrantGeneration++ }, ErrRevoked, "", false},
		{"generation revoked many times", func(w *RunBinding) { w.GrantGeneration += 1000 }, ErrRevoked, "", false},
		{"observed generation behind the grant", func(w *RunBinding) { w.GrantGeneration-- }, ErrNotObserved, "", false},
		{"observed generation zero", func(w *RunBinding) { w.GrantGeneration = 0 }, ErrNotObserved, "", false},
	})
}

func TestStaleEpochAfterReplace(t *testing.T) {
	runBindingCases(t, []bindingCase{
		{"epoch moved by a replacement", func(w *RunBinding) { w.Epoch++ }, ErrStaleEpoch, "", true},
		{"epoch moved by another AcquireRun", func(w *RunBinding) { w.Epoch++; w.ClaimID = "claim-other" }, ErrStaleEpoch, "", true},
		{"observed epoch behind the grant", func(w *RunBinding) { w.Epoch-- }, ErrNotObserved, "", true},
		{"claim changed, epoch same", func(w *RunBinding) { w.ClaimID = "claim-other" }, ErrMismatch, ClaimClaimID, true},
		{"claim released", func(w *RunBinding) { w.ClaimID = "" }, ErrMismatch, ClaimClaimID, true},
		{"other run id", func(w *RunBinding) { w.RunID = "run-2" }, ErrMismatch, ClaimRun, true},
		{"revoked and stale: revoked first", func(w *RunBinding) { w.Epoch++; w.GrantGeneration++ }, ErrRevoked, "", false},
	})
}

func TestGrantForOtherEnvironment(t *testing.T) {
	runBindingCases(t, []bindingCase{
		{"environment Y", func(w *RunBinding) {
			w.Environment = ident.EnvironmentRef{Name: "env-y", UID: "5d1c0a7e-0000-4000-8000-000000000001"}
		}, ErrMismatch, ClaimEnvironmentName, false},
		{"Y's name with X's UID", func(w *RunBinding) { w.Environment.Name = "env-y" }, ErrMismatch, ClaimEnvironmentName, false},
		{"X's name with Y's UID", func(w *RunBinding) {
			w.Environment.UID = "5d1c0a7e-0000-4000-8000-000000000001"
		}, ErrMismatch, ClaimEnvironmentUID, false},
		{"other binding on X", func(w *RunBinding) { w.BindingID = "conversation:43" }, ErrMismatch, ClaimBinding, false},
		{"other environment, newer generation: mismatch first", func(w *RunBinding) {
			w.Environment.Name = "env-y"
			w.GrantGeneration += 5
			w.Epoch += 5
		}, ErrMismatch, ClaimEnvironmentName, false},
	})
}

func TestGrantForOtherClientsEnvironment(t *testing.T) {
	runBindingCases(t, []bindingCase{
		{"other client", func(w *RunBinding) { w.Client = "spiffe://example.org/ci-scheduler" }, ErrMismatch, ClaimClient, false},
		{"client differing in case", func(w *RunBinding) { w.Client = strings.ToUpper(w.Client) }, ErrMismatch, ClaimClient, false},
		{"client with a trailing slash", func(w *RunBinding) { w.Client += "/" }, ErrMismatch, ClaimClient, false},
		{"client presents the hash itself", func(w *RunBinding) { w.Client = ident.ClientHash(w.Client) }, ErrMismatch, ClaimClient, false},
		{"no client", func(w *RunBinding) { w.Client = "" }, ErrMismatch, ClaimClient, false},
		{"other owner", func(w *RunBinding) { w.OwnerHash = strings.Repeat("cd", 32) }, ErrMismatch, ClaimOwner, false},
		{"no owner", func(w *RunBinding) { w.OwnerHash = "" }, ErrMismatch, ClaimOwner, false},
	})
}

func TestGrantForRecreatedEnvironment(t *testing.T) {
	runBindingCases(t, []bindingCase{
		{"same name, new UID", func(w *RunBinding) {
			w.Environment.UID = "0b6f5c1e-7d9a-4c1b-9e2f-3a4b5c6d7e90"
		}, ErrMismatch, ClaimEnvironmentUID, false},
		{"same name, new UID, counters restarted", func(w *RunBinding) {
			w.Environment.UID = "0b6f5c1e-7d9a-4c1b-9e2f-3a4b5c6d7e90"
			w.GrantGeneration, w.Epoch = 0, 1
		}, ErrMismatch, ClaimEnvironmentUID, false},
		{"UID missing from the expectation", func(w *RunBinding) { w.Environment.UID = "" }, ErrMismatch, ClaimEnvironmentUID, false},
	})
}

func TestExpectationFunc(t *testing.T) {
	f := newFixture(t)
	env := f.signEnv(t)
	var got Subject
	v, err := f.verifier.VerifyEnvironmentFunc(env, func(s Subject) (EnvironmentBinding, error) {
		got = s
		want := testEnvBinding()
		want.BindingID = s.BindingID // e.g. looked up among the environment's references
		return want, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Subject{Purpose: PurposeEnvironment, BindingID: testEnvBinding().BindingID, Environment: testEnvBinding().Environment}); got != want {
		t.Fatalf("subject %+v, want %+v", got, want)
	}
	if v.Binding.BindingID != testEnvBinding().BindingID {
		t.Fatalf("verified binding %q", v.Binding.BindingID)
	}

	errNoReference := errors.New("no such reference")
	_, err = f.verifier.VerifyEnvironmentFunc(env, func(Subject) (EnvironmentBinding, error) { return EnvironmentBinding{}, errNoReference })
	if !errors.Is(err, errNoReference) {
		t.Fatalf("the expectation's error must come back as is, got %v", err)
	}

	// The expectation function sees nothing of a token that is not authentic.
	forged := rawToken(t, ourHeader(), runClaims(), signWith(attackerKey))
	called := false
	_, err = f.verifier.VerifyRunFunc(forged, func(Subject) (RunBinding, error) { called = true; return testRunBinding(), nil })
	if !errors.Is(err, ErrBadSignature) || called {
		t.Fatalf("err %v, expectation called: %v", err, called)
	}

	// Whatever it returns is still compared claim by claim.
	run := f.signRun(t)
	_, err = f.verifier.VerifyRunFunc(run, func(s Subject) (RunBinding, error) {
		want := testRunBinding()
		want.Epoch++
		return want, nil
	})
	if !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("want ErrStaleEpoch, got %v", err)
	}
}
