// The client: one mTLS HTTP/2 connection to a gateway (gRPC), and the calls that start
// from a binding.
import { readFileSync } from "node:fs";
import { create } from "@bufbuild/protobuf";
import { createClient, type Client as RpcClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { Environment } from "./environment.js";
import { ExecutionProviderService } from "./gen/execution/v1/executionv1grpc/service_pb.js";
import * as pb from "./gen/execution/v1/execution_pb.js";
import { DEFAULT_READY_TIMEOUT_MS, DEFAULT_TIMEOUT_MS, newOperationId } from "./limits.js";
import { call, defaultRetry, Safety, type RetryPolicy } from "./retry.js";

/** The end user a client acts for (the client must be allowed to attest owners). */
export interface Owner {
  issuer: string;
  subject: string;
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
   */
  async ensure(owner: Owner, bindingId: string, profile: string,
    opts: { expectedProfileDigest?: string; keepReferencePending?: boolean; wait?: boolean; timeoutMs?: number } = {}): Promise<Environment> {
    const deadline = Date.now() + (opts.timeoutMs ?? DEFAULT_READY_TIMEOUT_MS);
    const req = create(pb.EnsureEnvironmentRequestSchema, {
      operationId: newOperationId(), owner: create(pb.OwnerSchema, owner), bindingId, profile,
      expectedProfileDigest: opts.expectedProfileDigest ?? "",
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
}
