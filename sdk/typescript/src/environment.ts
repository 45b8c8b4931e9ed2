// A handle on one binding's environment: its state, its reference, its run claim.
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import type { Client, EnsureOptions, Owner } from "./client.js";
import { ExecplaneError, isGrantInvalid, isNotReady, isRevoked } from "./errors.js";
import * as pb from "./gen/execution/v1/execution_pb.js";
import { DEFAULT_READY_TIMEOUT_MS, DEFAULT_RUN_TTL_MS, MAX_DEADLINE_MS, MAX_RUN_TTL_MS, MIN_DEADLINE_MS, MIN_RUN_TTL_MS, newOperationId, readyLongPollMs, readyMarginMs } from "./limits.js";
import { Safety } from "./retry.js";
import { Run } from "./run.js";

const terminal = new Set([pb.LifecycleState.RETIRING, pb.LifecycleState.RETIRED, pb.LifecycleState.DELETING, pb.LifecycleState.DELETED]);
// DeleteEnvironment's wait bound (the server's): it holds its answer at most this long for
// the deletion to complete.
const maxDeleteWaitMs = 30_000;

/**
 * Asks for action — DELETE the environment (executor and workspace) or SUSPEND it (keeping
 * the workspace, ending a held run claim) — afterMs from the call that sets it (1 s .. 8760 h).
 * status.deadline and status.deadlineAction say which one holds.
 */
export interface Deadline {
  afterMs: number;
  action: "DELETE" | "SUSPEND";
}

/** @internal The wire form of a deadline, refused here when out of the server's bounds. */
export function deadlineProto(d: Deadline): pb.Deadline {
  if (!(d.afterMs >= MIN_DEADLINE_MS && d.afterMs <= MAX_DEADLINE_MS)) throw new RangeError(`deadline after ${d.afterMs} ms: want ${MIN_DEADLINE_MS}..${MAX_DEADLINE_MS}`);
  if (d.action !== "DELETE" && d.action !== "SUSPEND") throw new RangeError(`deadline action ${String(d.action)}: want DELETE or SUSPEND`);
  return create(pb.DeadlineSchema, { after: durationFromMs(d.afterMs), action: pb.DeadlineAction[d.action] });
}

/** One binding's environment. */
export class Environment {
  created = false;
  constructor(
    private readonly client: Client,
    readonly owner: Owner,
    readonly bindingId: string,
    private state: pb.Environment,
    private grant: pb.Grant | undefined,
  ) {}

  get id(): string {
    return this.state.ref?.id ?? "";
  }
  get revision(): string {
    return this.state.ref?.revision ?? "";
  }
  get ref(): pb.EnvironmentRef {
    return this.state.ref ?? create(pb.EnvironmentRefSchema);
  }
  /** The environment as last seen. */
  get status(): pb.Environment {
    return this.state;
  }

  /** @internal */
  set(state: pb.Environment | undefined, grant?: pb.Grant): void {
    if (state?.ref) this.state = state;
    if (grant?.token) this.grant = grant;
  }

  referenceState(): pb.ReferenceState {
    return this.state.references.find((r) => r.bindingId === this.bindingId)?.state ?? pb.ReferenceState.UNSPECIFIED;
  }

  /** Attaches again: the current state and a fresh environment grant (the answer held up to waitReadyMs until ready). */
  async refresh(waitReadyMs = 0): Promise<void> {
    const req = create(pb.AttachEnvironmentRequestSchema, {
      owner: create(pb.OwnerSchema, this.owner), bindingId: this.bindingId, environment: this.ref,
      waitReady: waitReadyMs > 0 ? durationFromMs(waitReadyMs) : undefined,
    });
    const resp = await this.client.call(Safety.Idempotent, (o) => this.client.api.attachEnvironment(req, o), this.client.timeoutMs + waitReadyMs);
    this.set(resp.environment, resp.environmentGrant);
  }

