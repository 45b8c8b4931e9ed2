package history

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Kind is what an operation asked.
type Kind uint8

// The operations the models know.
const (
	// Ensure asks for the binding's environment (Binding model).
	Ensure Kind = iota + 1
	// Acquire takes the run claim: a new claim id at a higher epoch.
	Acquire
	// Renew extends the claim the grant names.
	Renew
	// Release ends the claim the grant names.
	Release
	// Write writes a file with the grant's claim: overwrite, or compare-and-swap on the
	// content the client last saw (create-only when it saw none).
	Write
	// Read reads a file with the grant's claim.
	Read
	// Revoke revokes every grant and ends the claim (an administrator).
	Revoke
	// Replace starts a new executor and ends the claim (an administrator).
	Replace
	// Suspend stops the executor, keeps the workspace and revokes every grant (the owner;
	// refused while a claim is held). A later Acquire or Resume brings it back.
	Suspend
	// Resume brings a suspended environment back (the owner).
	Resume
)

var kindNames = [...]string{Ensure: "ensure", Acquire: "acquire", Renew: "renew", Release: "release",
	Write: "write", Read: "read", Revoke: "revoke", Replace: "replace", Suspend: "suspend", Resume: "resume"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Result is how an operation ended, as far as its client could tell.
type Result uint8

// Outcomes.
const (
	// OK: it took effect, with the Output's values.
	OK Result = iota + 1
	// Refused: a definite refusal, which changed nothing.
	Refused
	// Mismatch: a compare-and-swap refused because the file was not as expected.
	Mismatch
	// Absent: a read found no file.
	Absent
	// Unknown: the client cannot tell whether it took effect (a deadline, an unavailable
	// gateway, an outcome reported unknown).
	Unknown
)

var resultNames = [...]string{OK: "ok", Refused: "refused", Mismatch: "mismatch", Absent: "absent", Unknown: "unknown"}

func (r Result) String() string {
	if int(r) < len(resultNames) && resultNames[r] != "" {
		return resultNames[r]
	}
	return fmt.Sprintf("result(%d)", r)
}

// MaxPaths is how many files of one environment a history may name (Input.Path).
const MaxPaths = 4

// Input is an operation as called.
type Input struct {
	Kind Kind
	// Binding names the environment (the partition); Gateway the gateway called.
	Binding string
	Gateway int
	// Called is the call's time on the history's clock (Recorder.Now).
	Called int64
	// Run is the run id an Acquire asks for; Claim the claim id of the run grant used.
	Run, Claim string
	// Path is the file, 0..MaxPaths-1; Value a Write's content; CAS a compare-and-swap
	// Write expecting Expect ("": create-only).
	Path   int
	Value  string
	CAS    bool
	Expect string
	// Via names the path of the data plane a Read took when it is not the file API (a
	// command that prints the file): for the report, never for the model.
	Via string
}

// Output is what the client heard.
type Output struct {
	Result Result
	// Reason is the refusal's reason, for the report.
	Reason string
	// Returned is the answer's time on the history's clock.
	Returned int64
	// Claim, Epoch and Expires (history clock) are an Acquire's or a Renew's claim.
	Claim   string
	Epoch   uint64
	Expires int64
	// Value is a Read's content, or the environment an Ensure answered (id/revision).
	Value string
}

// unknownClaim holds the claim after an Acquire whose outcome is unknown took effect.
const unknownClaim = "?"

// environment is the Environment model's state: small and comparable, so that the states
// an unknown outcome splits into merge again once a later answer settles them.
type environment struct {
	claim   string           // the current claim id; "" none
	run     string           // its run id
	epoch   uint64           // the highest epoch known taken: the next must be above
	expires int64            // the current claim's expiry (0: may have expired at any time)
	files   [MaxPaths]string // content; "" no file
}

func (s environment) end() environment {
	s.claim, s.run, s.expires = "", "", 0
	return s
}

// Environment is the model of one environment's run claim and files; operations are
// partitioned by Input.Binding and then by object, the claim and each file apart (byObject;
// Ensure operations are the Binding model's). Which claim a data call may use is Grants'
// check, apart: the model orders the calls that succeeded.
func Environment() porcupine.Model {
	m := porcupine.NondeterministicModel{
		Partition: byObject,
		Init:      func() []any { return []any{environment{}} },
		Step: func(state, input, output any) []any {
			return stepEnvironment(state.(environment), input.(Input), output.(Output))
		},
		Hash: func(state any) uint64 {
			s := state.(environment)
			h := fnv.New64a()
			fmt.Fprintf(h, "%s|%s|%d|%d|%q", s.claim, s.run, s.epoch, s.expires, s.files)
			return h.Sum64()
		},
		DescribeOperation: describe,
		DescribeState: func(state any) string {
			s := state.(environment)
			return fmt.Sprintf("claim %q epoch %d files %q", s.claim, s.epoch, s.files)
		},
	}
	return m.ToModel()
}

// stepEnvironment returns the states s may be in after the operation, none when the
// operation could not have answered so in s.
func stepEnvironment(s environment, in Input, out Output) []any {
	same := []any{s}
	switch out.Result {
	case Refused:
		return same // a refusal changes nothing, whatever the state
	case Unknown:
		if next, ok := applied(s, in); ok {
			return []any{s, next}
		}
		return same
	}
	switch in.Kind {
	case Acquire:
		if out.Result != OK {
			return nil
		}
		held := s.claim != "" && s.run != in.Run && s.expires > out.Returned
		if held || out.Epoch <= s.epoch {
			return nil // two holders, or an epoch that did not rise
		}
		next := s
		next.claim, next.run, next.epoch, next.expires = out.Claim, in.Run, out.Epoch, out.Expires
		return []any{next}
	case Renew:
		if out.Result != OK || s.claim != in.Claim {
			return nil
		}
		s.expires = out.Expires
		return []any{s}
	case Release:
		if out.Result != OK || s.claim != in.Claim {
			return nil
		}
		return []any{s.end()}
	case Revoke, Replace, Suspend:
		if out.Result != OK {
			return nil
		}
		return []any{s.end()}
	case Resume:
		if out.Result != OK {
			return nil
		}
		return same
	case Write:
		switch out.Result {
		case OK:
			if in.CAS && s.files[in.Path] != in.Expect {
				return nil
			}
			s.files[in.Path] = in.Value
			return []any{s}
		case Mismatch:
			if in.CAS && s.files[in.Path] != in.Expect {
				return same
			}
		}
		return nil
	case Read:
		switch out.Result {
		case OK:
			if out.Value != "" && s.files[in.Path] == out.Value {
				return same
			}
		case Absent:
			if s.files[in.Path] == "" {
				return same
			}
		}
		return nil
	}
	return nil
}

// applied is the state after an operation whose outcome is unknown, had it taken effect
// (ok false: it could not have).
func applied(s environment, in Input) (environment, bool) {
	switch in.Kind {
	case Acquire:
		next := s
		next.claim, next.run, next.epoch, next.expires = unknownClaim, in.Run, s.epoch+1, 0
		return next, true
	case Release:
		if s.claim == in.Claim {
			return s.end(), true
		}
	case Revoke, Replace, Suspend:
		return s.end(), true
	case Write:
		if !in.CAS || s.files[in.Path] == in.Expect {
			s.files[in.Path] = in.Value
			return s, true
		}
	}
	return s, false
}

// Binding is the model of Ensure: every Ensure of one binding that answers names the same
// environment (id and revision, in Output.Value).
func Binding() porcupine.Model {
	return porcupine.Model{
		Partition: byBinding,
		Init:      func() any { return "" },
		Step: func(state, input, output any) (bool, any) {
			s, out := state.(string), output.(Output)
			if out.Result != OK {
				return true, s
			}
			return s == "" || s == out.Value, out.Value
		},
		DescribeOperation: describe,
	}
}

func byBinding(history []porcupine.Operation) [][]porcupine.Operation {
	return partition(history, func(in Input) object { return object{binding: in.Binding} })
}

// byObject partitions an environment's operations by the object they act on: the run
// claim (Acquire, Renew, Release, Revoke, Replace, Suspend, Resume) or one file (Write,
// Read). No operation acts on two of them in the model — which claim a data call used is
// Grants' check — so by locality (Herlihy and Wing: a history is linearizable when each
// object's history is) each is checked alone: one object's undecided outcomes never
// multiply the states the search carries for another's, and a violation's report shows
// only the object's own operations.
func byObject(history []porcupine.Operation) [][]porcupine.Operation {
	return partition(history, objectOf)
}

// object is what an operation acts on: an environment's claim, one of its files, or (an
// Ensure) which environment its binding names.
type object struct {
	binding string
	what    string
}

func objectOf(in Input) object {
	switch in.Kind {
	case Write, Read:
		return object{binding: in.Binding, what: fmt.Sprintf("file%d", in.Path)}
	case Ensure:
		return object{binding: in.Binding, what: "environment"}
	}
	return object{binding: in.Binding, what: "claim"}
}

func (o object) String() string { return o.binding + "'s " + o.what }

// partition groups history by key, in order of first appearance.
func partition(history []porcupine.Operation, key func(Input) object) [][]porcupine.Operation {
	index := map[object]int{}
	var parts [][]porcupine.Operation
	for _, op := range history {
		k := key(op.Input.(Input))
		i, ok := index[k]
		if !ok {
			i = len(parts)
			index[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

func describe(input, output any) string {
	in, out := input.(Input), output.(Output)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s@gw%d", in.Kind, in.Binding, in.Gateway)
	switch in.Kind {
	case Acquire:
		fmt.Fprintf(&b, " run %s", in.Run)
	case Renew, Release, Read:
		fmt.Fprintf(&b, " claim %s", in.Claim)
	case Write:
		fmt.Fprintf(&b, " claim %s file%d := %q", in.Claim, in.Path, in.Value)
		if in.CAS {
			fmt.Fprintf(&b, " if %q", in.Expect)
		}
	}
	if in.Kind == Read {
		fmt.Fprintf(&b, " file%d", in.Path)
		if in.Via != "" {
			fmt.Fprintf(&b, " by %s", in.Via)
		}
	}
	fmt.Fprintf(&b, " → %s", out.Result)
	switch {
	case out.Result == OK && (in.Kind == Acquire || in.Kind == Renew):
		fmt.Fprintf(&b, " claim %s epoch %d", out.Claim, out.Epoch)
	case out.Result == OK && (in.Kind == Read || in.Kind == Ensure):
		fmt.Fprintf(&b, " %q", out.Value)
	case out.Reason != "":
		fmt.Fprintf(&b, " (%s)", out.Reason)
	}
	return b.String()
}
