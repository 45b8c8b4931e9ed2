package history

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// expirySlack is how far past its expiry a claim may still admit a call: the gateways and
// the controller read one machine's clock, and a call admitted just before the expiry is
// recorded as called a little earlier.
const expirySlack = time.Second

// maxReported bounds the violations Grants describes.
const maxReported = 8

// ends reports whether an operation of kind ends whatever claim is current.
func ends(kind Kind) bool { return kind == Revoke || kind == Replace || kind == Suspend }

// Grants checks which claim each data call that was admitted (answered ok, a
// compare-and-swap mismatch, or a file absent: the helper ran it) used: the claim had not
// ended, as far as the history proves it, when the call was made. A claim is proven ended
// by an answered Release of it, an Acquire of another claim or a Revoke, Replace or Suspend called
// after it was granted, and by its expiry. A call through the gateway that answered the end
// must come before that answer; through another gateway, within bound of it (that gateway
// observes the change through its watch: the view freshness bound and the watch's delay).
// It returns a Verdict like the models'.
func Grants(ops []porcupine.Operation, bound time.Duration) Verdict {
	type end struct {
		at      int64
		gateway int
		by      porcupine.Operation
	}
	type grant struct {
		acquired porcupine.Operation
		expires  int64
		renewing bool // a renewal's outcome is unknown: the expiry may be later than known
		ends     []end
	}
	v := Verdict{Model: "grants"}
	byBinding := map[string]map[string]*grant{}
	var acquires, enders, data []porcupine.Operation
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		switch {
		case in.Kind == Acquire && out.Result == OK:
			if byBinding[in.Binding] == nil {
				byBinding[in.Binding] = map[string]*grant{}
			}
			byBinding[in.Binding][out.Claim] = &grant{acquired: op, expires: out.Expires}
			acquires = append(acquires, op)
		case (in.Kind == Write || in.Kind == Read) && (out.Result == OK || out.Result == Mismatch || out.Result == Absent):
			data = append(data, op)
		case in.Kind == Release && out.Result == OK, ends(in.Kind) && out.Result == OK:
			enders = append(enders, op)
		}
	}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		g := byBinding[in.Binding][in.Claim]
		if in.Kind != Renew || g == nil {
			continue
		}
		switch out.Result {
		case OK:
			g.expires = max(g.expires, out.Expires)
		case Unknown:
			g.renewing = true
		}
	}
	for _, op := range append(acquires, enders...) {
		in := op.Input.(Input)
		for claim, g := range byBinding[in.Binding] {
			after := op.Call > g.acquired.Return
			switch {
			case in.Kind == Release && in.Claim == claim,
				in.Kind == Acquire && op.Output.(Output).Claim != claim && after,
				ends(in.Kind) && after:
				g.ends = append(g.ends, end{at: op.Return, gateway: in.Gateway, by: op})
			}
		}
	}
	var found []string
	for _, op := range data {
		in := op.Input.(Input)
		g := byBinding[in.Binding][in.Claim]
		v.Operations++
		if g == nil {
			found = append(found, fmt.Sprintf("%s: a claim never granted", line(Environment(), op)))
			continue
		}
		if !g.renewing && op.Call > g.expires+int64(expirySlack) {
			found = append(found, fmt.Sprintf("%s: %s after the claim expired (%s)", line(Environment(), op),
				time.Duration(op.Call-g.expires).Round(time.Millisecond), time.Duration(g.expires).Round(time.Millisecond)))
			continue
		}
		for _, e := range g.ends {
			limit := e.at
			if e.gateway != in.Gateway {
				limit += int64(bound)
			}
			if op.Call > limit {
				found = append(found, fmt.Sprintf("%s: %s after the claim's end was answered by\n    %s",
					line(Environment(), op), time.Duration(op.Call-e.at).Round(time.Millisecond), line(Environment(), e.by)))
				break
			}
		}
	}
	v.Result = porcupine.Ok
	if n := len(found); n > 0 {
		v.Result = porcupine.Illegal
		sort.Strings(found)
		if n > maxReported {
			found = append(found[:maxReported], fmt.Sprintf("... and %d more", n-maxReported))
		}
		v.Violation = fmt.Sprintf("%d data calls admitted with a claim that had ended:\n  %s\n", n, strings.Join(found, "\n  "))
	}
	return v
}
