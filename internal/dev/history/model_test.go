package history

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/go-cmp/cmp"
)

const bound = 3 * time.Second

// h builds a history: each op called at call ms and answered at ret ms (-1: unknown).
type h []porcupine.Operation

func (x h) op(client int, call, ret int64, in Input, out Output) h {
	in.Binding = "b"
	in.Called = call * int64(time.Millisecond)
	op := porcupine.Operation{ClientId: client, Input: in, Call: in.Called, Output: out}
	if ret < 0 {
		op.Return, out.Result = neverReturned, Unknown
		op.Output = out
	} else {
		op.Return = ret * int64(time.Millisecond)
		out.Returned = op.Return
		op.Output = out
	}
	return append(x, op)
}

var far = int64(time.Hour)

func release(claim string) Input { return Input{Kind: Release, Claim: claim} }

func onGateway(in Input, g int) Input { in.Gateway = g; return in }

func acquire(run string) Input { return Input{Kind: Acquire, Run: run} }
func held(claim string, epoch uint64) Output {
	return Output{Result: OK, Claim: claim, Epoch: epoch, Expires: far}
}
func write(claim string, path int, v string) Input {
	return Input{Kind: Write, Claim: claim, Path: path, Value: v}
}
func cas(claim string, path int, expect, v string) Input {
	return Input{Kind: Write, Claim: claim, Path: path, Value: v, CAS: true, Expect: expect}
}
func read(claim string, path int) Input { return Input{Kind: Read, Claim: claim, Path: path} }

var (
	ok       = Output{Result: OK}
	refused  = Output{Result: Refused}
	mismatch = Output{Result: Mismatch}
)

func saw(v string) Output { return Output{Result: OK, Value: v} }

func TestEnvironmentModel(t *testing.T) {
	cases := []struct {
		name  string
		ops   h
		legal bool
	}{
		{"a claim handed over", h{}.
			op(0, 0, 10, acquire("r1"), held("c1", 1)).
			op(0, 20, 30, write("c1", 0, "x"), ok).
			op(0, 40, 50, release("c1"), ok).
			op(1, 60, 70, acquire("r2"), held("c2", 2)).
			op(1, 80, 90, read("c2", 0), saw("x")), true},
		{"two holders", h{}.
			op(0, 0, 10, acquire("r1"), held("c1", 1)).
			op(1, 20, 30, acquire("r2"), held("c2", 2)), false},
		{"a second acquire refused while held", h{}.
			op(0, 0, 10, acquire("r1"), held("c1", 1)).
			op(1, 20, 30, acquire("r2"), refused), true},
		{"an expired claim taken over", h{}.
			op(0, 0, 10, acquire("r1"), Output{Result: OK, Claim: "c1", Epoch: 1, Expires: int64(15 * time.Millisecond)}).
			op(1, 20, 30, acquire("r2"), held("c2", 2)), true},
		{"an epoch that went back", h{}.
			op(0, 0, 10, acquire("r1"), held("c1", 2)).
			op(0, 20, 30, release("c1"), ok).
			op(1, 40, 50, acquire("r2"), held("c2", 1)), false},
		{"compare-and-swap: two creators, one wins", h{}.
			op(0, 0, 10, acquire("r1"), held("c1", 1)).
			op(0, 20, 40, cas("c1", 0, "", "x"), ok).
			op(1, 25, 35, cas("c1", 0, "", "y"), mismatch).
			op(0, 50, 60, read("c1", 0), saw("x")), true},
		{"compare-and-swap: two creators, both win", h{}.
			op(0, 0, 10, acquire("r1"), held("c1", 1)).
			op(0, 20, 30, cas("c1", 0, "", "x"), ok).
			op(1, 40, 50, cas("c1", 0, "", "y"), ok), false},
		{"compare-and-swap: a mismatch when the file was as expected", h{}.
			op(0, 0, 10, acquire("r1"), held("c1", 1)).
			op(0, 20, 30, write("c1", 0, "x"), ok).
			op(0, 40, 50, cas("c1", 0, "x", "y"), mismatch), false},
		{"a read of what no one wrote", h{}.
			op(0, 0, 10, acquire("r1"), held("c1", 1)).
			op(0, 20, 30, read("c1", 1), saw("z")), false},
		{"a lost write read back", h{}.
			op(0, 0, 10, acquire("r1"), held("c1", 1)).
			op(0, 20, 30, write("c1", 0, "x"), ok).
			op(0, 40, 50, write("c1", 0, "y"), ok).
			op(0, 60, 70, read("c1", 0), saw("x")), false},
		{"an unknown write, seen", h{}.
			op(0, 0, 10, acquire("r1"), held("c1", 1)).
			op(0, 20, -1, write("c1", 0, "x"), Output{}).
			op(1, 40, 50, read("c1", 0), saw("x")), true},
		{"an unknown write, not seen", h{}.
			op(0, 0, 10, acquire("r1"), held("c1", 1)).
			op(0, 20, -1, write("c1", 0, "x"), Output{}).
			op(1, 40, 50, read("c1", 0), Output{Result: Absent}), true},
		{"an unknown acquire taken, then an acquire refused and one after its expiry", h{}.
			op(0, 0, -1, acquire("r1"), Output{}).
			op(1, 20, 30, acquire("r2"), refused).
			op(1, 40, 50, acquire("r3"), held("c3", 2)), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := porcupine.CheckOperationsVerbose(Environment(), tc.ops, time.Minute)
			if want := map[bool]porcupine.CheckResult{true: porcupine.Ok, false: porcupine.Illegal}[tc.legal]; res != want {
				t.Fatalf("%s, want %s", res, want)
			}
		})
	}
}

