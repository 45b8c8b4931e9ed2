// One logical call, retried per its safety with the same request (so the same operation id)
// on every attempt: the Go SDK's rules (pkg/client/retry.go).
import { Code } from "@connectrpc/connect";
import { ExecplaneError, fromConnectError } from "./errors.js";

/** Which failures a call may be retried after. */
export enum Safety {
  /** Only answers the server marks retryable: calls that must not run twice and carry no operation id (writes, commands). */
  ServerSaysSo,
  /** Also transport failures (UNAVAILABLE without an answer): reads, and mutations that carry an operation id. */
  Idempotent,
}

export interface RetryPolicy {
  attempts: number;
  initialMs: number;
  ceilingMs: number;
}

export const defaultRetry: RetryPolicy = { attempts: 5, initialMs: 100, ceilingMs: 3000 };

/** Runs fn until it succeeds, fails for good, or the deadline (Date.now() ms) passes. */
export async function call<T>(policy: RetryPolicy, safety: Safety, deadline: number, fn: (timeoutMs: number) => Promise<T>): Promise<T> {
  let backoff = policy.initialMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(Math.max(deadline - Date.now(), 1));
    } catch (raw) {
      let err = fromConnectError(raw);
      if (!(err instanceof ExecplaneError)) throw err;
      if (safety === Safety.ServerSaysSo && !err.reason && (err.code === Code.DeadlineExceeded || err.code === Code.Canceled)) {
        // The call ended on this side while the gateway may have been writing or running:
        // what happened is unknown, and a blind retry could do it twice.
        err = new ExecplaneError(err.code, "OUTCOME_UNKNOWN", err.rawMessage, false, err.requestId);
      }
      if (attempt >= policy.attempts || !retryable(err as ExecplaneError, safety) || Date.now() >= deadline) throw err;
      // Full jitter: spread retries of many callers after a shared failure.
      const pause = Math.min(Math.random() * backoff, Math.max(deadline - Date.now(), 0));
      backoff = Math.min(backoff * 2, policy.ceilingMs);
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
}

export function retryable(err: ExecplaneError, safety: Safety): boolean {
  if (safety === Safety.ServerSaysSo && (err.code === Code.Canceled || err.code === Code.DeadlineExceeded)) return false;
  if (err.reason) return err.retryable;
  // No answer from execplane: the connection failed. Only a call harmless twice may go again.
  return safety === Safety.Idempotent && err.code === Code.Unavailable;
}
