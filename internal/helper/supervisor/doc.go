// Package supervisor runs durable commands (docs/commands.md): a supervisor process per
// command, started through exec by the helper that serves the start and outliving it, and
// the operations of any later helper on the command's record and output.
//
// Invariants:
//   - Nothing listens: a supervisor is told everything at its start (descriptors 3..6) and
//     is cancelled by SIGTERM, after its grace was written beside its record.
//   - A supervisor is the subreaper of its command's tree: nothing the command started
//     survives its end, its timeout or its cancel.
//   - A record is final once it says so; only the supervisor writes the final record of a
//     command it saw end, and a helper writes ABANDONED only for a command whose supervisor
//     it proved gone (another PID namespace, or no process with its pid and start time) and
//     whose record, read again after that proof, is still not final.
//   - Starts are counted under the workspace's command lock: at most the profile's number
//     of detached commands run at once.
//   - A refused start leaves nothing behind: the command's directory is made only once the
//     start is certain to be tried, and removed when it could not be.
package supervisor