  /** Waits until Ready; fails at once when fenced (FENCED) or retiring, retired, deleting, deleted (NOT_READY). */
  async waitReady(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const st = this.state;
      if (st.ready) return;
      if (st.fenceState === pb.FenceState.FENCE_UNKNOWN) {
        throw new ExecplaneError(Code.FailedPrecondition, "FENCED", "the environment is fenced: " + st.message);
      }
      if (terminal.has(st.lifecycle)) {
        throw new ExecplaneError(Code.FailedPrecondition, "NOT_READY", `the environment is ${pb.LifecycleState[st.lifecycle]}`);
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`execplane: environment ${this.id} not ready in ${timeoutMs} ms (last: ${pb.LifecycleState[st.lifecycle]} ${st.message})`);
      const start = Date.now();
      await this.refresh(Math.max(Math.min(readyLongPollMs, left - readyMarginMs), 0));
      if (this.state.ready) return;
      const early = 200 - (Date.now() - start);
      if (early > 0) await new Promise((r) => setTimeout(r, early)); // an older gateway answers at once
    }
  }

  private async reference(rpc: (req: { operationId: string; target: pb.ReferenceTarget }, o: { timeoutMs: number }) => Promise<{ environment?: pb.Environment }>, timeoutMs?: number): Promise<void> {
    // One operation id for every retry: the server answers the first outcome instead of acting twice.
    const req = { operationId: newOperationId(), target: create(pb.ReferenceTargetSchema, { owner: create(pb.OwnerSchema, this.owner), environment: this.ref, bindingId: this.bindingId }) };
    const resp = await this.client.call(Safety.Idempotent, (o) => rpc(req, o), timeoutMs);
    this.set(resp.environment);
  }

  /** Publishes the binding's pending reference. */
  commitReference(): Promise<void> {
    return this.reference((r, o) => this.client.api.commitReference(create(pb.CommitReferenceRequestSchema, r), o));
  }
  /** Removes the binding's published reference in one step. */
  releaseReference(): Promise<void> {
    return this.reference((r, o) => this.client.api.releaseReference(create(pb.ReleaseReferenceRequestSchema, r), o));
  }
  /** Stops the executor and keeps the workspace; every grant issued before dies (RUN_CLAIM_HELD while a claim is held). */
  /**
   * A crash-consistent snapshot of the workspace named name (CreateSnapshot): the executor's
   * processes are stopped while it is cut. Resolves once it is cut: state READY, or FAILED
   * with failureReason. client.ensure(..., { fromSnapshot: name }) restores it; fork does both.
   */
  async snapshot(name: string, timeoutMs?: number): Promise<pb.Snapshot> {
    const req = create(pb.CreateSnapshotRequestSchema, {
      operationId: newOperationId(), name,
      target: create(pb.ReferenceTargetSchema, { owner: create(pb.OwnerSchema, this.owner), environment: this.ref, bindingId: this.bindingId }),
    });
    return (await this.client.call(Safety.Idempotent, (o) => this.client.api.createSnapshot(req, o), timeoutMs)).snapshot!;
  }

  /**
   * Snapshots this environment as snapshot and ensures bindingId's environment from it: an
   * independent copy of the workspace, no durable command running, none of this environment's
   * grants. The snapshot stays, the caller's to delete.
   */
  async fork(snapshot: string, bindingId: string, profile: string, opts: EnsureOptions = {}): Promise<Environment> {
    const snap = await this.snapshot(snapshot);
    if (snap.state !== pb.SnapshotState.READY) {
      throw new Error(`snapshot ${snapshot}: ${pb.SnapshotState[snap.state]}: ${snap.failureReason} ${snap.failureMessage}`);
    }
    return this.client.ensure(this.owner, bindingId, profile, { ...opts, fromSnapshot: snapshot });
  }

  suspend(): Promise<void> {
    return this.reference((r, o) => this.client.api.suspendEnvironment(create(pb.SuspendEnvironmentRequestSchema, r), o));
  }
  /** Starts a new executor for a suspended environment at epoch + 1 (waitReady waits for it). */
  resume(): Promise<void> {
    return this.reference((r, o) => this.client.api.resumeEnvironment(create(pb.ResumeEnvironmentRequestSchema, r), o));
  }
  /**
   * Ends the environment for its owner: every grant dies at once, this handle's run included;
   * the executor stops, and every command in it with it; the workspace is deleted. The binding
   * must hold the only reference on it (NOT_READY says how many others do). With waitMs (at
   * most 30 s) the answer waits until the deletion completed: status.lifecycle then says
   * DELETED. A deleting or deleted environment is answered as it is, so a repeated delete is safe.
   */
  async delete(waitMs = 0): Promise<void> {
    if (waitMs < 0 || waitMs > maxDeleteWaitMs) throw new RangeError(`wait ${waitMs} ms: want 0..${maxDeleteWaitMs}`);
    const wait = waitMs > 0 ? durationFromMs(waitMs) : undefined;
    // The server may hold its answer for waitMs: the call is given that long on top.
    await this.reference((r, o) => this.client.api.deleteEnvironment(create(pb.DeleteEnvironmentRequestSchema, { ...r, wait }), o), this.client.timeoutMs + waitMs);
  }
  /** Keeps the workspace from the profile's time limits (retiredTTL, suspendedTTL, maxLifetime), or lets them apply again; status.retained says which holds. */
  setRetention(retain: boolean): Promise<void> {
    return this.reference((r, o) => this.client.api.setEnvironmentRetention(create(pb.SetEnvironmentRetentionRequestSchema, { ...r, retain }), o));
  }
  /**
   * Sets or moves the environment's deadline, counted from now: at it the controller deletes
   * or suspends the environment (deadline.action), whatever it is doing — a suspension ends a
   * held run claim. null clears it. status.deadline and status.deadlineAction say which holds.
   */
  async setDeadline(deadline: Deadline | null): Promise<void> {
    const d = deadline ? deadlineProto(deadline) : undefined;
    await this.reference((r, o) => this.client.api.setEnvironmentDeadline(create(pb.SetEnvironmentDeadlineRequestSchema, { ...r, deadline: d }), o));
  }

  /**
   * Takes the run claim — execution authority, fencing any earlier holder — and, unless
   * renew is false, renews it in the background until the run is closed. A suspended
   * environment is resumed first. Close the run when done (or use withRun).
   */
  async acquire(runId: string, opts: { ttlMs?: number; renew?: boolean } = {}): Promise<Run> {
    const ttlMs = opts.ttlMs ?? DEFAULT_RUN_TTL_MS;
    if (ttlMs < MIN_RUN_TTL_MS || ttlMs > MAX_RUN_TTL_MS) throw new RangeError(`ttl ${ttlMs} ms: want ${MIN_RUN_TTL_MS}..${MAX_RUN_TTL_MS}`);
    const attempt = () => {
      const req = create(pb.AcquireRunRequestSchema, { operationId: newOperationId(), environmentGrant: this.grant, environment: this.ref, runId, ttl: durationFromMs(ttlMs) });
      return this.client.call(Safety.Idempotent, (o) => this.client.api.acquireRun(req, o));
    };
    let resp: pb.AcquireRunResponse;
    try {
      resp = await attempt();
    } catch (err) {
      if (!isGrantInvalid(err) && !isRevoked(err) && !isNotReady(err)) throw err;
      // The grant expired or was revoked (a suspension revokes every grant), or the
      // environment is suspending or resuming: attach again — which resumes a suspended
      // environment —, wait until ready, retry with a fresh operation id.
      await this.refresh();
      await this.waitReady(DEFAULT_READY_TIMEOUT_MS);
      resp = await attempt();
    }
    this.set(resp.environment);
    return new Run(this.client, this, runId, ttlMs, resp.run!, resp.runGrant!, opts.renew !== false);
  }
}

/** Runs fn under a run claim of env, released when fn settles. */
export async function withRun<T>(env: Environment, runId: string, fn: (run: Run) => Promise<T>, opts?: { ttlMs?: number }): Promise<T> {
  const run = await env.acquire(runId, opts);
  try {
    return await fn(run);
  } finally {
    await run.close();
  }
}
