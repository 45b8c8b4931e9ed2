// Package devstack runs the local development stack in the background: the local cluster
// (internal/devcluster) and, when binaries are given, execplane on it — the CRD, a
// controller and a gateway with a generated development bundle (internal/devsystem). It is
// what `make demo`, `make cluster-up` and `execplane-dev up|down|status` drive.
//
// Invariants:
//   - `up` returns only when the stack is ready (or reports why it is not, with the log's
//     tail); a second `up` finds the running stack and leaves it alone.
//   - `down` stops exactly the daemon `up` started (by its recorded PID) and everything it
//     started; nothing is left running.
//   - `up` runs the stack as a detached daemon: the running binary (os.Executable) re-executed
//     with `up`'s flags and `--state-dir DIR serve` last, which is how `down` recognises it.
//   - The stack's state directory holds its private keys (mode 0600, directory 0700) and is
//     never committed (.state/ is ignored).
package devstack
