package failpoint

// Env arms a failpoint in a failpoint build: <name>[=kill|stop].
const Env = "EXECPLANE_FAILPOINT"
