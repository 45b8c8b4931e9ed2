// Package failpoint lets tests stop a real process at a named point: after a side effect
// and before the status write that records it, where a crash is hardest to recover from.
//
// Failpoints exist only in binaries built with the `failpoint` build tag (the controller's
// integration tests build one); in every other build Inject is an empty function the
// compiler removes. In a failpoint build, EXECPLANE_FAILPOINT=<name>[=<action>] arms one
// point: action `kill` (the default) sends the process SIGKILL, `stop` sends it SIGSTOP once
// (a test resumes it with SIGCONT). Names are the constants beside each call site.
package failpoint
