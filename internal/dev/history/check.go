package history

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// checkTimeout bounds one model's search; a history it cannot decide in time is reported
// as undecided, which a caller counts as a failure.
const checkTimeout = 5 * time.Minute

// contextOps is how many linearized operations a violation's report shows before the
// operation that could not be placed.
const contextOps = 8

// Verdict is one model's judgement of a history.
type Verdict struct {
	// Model is "environment" or "binding"; Operations how many it judged.
	Model      string
	Operations int
	Result     porcupine.CheckResult
	// Violation describes, when Result is Illegal, the shortest failing stretch: the last
	// operations of the longest order found, then those that could not follow it.
	Violation string
	// Visualization is the path of porcupine's HTML view of the history, written when
	// Result is not Ok and a directory was given.
	Visualization string
}

// Check judges ops against both models and Grants (with bound); dir, when set, receives
// the visualization of a failed model check.
func Check(ops []porcupine.Operation, bound time.Duration, dir string) []Verdict {
	var ensures, rest []porcupine.Operation
	for _, op := range ops {
		if op.Input.(Input).Kind == Ensure {
			ensures = append(ensures, op)
		} else {
			rest = append(rest, op)
		}
	}
	return []Verdict{
		check("environment", Environment(), rest, dir),
		check("binding", Binding(), ensures, dir),
		Grants(rest, bound),
	}
}

func check(name string, model porcupine.Model, ops []porcupine.Operation, dir string) Verdict {
	v := Verdict{Model: name, Operations: len(ops)}
	var info porcupine.LinearizationInfo
	v.Result, info = porcupine.CheckOperationsVerbose(model, ops, checkTimeout)
	if v.Result == porcupine.Illegal {
		v.Violation = violation(model, ops, info)
	}
	if v.Result != porcupine.Ok && dir != "" {
		path := filepath.Join(dir, name+"-history.html")
		if err := porcupine.VisualizePath(model, info, path); err == nil {
			v.Visualization = path
		}
	}
	return v
}

// violation describes the failing partition: the end of its longest partial
// linearization, then the operations called before the first unplaced one returned that
// are not in it — the stretch where no order works.
func violation(model porcupine.Model, ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	parts := model.Partition(ops)
	lins := info.PartialLinearizationsOperations()
	for i, part := range parts {
		if i >= len(lins) {
			break
		}
		var longest []porcupine.Operation
		for _, l := range lins[i] {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == len(part) {
			continue // this partition is linearizable
		}
		placed := map[porcupine.Operation]bool{}
		for _, op := range longest {
			placed[op] = true
		}
		var rest []porcupine.Operation
		for _, op := range part {
			if !placed[op] {
				rest = append(rest, op)
			}
		}
		slices.SortFunc(rest, func(a, b porcupine.Operation) int { return int(a.Return - b.Return) })
		first := rest[0]
		var b strings.Builder
		fmt.Fprintf(&b, "%d of %d operations of %s in a legal order; the last of them:\n", len(longest), len(part), objectOf(first.Input.(Input)))
		for _, op := range longest[max(0, len(longest)-contextOps):] {
			fmt.Fprintf(&b, "  %s\n", line(model, op))
		}
		b.WriteString("then none of these can follow:\n")
		slices.SortFunc(rest, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
		for _, op := range rest {
			if op.Call <= first.Return {
				fmt.Fprintf(&b, "  %s\n", line(model, op))
			}
		}
		return b.String()
	}
	return "no partition's failure could be located"
}

func line(model porcupine.Model, op porcupine.Operation) string {
	ret := "never"
	if op.Return != neverReturned {
		ret = time.Duration(op.Return).Round(time.Millisecond).String()
	}
	return fmt.Sprintf("client %d [%s, %s] %s", op.ClientId, time.Duration(op.Call).Round(time.Millisecond), ret,
		model.DescribeOperation(op.Input, op.Output))
}
