package process

import (
	"testing"

	"golang.org/x/sys/unix"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

func TestClassify(t *testing.T) {
	// Wait statuses as the kernel encodes them: exit code in the second byte, terminating
	// signal in the low seven bits.
	exited := func(code int) unix.WaitStatus { return unix.WaitStatus(code << 8) }
	signaled := func(sig unix.Signal) unix.WaitStatus { return unix.WaitStatus(sig) }
	type want struct {
		state            executionv1.CommandState
		exitCode, signal int32
	}
	cases := []struct {
		name string
		end  ending
		oom  bool
		want want
	}{
		{"succeeded", ending{status: exited(0)}, false, want{executionv1.CommandState_COMMAND_STATE_SUCCEEDED, 0, 0}},
		{"failed", ending{status: exited(3)}, false, want{executionv1.CommandState_COMMAND_STATE_FAILED, 3, 0}},
		{"signaled", ending{status: signaled(unix.SIGTERM)}, true, want{executionv1.CommandState_COMMAND_STATE_SIGNALED, -1, int32(unix.SIGTERM)}},
		{"killed, not by the OOM killer", ending{status: signaled(unix.SIGKILL)}, false, want{executionv1.CommandState_COMMAND_STATE_SIGNALED, -1, int32(unix.SIGKILL)}},
		{"out of memory", ending{status: signaled(unix.SIGKILL)}, true, want{executionv1.CommandState_COMMAND_STATE_OUT_OF_MEMORY, -1, int32(unix.SIGKILL)}},
		{"timed out", ending{status: signaled(unix.SIGKILL), timedOut: true}, true, want{executionv1.CommandState_COMMAND_STATE_TIMED_OUT, -1, int32(unix.SIGKILL)}},
		{"timed out though it exited", ending{status: exited(0), timedOut: true}, false, want{executionv1.CommandState_COMMAND_STATE_TIMED_OUT, -1, int32(unix.SIGKILL)}},
		{"cancelled", ending{status: signaled(unix.SIGKILL), cancelled: true}, true, want{executionv1.CommandState_COMMAND_STATE_CANCELLED, -1, int32(unix.SIGKILL)}},
		{"timeout wins over cancel", ending{status: signaled(unix.SIGKILL), timedOut: true, cancelled: true}, false, want{executionv1.CommandState_COMMAND_STATE_TIMED_OUT, -1, int32(unix.SIGKILL)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := &executionv1.CommandResult{ExitCode: -1}
			classify(res, tc.end, func() bool { return tc.oom })
			got := want{res.GetState(), res.GetExitCode(), res.GetSignal()}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