func TestBindingModel(t *testing.T) {
	ensure := Input{Kind: Ensure}
	one := h{}.op(0, 0, 10, ensure, saw("env/uid1")).op(1, 5, 15, ensure, saw("env/uid1")).op(2, 20, -1, ensure, Output{})
	if !porcupine.CheckOperations(Binding(), one) {
		t.Fatal("one environment judged illegal")
	}
	two := h{}.op(0, 0, 10, ensure, saw("env/uid1")).op(1, 20, 30, ensure, saw("env/uid2"))
	if porcupine.CheckOperations(Binding(), two) {
		t.Fatal("two environments for one binding judged legal")
	}
}

func TestGrants(t *testing.T) {
	granted := h{}.op(0, 0, 10, acquire("r1"), held("c1", 1))
	released := granted.op(0, 20, 30, release("c1"), ok)
	cases := []struct {
		name  string
		ops   h
		legal bool
	}{
		{"a write with the current claim", granted.op(0, 20, 30, write("c1", 0, "x"), ok), true},
		{"a write concurrent with the release", granted.op(0, 20, 40, release("c1"), ok).op(1, 25, 35, write("c1", 0, "x"), ok), true},
		{"a write with a released claim through the gateway that released it", released.op(0, 40, 50, write("c1", 0, "x"), ok), false},
		{"a mismatch with a released claim through that gateway (the helper ran it)", released.op(0, 40, 50, cas("c1", 0, "y", "x"), mismatch), false},
		{"a write with a released claim through another gateway within the bound", released.op(0, 40, 50, onGateway(write("c1", 0, "x"), 1), ok), true},
		{"a write with a released claim through another gateway past the bound", released.op(0, 4000, 4010, onGateway(write("c1", 0, "x"), 1), ok), false},
		{"a refused write with a released claim", released.op(0, 40, 50, write("c1", 0, "x"), refused), true},
		{"a claim superseded by a later acquire", granted.op(1, 20, 30, acquire("r2"), held("c2", 2)).op(0, 40, 50, read("c1", 0), saw("x")), false},
		{"a revoked claim writes", granted.op(1, 20, 30, Input{Kind: Revoke}, ok).op(0, 40, 50, write("c1", 0, "x"), ok), false},
		{"an expired claim writes", h{}.op(0, 0, 10, acquire("r1"), Output{Result: OK, Claim: "c1", Epoch: 1, Expires: int64(20 * time.Millisecond)}).
			op(0, 2000, 2010, write("c1", 0, "x"), ok), false},
		{"a claim never granted", h{}.op(0, 0, 10, write("c9", 0, "x"), ok), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Grants(tc.ops, bound)
			if want := map[bool]porcupine.CheckResult{true: porcupine.Ok, false: porcupine.Illegal}[tc.legal]; v.Result != want {
				t.Fatalf("%s, want %s: %s", v.Result, want, v.Violation)
			}
		})
	}
}

