package gateway

import (
	"strings"
	"testing"

	"github.com/execplane/execplane/internal/podexec"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// What a helper answers about durable commands is the executor's and is not trusted: every
// answer that no helper gives is refused, and a message is made printable.
func TestCheckDurableRefusesWhatNoHelperAnswers(t *testing.T) {
	ended := func(id string) *executionv1.CommandInfo {
		return &executionv1.CommandInfo{CommandId: id, State: executionv1.CommandState_COMMAND_STATE_SUCCEEDED, Result: &executionv1.CommandResult{},
			StdoutBytes: 14, StderrBytes: 2}
	}
	running := func(id string) *executionv1.CommandInfo {
		return &executionv1.CommandInfo{CommandId: id, State: executionv1.CommandState_COMMAND_STATE_RUNNING}
	}
	out := func(s executionv1.OutputStream, offset, skipped uint64, data string) *executionv1.OutputChunk {
		return &executionv1.OutputChunk{Stream: s, Offset: offset, Skipped: skipped, Data: []byte(data)}
	}
	const stdout, stderr = executionv1.OutputStream_OUTPUT_STREAM_STDOUT, executionv1.OutputStream_OUTPUT_STREAM_STDERR
	status := &helperv1.Durable{Op: &helperv1.Durable_Status{Status: &helperv1.DurableStatus{CommandId: "c", From: &executionv1.OutputCursor{Stdout: 10}, MaxBytes: 8}}}
	follow := &helperv1.Durable{Op: &helperv1.Durable_Follow{Follow: &helperv1.DurableFollow{CommandId: "c", MaxBytes: 8}}}
	start := &helperv1.Durable{Op: &helperv1.Durable_Start{Start: &helperv1.DurableStart{CommandId: "c"}}}
	list := &helperv1.Durable{Op: &helperv1.Durable_List{List: &helperv1.DurableList{Max: 1}}}
	cases := []struct {
		name string
		op   *helperv1.Durable
		res  *helperv1.DurableResult
		ok   bool
	}{
		{"a status from the cursor", status, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{ended("c")}, Output: []*executionv1.OutputChunk{out(stdout, 10, 0, "abcd"), out(stderr, 0, 0, "ef")}}, true},
		{"a skip to the tail", status, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{running("c")}, Output: []*executionv1.OutputChunk{out(stdout, 100, 90, "abcd")}}, true},
		{"a follow's end", follow, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{ended("c")}, Complete: true}, true},
		{"a listing", list, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{ended("x")}, More: true}, true},
		{"another command", start, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{running("d")}}, false},
		{"two records", start, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{running("c"), running("c")}}, false},
		{"no record", start, &helperv1.DurableResult{}, false},
		{"no known state", start, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{{CommandId: "c", State: 99}}}, false},
		{"a running command with a result", start, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{{CommandId: "c", State: executionv1.CommandState_COMMAND_STATE_RUNNING, Result: &executionv1.CommandResult{}}}}, false},
		{"an ended command without one", start, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{{CommandId: "c", State: executionv1.CommandState_COMMAND_STATE_FAILED}}}, false},
		{"a malformed id", list, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{ended("../x")}}, false},
		{"output on a start", start, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{running("c")}, Output: []*executionv1.OutputChunk{out(stdout, 0, 0, "x")}}, false},
		{"complete on a status", status, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{ended("c")}, Complete: true}, false},
		{"output before the cursor", status, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{ended("c")}, Output: []*executionv1.OutputChunk{out(stdout, 9, 0, "x")}}, false},
		{"a gap not counted as skipped", status, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{ended("c")}, Output: []*executionv1.OutputChunk{out(stdout, 10, 0, "ab"), out(stdout, 13, 0, "c")}}, false},
		{"more than asked", status, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{ended("c")}, Output: []*executionv1.OutputChunk{out(stdout, 10, 0, "abcdefghi")}}, false},
		{"no known stream", status, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{ended("c")}, Output: []*executionv1.OutputChunk{out(7, 0, 0, "x")}}, false},
		{"a skip larger than its offset", status, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{ended("c")}, Output: []*executionv1.OutputChunk{out(stdout, 5, 6, "x")}}, false},
		{"output past an ended command's total", status, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{ended("c")}, Output: []*executionv1.OutputChunk{out(stdout, 10, 0, "abcde")}}, false},
		{"a follow complete while running", follow, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{running("c")}, Complete: true}, false},
		{"a listing longer than asked", list, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{ended("x"), ended("y")}}, false},
		{"a listing with output", list, &helperv1.DurableResult{Output: []*executionv1.OutputChunk{out(stdout, 0, 0, "x")}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := checkDurable(c.op, c.res); (err == nil) != c.ok {
				t.Fatalf("checkDurable: %v, want accepted %v", err, c.ok)
			}
		})
	}
	info := ended("c")
	info.Message = "bad\x00\x1b[31m" + strings.Repeat("x", 1000)
	if err := checkDurable(start, &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{info}}); err != nil {
		t.Fatal(err)
	}
	if len(info.Message) > podexec.MaxHelperMessage || strings.ContainsAny(info.Message, "\x00\x1b") {
		t.Fatalf("the message reaches the caller as %q", info.Message)
	}
}
