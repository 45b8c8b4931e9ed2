// Package process runs the helper's one foreground command.
//
// Invariants:
//   - The command runs in its own process group; the helper is a child subreaper, so every
//     descendant (including ones that called setsid) is reparented to it and reaped.
//   - When the call ends — the command exits, the timeout passes, or the call is cancelled
//     (EOF on the helper's stdin) — the group and every remaining descendant are killed with
//     SIGKILL and reaped before the result is returned: no process outlives the call.
//   - Output is captured per stream up to a cap, keeping the head and the tail, with the
//     total byte count and a truncation flag; memory is bounded by the cap whatever the
//     command writes.
//   - Inputs are validated before anything starts: argv and shell scripts without NUL,
//     environment names from a fixed grammar with a denylist (LD_*, BASH_ENV, ...), stdin and
//     timeout within the limits.
package process
