// The client: one mTLS HTTP/2 connection to a gateway (gRPC), and the calls that start
// from a binding.
import { readFileSync } from "node:fs";
import { clone, create } from "@bufbuild/protobuf";
import { createClient, type Client as RpcClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { deadlineProto, Environment, type Deadline } from "./environment.js";
import { ExecutionProviderService } from "./gen/execution/v1/executionv1grpc/service_pb.js";
import * as pb from "./gen/execution/v1/execution_pb.js";
import { DEFAULT_READY_TIMEOUT_MS, DEFAULT_TIMEOUT_MS, MAX_PAGE_SIZE, newOperationId } from "./limits.js";
import { call, defaultRetry, Safety, type RetryPolicy } from "./retry.js";
import { getUsageRequest, listUsageRequest, type ListUsageOptions, type UsageOptions } from "./usage.js";

/** The end user a client acts for (the client must be allowed to attest owners). */
export interface Owner {
  issuer: string;
  subject: string;
}

/** A lifecycle state by name ("READY", "SUSPENDED", …). */
export type LifecycleName = Exclude<keyof typeof pb.LifecycleState, "UNSPECIFIED">;

/** Selects listEnvironments' environments; none selects all of the owner's. */
export interface ListOptions {
  /** Only this binding's environment. */
  bindingId?: string;
  /** Only environments in one of these states (names or status.lifecycle values). */
  lifecycle?: (LifecycleName | pb.LifecycleState)[];
  /** Only environments whose metadata has every one of these entries. */
  metadata?: Record<string, string>;
  /** The server's page (0: its default of 100; at most 500). */
  pageSize?: number;
}

export interface ClientOptions {
  /** The gateway, host:port. */
  address: string;
  /** PEM files: the CA bundle verifying the gateway, the client's certificate and key. */
  caFile: string;
  certFile: string;
  keyFile: string;
  /** The name expected in the gateway's certificate, when not the address's host. */
  serverName?: string;
  retry?: Partial<RetryPolicy>;
  timeoutMs?: number;
  /** Interceptors of every call (tests use one to lose an answer). */
  interceptors?: Interceptor[];
}

/**
 * A connection to an execplane gateway over mutual TLS (TLS 1.3, the client's certificate
 * required). Retries follow the server: a call is retried only when the server marks the
 * answer retryable (nothing was done), or — for reads and calls that carry an operation id —
 * when the connection failed before an answer; every retry sends the same request, so the
 * same operation id. OUTCOME_UNKNOWN is never retried. Close it when done.
 */
/** The options of Client.ensure. */
export interface EnsureOptions {
  expectedProfileDigest?: string;
  metadata?: Record<string, string>;
  deadline?: Deadline;
  keepReferencePending?: boolean;
  wait?: boolean;
  timeoutMs?: number;
  /** One of the owner's READY snapshots a new environment's workspace starts as. */
  fromSnapshot?: string;
}

export class Client {
  readonly api: RpcClient<typeof ExecutionProviderService>;
  readonly retry: RetryPolicy;
  readonly timeoutMs: number;
  private readonly sessions: Http2SessionManager;
  private closedFlag = false;

  constructor(o: ClientOptions) {
    const baseUrl = `https://${o.address}`;
    this.sessions = new Http2SessionManager(baseUrl, undefined, {
      ca: readFileSync(o.caFile),
      cert: readFileSync(o.certFile),
      key: readFileSync(o.keyFile),
      servername: o.serverName || undefined,
      minVersion: "TLSv1.3",
    });
    const transport = createGrpcTransport({ baseUrl, sessionManager: this.sessions, interceptors: o.interceptors ?? [] });
    this.api = createClient(ExecutionProviderService, transport);
    this.retry = { ...defaultRetry, ...o.retry };
    this.timeoutMs = o.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  /** Closes the connection; runs still held stop renewing (release them first). */
  close(): void {
    this.closedFlag = true;
    this.sessions.abort();
  }

  get closed(): boolean {
    return this.closedFlag;
  }

  /** One logical call within timeoutMs (the client's when undefined). */
  call<T>(safety: Safety, fn: (opts: { timeoutMs: number }) => Promise<T>, timeoutMs?: number): Promise<T> {
    const deadline = Date.now() + (timeoutMs ?? this.timeoutMs);
    return call(this.retry, safety, deadline, (t) => fn({ timeoutMs: t }));
  }

  /** The profile as the gateway has it loaded; a differing expectedDigest is refused. */
  validateProfile(name: string, expectedDigest = ""): Promise<pb.ValidateProfileResponse> {
    const req = create(pb.ValidateProfileRequestSchema, { profile: name, expectedDigest });
    return this.call(Safety.Idempotent, (o) => this.api.validateProfile(req, o));
  }

  /**
   * The binding's environment, created on first use (identical concurrent calls yield one).
   * Unless keepReferencePending, the binding's reference is committed; unless wait is false,
   * waits until the environment is Ready.
   *
   * metadata (at most 32 entries: identifier keys of at most 64 bytes, values of at most 512,
   * 4 KiB in all) is a new environment's, returned in status.metadata and matched by
   * listEnvironments; it is part of the request, like the profile: the binding ensured again
   * with other metadata is ALREADY_EXISTS. deadline is a new environment's, set in the same
   * write as the binding's reference; a later ensure leaves it as it is (setDeadline moves it).
   * fromSnapshot names one of the owner's READY snapshots that a new environment's workspace
   * starts as (part of the request); another owner's is NOT_FOUND.
   */
  async ensure(owner: Owner, bindingId: string, profile: string,
    opts: EnsureOptions = {}): Promise<Environment> {
    const deadline = Date.now() + (opts.timeoutMs ?? DEFAULT_READY_TIMEOUT_MS);
    const req = create(pb.EnsureEnvironmentRequestSchema, {
      operationId: newOperationId(), owner: create(pb.OwnerSchema, owner), bindingId, profile,
      expectedProfileDigest: opts.expectedProfileDigest ?? "", metadata: { ...opts.metadata },
      deadline: opts.deadline ? deadlineProto(opts.deadline) : undefined, fromSnapshot: opts.fromSnapshot ?? "",
    });
    const resp = await this.call(Safety.Idempotent, (o) => this.api.ensureEnvironment(req, o));
    const env = new Environment(this, owner, bindingId, resp.environment!, resp.environmentGrant);
    env.created = resp.created;
    if (!opts.keepReferencePending && env.referenceState() === pb.ReferenceState.PENDING_CREATE) {
      await env.commitReference();
    }
    if (opts.wait !== false) await env.waitReady(Math.max(deadline - Date.now(), 0));
    return env;
  }

  /** A handle on an existing environment of the binding; absent, re-created or not the owner's: NOT_FOUND. */
  async attach(owner: Owner, bindingId: string, id: string, revision: string): Promise<Environment> {
    const env = new Environment(this, owner, bindingId, create(pb.EnvironmentSchema, { ref: { id, revision } }), undefined);
    await env.refresh();
    return env;
  }

  /**
   * The environments this client created for owner, ordered by id (deleted ones are never
   * listed), fetched page by page as the iteration reaches them. Requires the client to be
   * allowed to attest owners. Arguments out of bounds throw here, before any call.
   */
  listEnvironments(owner: Owner, opts: ListOptions = {}): AsyncIterable<pb.Environment> {
    const pageSize = opts.pageSize ?? 0;
    if (!Number.isInteger(pageSize) || pageSize < 0 || pageSize > MAX_PAGE_SIZE) throw new RangeError(`page size ${pageSize}: want 0..${MAX_PAGE_SIZE}`);
    const first = create(pb.ListEnvironmentsRequestSchema, {
      owner: create(pb.OwnerSchema, owner), bindingId: opts.bindingId ?? "", lifecycle: (opts.lifecycle ?? []).map(lifecycleState),
      metadata: { ...opts.metadata }, pageSize,
    });
    return this.pages(first);
  }

  /** One of owner's snapshots (GetSnapshot); another owner's is NOT_FOUND, as an absent one. */
  async getSnapshot(owner: Owner, name: string): Promise<pb.Snapshot> {
    const req = create(pb.GetSnapshotRequestSchema, { owner: create(pb.OwnerSchema, owner), name });
    return (await this.call(Safety.Idempotent, (o) => this.api.getSnapshot(req, o))).snapshot!;
  }

  /** owner's snapshots (this client's), by name (ListSnapshots). */
  async listSnapshots(owner: Owner): Promise<pb.Snapshot[]> {
    const req = create(pb.ListSnapshotsRequestSchema, { owner: create(pb.OwnerSchema, owner) });
    return (await this.call(Safety.Idempotent, (o) => this.api.listSnapshots(req, o))).snapshots;
  }

  /** Deletes one of owner's snapshots and its storage; environments restored from it keep their files. */
  async deleteSnapshot(owner: Owner, name: string): Promise<pb.Snapshot> {
    const req = create(pb.DeleteSnapshotRequestSchema, { operationId: newOperationId(), owner: create(pb.OwnerSchema, owner), name });
    return (await this.call(Safety.Idempotent, (o) => this.api.deleteSnapshot(req, o))).snapshot!;
  }

  /**
   * An environment's usage ledger (GetUsage): its totals since creation (totals, as of asOf)
   * and its windows in the range that have usage, oldest first, each closed once nothing more
   * will be added to it. For the client that created the environment, or an administrator of
   * it; any other gets NOT_FOUND. Options out of bounds reject before any call.
   */
  async getUsage(environmentId: string, opts: UsageOptions = {}): Promise<pb.GetUsageResponse> {
    const req = getUsageRequest(environmentId, opts);
    return this.call(Safety.Idempotent, (o) => this.api.getUsage(req, o));
  }

  /**
   * Usage summed per window and group (ListUsage): the records ordered by key, then window
   * start, fetched page by page as the iteration reaches them. The client's own environments
   * (only owner's, only bindingId's, when given); administrators may name another client or
   * take allClients. Options out of bounds throw here, before any call.
   */
  listUsage(opts: ListUsageOptions = {}): AsyncIterable<pb.UsageRecord> {
    return this.usagePages(listUsageRequest(opts));
  }

  private async *usagePages(first: pb.ListUsageRequest): AsyncGenerator<pb.UsageRecord> {
    for (let req = first; ;) {
      // Each page's request is its own, so every retry of a page sends it unchanged.
      const page = req;
      const resp = await this.call(Safety.Idempotent, (o) => this.api.listUsage(page, o));
      yield* resp.records;
      if (!resp.nextPageToken) return;
      req = clone(pb.ListUsageRequestSchema, first);
      req.pageToken = resp.nextPageToken;
    }
  }

  private async *pages(first: pb.ListEnvironmentsRequest): AsyncGenerator<pb.Environment> {
    for (let req = first; ;) {
      // Each page's request is its own, so every retry of a page sends it unchanged.
      const page = req;
      const resp = await this.call(Safety.Idempotent, (o) => this.api.listEnvironments(page, o));
      yield* resp.environments;
      if (!resp.nextPageToken) return;
      req = clone(pb.ListEnvironmentsRequestSchema, first);
      req.pageToken = resp.nextPageToken;
    }
  }
}

function lifecycleState(s: LifecycleName | pb.LifecycleState): pb.LifecycleState {
  const v = typeof s === "string" ? pb.LifecycleState[s] : s;
  if (pb.LifecycleState[v] === undefined) throw new RangeError(`lifecycle ${String(s)}: not a LifecycleState`);
  return v;
}
