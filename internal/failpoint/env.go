package failpoint

// Env arms a failpoint in a failpoint build: <name>[=kill|stop].
const Env = "EXECPLANE_FAILPOINT"

// BreakEnv names, in a failpoint build, one guarantee the binary deliberately breaks: the
// fault suite's proof that its checks can fail (test/chaos). Names are the constants
// beside each call site of Breaks.
const BreakEnv = "EXECPLANE_BREAK"
