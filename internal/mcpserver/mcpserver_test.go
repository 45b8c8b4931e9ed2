package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"github.com/execplane/execplane/pkg/client"
)

// A refusal reads as the API's reason first, whatever layer produced it.
func TestToolErrorLeadsWithTheReason(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"api reason": {&client.Error{Code: codes.FailedPrecondition, Reason: "VERSION_MISMATCH", Message: "the file changed"},
			"VERSION_MISMATCH: the file changed"},
		"retryable": {&client.Error{Code: codes.ResourceExhausted, Reason: "LIMIT_EXCEEDED", Message: "slow down", Retryable: true},
			"LIMIT_EXCEEDED: slow down (retryable: nothing was done; the same call may succeed later)"},
		"no reason (transport)": {&client.Error{Code: codes.Unavailable, Message: "connection refused"}, "UNAVAILABLE: connection refused"},
		"no reason, two words":  {&client.Error{Code: codes.DeadlineExceeded, Message: "too slow"}, "DEADLINE_EXCEEDED: too slow"},
		"wrapped":               {fmt.Errorf("reading: %w", &client.Error{Code: codes.NotFound, Reason: "NOT_FOUND", Message: "no such file"}), "NOT_FOUND: no such file"},
		"refused here":          {errorf(errInvalidArgument, "give either command or argv"), "INVALID_ARGUMENT: give either command or argv"},
		"run lost":              {fmt.Errorf("%w: gone", errRunLost), "RUN_CLAIM_LOST: gone"},
		"deadline":              {context.DeadlineExceeded, "DEADLINE_EXCEEDED: context deadline exceeded"},
		"anything else":         {errors.New("boom"), "ERROR: boom"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := toolError(tc.err).Error(); got != tc.want {
				t.Errorf("toolError: %q, want %q", got, tc.want)
			}
		})
	}
}

// Bad tool input is refused before any call, with the reason.
func TestInputRefusedBeforeAnyCall(t *testing.T) {
	for name, in := range map[string]WriteInput{
		"bad base64":         {Path: "f", Content: "%%", Encoding: encodingBase64},
		"unknown encoding":   {Path: "f", Content: "x", Encoding: "latin-1"},
		"cas and create":     {Path: "f", Content: "x", IfVersion: "v1", CreateOnly: true},
		"mode not octal":     {Path: "f", Content: "x", Mode: "rwx"},
		"mode beyond 0777":   {Path: "f", Content: "x", Mode: "4755"},
		"mode out of digits": {Path: "f", Content: "x", Mode: "9"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := writeArgs(in); !errors.Is(err, errInvalidArgument) {
				t.Errorf("writeArgs(%+v): %v, want INVALID_ARGUMENT", in, err)
			}
		})
	}
	content, opts, err := writeArgs(WriteInput{Path: "f", Content: "aGk=", Encoding: encodingBase64, IfVersion: "v1", CreateParents: true, Mode: "0755"})
	if err != nil || string(content) != "hi" || len(opts) != 3 {
		t.Errorf("writeArgs: %q, %d options, %v", content, len(opts), err)
	}
	for name, in := range map[string]CommandInput{
		"neither":          {},
		"both":             {Command: "true", Argv: []string{"true"}},
		"negative timeout": {Command: "true", TimeoutSeconds: -1},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := commandOf(in); !errors.Is(err, errInvalidArgument) {
				t.Errorf("commandOf(%+v): %v, want INVALID_ARGUMENT", in, err)
			}
		})
	}
}

// A command's result keeps each stream's head and tail and says how much it left out.
func TestCaptureKeepsHeadAndTail(t *testing.T) {
	var small capture
	small.write([]byte("hello\n"))
	if diff := cmp.Diff(&StreamView{Text: "hello\n", Bytes: 6}, small.view()); diff != "" {
		t.Errorf("small (-want +got):\n%s", diff)
	}
	var big capture
	head, middle, tail := strings.Repeat("h", keepHead), strings.Repeat("m", 1000), strings.Repeat("t", keepTail)
	for _, piece := range []string{head[:100], head[100:] + middle[:10], middle[10:], tail} { // pieces across the bounds
		big.write([]byte(piece))
	}
	want := &StreamView{Text: head + "\n[... 1000 bytes left out ...]\n" + tail, Bytes: uint64(keepHead + 1000 + keepTail), Truncated: true}
	if diff := cmp.Diff(want, big.view()); diff != "" {
		t.Errorf("big: (-want +got) differ in %d bytes", len(diff))
	}
}

// The configuration names every problem at once.
func TestConfigValidate(t *testing.T) {
	err := Config{EnvironmentID: "xenv-1"}.Validate()
	for _, want := range []string{"no client", "owner", "binding", "revision"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to mention %q", err, want)
		}
	}
	if err := (Config{Client: &client.Client{}, Owner: client.Owner{Issuer: "i", Subject: "s"}, BindingID: "b"}).Validate(); err == nil || !strings.Contains(err.Error(), "profile") {
		t.Errorf("Validate without a profile or an environment: %v", err)
	}
}