// A violation counts every data call that broke the rule, also those it does not describe.
func TestGrantsCountsWhatItDoesNotDescribe(t *testing.T) {
	ops := h{}.op(0, 0, 10, acquire("r1"), held("c1", 1)).op(0, 20, 30, release("c1"), ok)
	const calls = maxReported + 3
	for i := range int64(calls) {
		ops = ops.op(1, 40+10*i, 45+10*i, write("c1", 0, fmt.Sprint(i)), ok)
	}
	v := Grants(ops, bound)
	head, _, _ := strings.Cut(v.Violation, "\n")
	if want := fmt.Sprintf("%d data calls admitted with a claim that had ended:", calls); head != want {
		t.Errorf("the violation begins %q, want %q", head, want)
	}
	if !strings.Contains(v.Violation, "... and 3 more") {
		t.Errorf("the violation does not count the calls it leaves out:\n%s", v.Violation)
	}
}

// An environment is checked object by object: its claim and each file apart, in the
// order each first appears, every operation in exactly one part.
func TestEnvironmentPartitionsByObject(t *testing.T) {
	ops := h{}.
		op(0, 0, 10, acquire("r1"), held("c1", 1)).
		op(0, 20, 30, write("c1", 1, "x"), ok).
		op(1, 25, -1, read("c1", 0), Output{}).
		op(0, 40, 50, release("c1"), ok).
		op(1, 60, 70, read("c1", 1), saw("x"))
	ops[4].Input = Input{Kind: Read, Binding: "other", Path: 1, Claim: "c9", Called: ops[4].Call}
	var got [][]string
	for _, part := range Environment().Partition(ops) {
		var kinds []string
		for _, op := range part {
			in := op.Input.(Input)
			kinds = append(kinds, fmt.Sprintf("%s %s %d", in.Binding, in.Kind, in.Path))
		}
		got = append(got, kinds)
	}
	want := [][]string{{"b acquire 0", "b release 0"}, {"b write 1"}, {"b read 0"}, {"other read 1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
}

// A violation's report names the operation that cannot be placed and what preceded it.
func TestCheckReportsTheViolation(t *testing.T) {
	ops := h{}.
		op(0, 0, 10, acquire("r1"), held("c1", 1)).
		op(0, 20, 30, write("c1", 0, "x"), ok).
		op(1, 40, 50, acquire("r2"), held("c2", 2))
	dir := t.TempDir()
	verdicts := Check(ops, bound, dir)
	env := verdicts[0]
	if env.Result != porcupine.Illegal || env.Operations != 3 {
		t.Fatalf("%+v", env)
	}
	for _, want := range []string{"1 of 2 operations of b's claim", "acquire b@gw0 run r1 → ok claim c1 epoch 1", "then none of these can follow:\n  client 1 [40ms, 50ms] acquire b@gw0 run r2 → ok claim c2 epoch 2"} {
		if !strings.Contains(env.Violation, want) {
			t.Errorf("the report lacks %q:\n%s", want, env.Violation)
		}
	}
	if env.Visualization == "" {
		t.Error("no visualization written")
	}
	if verdicts[1].Result != porcupine.Ok || verdicts[1].Operations != 0 {
		t.Errorf("binding: %+v", verdicts[1])
	}
	if verdicts[2].Model != "grants" || verdicts[2].Result != porcupine.Ok || verdicts[2].Operations != 1 {
		t.Errorf("grants: %+v", verdicts[2])
	}
}
