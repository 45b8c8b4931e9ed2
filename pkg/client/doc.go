// Package client is the Go SDK for execplane callers: platforms that give agents, CI jobs or
// notebooks a durable, isolated workspace per binding.
//
//	c, err := client.Dial(client.Config{Address: "gateway:8443", CAFile: "ca.crt", CertFile: "client.crt", KeyFile: "client.key"})
//	env, err := c.Ensure(ctx, client.EnsureRequest{Owner: owner, BindingID: "conv-1", Profile: "python"})
//	run, err := env.Acquire(ctx, client.AcquireOptions{RunID: "turn-7"})
//	defer run.Close(ctx)
//	_, err = run.WriteFile(ctx, "main.py", []byte("print('hi')\n"))
//	res, err := run.Run(ctx, client.Command{Args: []string{"python3", "main.py"}})
//
// Invariants:
//   - One operation id per logical call, reused by every retry of it: a retry never does the
//     work twice (the server replays the first outcome).
//   - Retries only what cannot have happened twice: answers the server marks retryable
//     (nothing was done), and transport failures of idempotent calls. An OUTCOME_UNKNOWN
//     answer (a command may have run) is never retried.
//   - A Run renews its claim in the background until Close, which releases it; once a
//     renewal is refused for good (revoked, superseded, fenced), every later call on the Run
//     returns that error.
//   - Errors are *Error values carrying the code, reason, retryable flag and the gateway's
//     request id; test them with errors.Is against ErrNotFound, ErrConflict, ErrFenced, ...
//   - No grant, key or file content is ever logged or put into an error message.
package client
