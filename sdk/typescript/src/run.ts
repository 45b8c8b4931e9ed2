// A held run claim: the authority to read and write files and run commands.
import { randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { durationFromMs, timestampDate } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import type { Client } from "./client.js";
import type { Environment } from "./environment.js";
import { ExecplaneError, isFenced, isGrantInvalid, isNotFound, isRevoked, isRunClaimHeld, isStaleEpoch } from "./errors.js";
import * as pb from "./gen/execution/v1/execution_pb.js";
import { commandGraceMs, commandMaxMs, newOperationId, releaseTimeoutMs } from "./limits.js";
import { Safety } from "./retry.js";

/** One object beneath the workspace root. */
export interface FileInfo {
  path: string;
  type: "FILE" | "DIRECTORY" | "SYMLINK" | "UNSPECIFIED";
  size: number;
  mode: number;
  modifiedAt?: Date;
  /** A regular file's content version, for compare-and-swap writes. */
  version: string;
  symlinkTarget: string;
}

const utf8 = new TextDecoder();
const encode = (s: string) => new TextEncoder().encode(s);

function fileInfo(p: pb.FileInfo | undefined): FileInfo {
  return {
    path: utf8.decode(p?.path ?? new Uint8Array()), type: (pb.FileType[p?.type ?? 0] ?? "UNSPECIFIED") as FileInfo["type"],
    size: Number(p?.size ?? 0), mode: (p?.mode ?? 0) & 0o777, modifiedAt: p?.modifiedAt ? timestampDate(p.modifiedAt) : undefined,
    version: p?.version ?? "", symlinkTarget: utf8.decode(p?.symlinkTarget ?? new Uint8Array()),
  };
}

/** How a command ended. */
export interface CommandResult {
  state: string;
  exitCode: number;
  signal: number;
  stdout: string;
  stderr: string;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  message: string;
}

function resultOf(r: pb.CommandResult | undefined): CommandResult {
  const text = (c: pb.CapturedOutput | undefined) =>
    c?.truncated ? utf8.decode(c.head) + "\n[... output truncated ...]\n" + utf8.decode(c.tail) : utf8.decode(c?.head ?? new Uint8Array()) + utf8.decode(c?.tail ?? new Uint8Array());
  return {
    state: pb.CommandState[r?.state ?? 0] ?? "UNSPECIFIED", exitCode: r?.exitCode ?? -1, signal: r?.signal ?? 0,
    stdout: text(r?.stdout), stderr: text(r?.stderr), stdoutTruncated: r?.stdout?.truncated ?? false,
    stderrTruncated: r?.stderr?.truncated ?? false, message: r?.message ?? "",
  };
}

/** A durable command. */
export interface CommandInfo {
  id: string;
  state: string;
  runId: string;
  epoch: bigint;
  stdoutBytes: number;
  stderrBytes: number;
  result?: CommandResult;
}

function infoOf(c: pb.CommandInfo | undefined): CommandInfo {
  return {
    id: c?.commandId ?? "", state: pb.CommandState[c?.state ?? 0] ?? "UNSPECIFIED", runId: c?.runId ?? "", epoch: c?.epoch ?? 0n,
    stdoutBytes: Number(c?.stdoutBytes ?? 0), stderrBytes: Number(c?.stderrBytes ?? 0), result: c?.result ? resultOf(c.result) : undefined,
  };
}

export interface CommandOptions {
  argv?: string[];
  shell?: string;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string | Uint8Array;
  timeoutMs?: number;
}

function spec(c: CommandOptions): pb.CommandSpec {
  if (!c.shell === !(c.argv && c.argv.length)) throw new TypeError("give either argv or shell");
  return create(pb.CommandSpecSchema, {
    program: c.shell ? { case: "shell", value: c.shell } : { case: "argv", value: { args: c.argv! } },
    workingDirectory: encode(c.cwd ?? ""), stdin: typeof c.stdin === "string" ? encode(c.stdin) : (c.stdin ?? new Uint8Array()),
    environment: Object.entries(c.env ?? {}).sort().map(([name, value]) => ({ name, value })),
    timeout: c.timeoutMs ? durationFromMs(c.timeoutMs) : undefined,
  });
}

/** Answers that prove the claim is gone for good. */
const ended = (err: unknown) => isStaleEpoch(err) || isRevoked(err) || isRunClaimHeld(err) || isNotFound(err) || isFenced(err) || isGrantInvalid(err);

/** A held run claim: the authority to read and write files and run commands. */
export class Run {
  private lost: unknown;
  private timer?: NodeJS.Timeout;
  private closing?: Promise<void>;

  constructor(
    private readonly client: Client,
    readonly environment: Environment,
    readonly id: string,
    private readonly ttlMs: number,
    private claimState: pb.RunClaim,
    private grant: pb.Grant,
    renew: boolean,
  ) {
    if (renew) {
      this.timer = setInterval(() => {
        if (this.client.closed) return this.stopRenewal();
        this.renew().catch(() => {
          if (this.lost !== undefined) this.stopRenewal(); // transient failures: the next tick tries again
        });
      }, ttlMs / 3);
      this.timer.unref();
    }
  }

  get claim(): pb.RunClaim {
    return this.claimState;
  }
  get epoch(): bigint {
    return this.claimState.epoch;
  }
  /** Why the run ended (the claim lost, or the run closed); undefined while held. */
  get error(): unknown {
    return this.lost;
  }

  /** @internal the current run grant, or why the run ended. */
  runGrant(): pb.Grant {
    if (this.lost !== undefined) throw this.lost;
    return this.grant;
  }

  private stopRenewal(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Extends the claim by its TTL and refreshes the run grant. */
  async renew(): Promise<void> {
    const req = create(pb.RenewRunRequestSchema, { operationId: newOperationId(), runGrant: this.runGrant(), environment: this.environment.ref, ttl: durationFromMs(this.ttlMs) });
    try {
      const resp = await this.client.call(Safety.Idempotent, (o) => this.client.api.renewRun(req, o), this.ttlMs / 3);
      this.claimState = resp.run!;
      this.grant = resp.runGrant!;
    } catch (err) {
      if (ended(err)) this.lost = err;
      throw err;
    }
  }

  /** Stops the renewal and releases the claim (within 10 s). Idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.stopRenewal();
      const lost = this.lost;
      this.lost = new Error(`execplane: run ${this.id} was closed`);
      if (lost !== undefined) return;
      const req = create(pb.ReleaseRunRequestSchema, { operationId: newOperationId(), runGrant: this.grant, environment: this.environment.ref });
      const resp = await this.client.call(Safety.Idempotent, (o) => this.client.api.releaseRun(req, o), releaseTimeoutMs);
      this.environment.set(resp.environment);
    })();
    return this.closing;
  }

  private async files(safety: Safety, operation: pb.FileOperation["operation"]): Promise<pb.FileResult> {
    const req = create(pb.FilesRequestSchema, { runGrant: this.runGrant(), environment: this.environment.ref, operation: { operation } });
    const resp = await this.client.call(safety, (o) => this.client.api.files(req, o));
    return resp.result!;
  }

  /** Up to length bytes at offset (0: as much as one call carries). */
  async readRange(path: string, offset = 0, length = 0): Promise<{ content: Uint8Array; info: FileInfo; more: boolean }> {
    const res = await this.files(Safety.Idempotent, { case: "read", value: create(pb.ReadFileSchema, { path: encode(path), offset: BigInt(offset), length: BigInt(length) }) });
    const r = res.result.case === "read" ? res.result.value : undefined;
    return { content: r?.content ?? new Uint8Array(), info: fileInfo(r?.info), more: r?.more ?? false };
  }

  /** The whole file; VERSION_MISMATCH if it changed between the calls that read it. */
  async readFile(path: string): Promise<Uint8Array> {
    const parts: Uint8Array[] = [];
    let offset = 0;
    let version: string | undefined;
    for (;;) {
      const c = await this.readRange(path, offset);
      if (version !== undefined && c.info.version !== version) {
        throw new ExecplaneError(Code.Aborted, "VERSION_MISMATCH", `${path} changed while it was read`);
      }
      version = c.info.version;
      parts.push(c.content);
      offset += c.content.length;
      if (!c.more || c.content.length === 0) return Buffer.concat(parts);
    }
  }

  async readText(path: string): Promise<string> {
    return utf8.decode(await this.readFile(path));
  }

  /**
   * Replaces the file's content atomically. With ifVersion, only if the file still has that
   * version (VERSION_MISMATCH); with createOnly, only if absent (ALREADY_EXISTS). Retried
   * only when the server says nothing was done.
   */
  async writeFile(path: string, content: string | Uint8Array, opts: { ifVersion?: string; createOnly?: boolean; createParents?: boolean; mode?: number } = {}): Promise<FileInfo> {
    if (opts.ifVersion && opts.createOnly) throw new TypeError("ifVersion and createOnly exclude each other");
    const mode = opts.ifVersion ? pb.WriteMode.COMPARE_AND_SWAP : opts.createOnly ? pb.WriteMode.CREATE_ONLY : pb.WriteMode.OVERWRITE;
    const res = await this.files(Safety.ServerSaysSo, { case: "write", value: create(pb.WriteFileSchema, {
      path: encode(path), content: typeof content === "string" ? encode(content) : content, mode, expectedVersion: opts.ifVersion ?? "",
      createParents: opts.createParents ?? false, fileMode: opts.mode ?? 0,
    }) });
    return fileInfo(res.result.case === "write" ? res.result.value.info : undefined);
  }

  async stat(path: string): Promise<FileInfo> {
    const res = await this.files(Safety.Idempotent, { case: "stat", value: create(pb.StatFileSchema, { path: encode(path) }) });
    return fileInfo(res.result.case === "stat" ? res.result.value.info : undefined);
  }

  /** The directory's entries, every page. */
  async listDir(path = ""): Promise<FileInfo[]> {
    const out: FileInfo[] = [];
    let pageToken: Uint8Array = new Uint8Array();
    for (;;) {
      const res = await this.files(Safety.Idempotent, { case: "list", value: create(pb.ListDirectorySchema, { path: encode(path), pageToken }) });
      const l = res.result.case === "list" ? res.result.value : undefined;
      out.push(...(l?.entries ?? []).map(fileInfo));
      pageToken = l?.nextPageToken ?? new Uint8Array();
      if (pageToken.length === 0) return out;
    }
  }

  async mkdir(path: string, opts: { parents?: boolean } = {}): Promise<FileInfo> {
    const res = await this.files(Safety.ServerSaysSo, { case: "mkdir", value: create(pb.MakeDirectorySchema, { path: encode(path), parents: opts.parents ?? false }) });
    return fileInfo(res.result.case === "mkdir" ? res.result.value.info : undefined);
  }

  /** Removes a file or an empty directory (recursive: a tree); the count removed. */
  async remove(path: string, opts: { recursive?: boolean; missingOk?: boolean } = {}): Promise<number> {
    const res = await this.files(Safety.ServerSaysSo, { case: "remove", value: create(pb.RemovePathSchema, { path: encode(path), recursive: opts.recursive ?? false, missingOk: opts.missingOk ?? false }) });
    return Number(res.result.case === "remove" ? res.result.value.removed : 0);
  }

  async rename(from: string, to: string, opts: { overwrite?: boolean } = {}): Promise<FileInfo> {
    const res = await this.files(Safety.ServerSaysSo, { case: "rename", value: create(pb.RenamePathSchema, { from: encode(from), to: encode(to), overwrite: opts.overwrite ?? false }) });
    return fileInfo(res.result.case === "rename" ? res.result.value.info : undefined);
  }

  /** Paths matching pattern ('**' for any depth), sorted. */
  async glob(pattern: string, base = ""): Promise<{ paths: string[]; truncated: boolean }> {
    const res = await this.files(Safety.Idempotent, { case: "glob", value: create(pb.GlobSchema, { pattern: encode(pattern), base: encode(base) }) });
    const g = res.result.case === "glob" ? res.result.value : undefined;
    return { paths: (g?.paths ?? []).map((p) => utf8.decode(p)), truncated: g?.truncated ?? false };
  }

  /** Matches of an RE2 expression, line by line. */
  async grep(pattern: string, opts: { path?: string; include?: string; ignoreCase?: boolean; maxMatches?: number } = {}): Promise<{ matches: { path: string; line: number; text: string }[]; truncated: boolean }> {
    const res = await this.files(Safety.Idempotent, { case: "grep", value: create(pb.GrepSchema, {
      pattern, path: encode(opts.path ?? ""), include: encode(opts.include ?? ""), ignoreCase: opts.ignoreCase ?? false, maxMatches: opts.maxMatches ?? 0,
    }) });
    const g = res.result.case === "grep" ? res.result.value : undefined;
    return { matches: (g?.matches ?? []).map((m) => ({ path: utf8.decode(m.path), line: Number(m.lineNumber), text: utf8.decode(m.line) })), truncated: g?.truncated ?? false };
  }

  /** Runs a command to its end. Never retried once it may have started (OUTCOME_UNKNOWN: it may have run). */
  async run(c: CommandOptions): Promise<CommandResult> {
    const req = create(pb.StartCommandRequestSchema, { runGrant: this.runGrant(), environment: this.environment.ref, command: spec(c) });
    const resp = await this.client.call(Safety.ServerSaysSo, (o) => this.client.api.startCommand(req, o), (c.timeoutMs ?? commandMaxMs) + commandGraceMs);
    return resultOf(resp.result);
  }

  /** Starts a durable command that outlives this call; the same commandId and command started again answers the first start. */
  async start(c: CommandOptions & { commandId?: string }): Promise<CommandInfo> {
    const req = create(pb.StartCommandRequestSchema, {
      runGrant: this.runGrant(), environment: this.environment.ref, command: spec(c), detach: true,
      commandId: c.commandId || "cmd-" + randomBytes(10).toString("hex"),
    });
    return infoOf((await this.client.call(Safety.Idempotent, (o) => this.client.api.startCommand(req, o))).command);
  }

  /** A durable command's record and its output from the offsets. */
  async commandStatus(commandId: string, from: { stdout?: number; stderr?: number } = {}, maxBytes = 0): Promise<{ info: CommandInfo; stdout: string; stderr: string; nextStdout: number; nextStderr: number }> {
    const req = create(pb.CommandStatusRequestSchema, {
      runGrant: this.runGrant(), environment: this.environment.ref, commandId, maxOutputBytes: maxBytes,
      from: { stdout: BigInt(from.stdout ?? 0), stderr: BigInt(from.stderr ?? 0) },
    });
    const resp = await this.client.call(Safety.Idempotent, (o) => this.client.api.commandStatus(req, o));
    let stdout = "", stderr = "", nextStdout = from.stdout ?? 0, nextStderr = from.stderr ?? 0;
    for (const c of resp.output) {
      const end = Number(c.offset) + c.data.length;
      if (c.stream === pb.OutputStream.STDERR) {
        stderr += utf8.decode(c.data);
        nextStderr = Math.max(nextStderr, end);
      } else {
        stdout += utf8.decode(c.data);
        nextStdout = Math.max(nextStdout, end);
      }
    }
    return { info: infoOf(resp.command), stdout, stderr, nextStdout, nextStderr };
  }

  /** Stops a running command: SIGTERM, then SIGKILL after graceMs (the server's default when 0). */
  async cancel(commandId: string, graceMs = 0): Promise<CommandInfo> {
    const req = create(pb.CancelCommandRequestSchema, { runGrant: this.runGrant(), environment: this.environment.ref, commandId, grace: graceMs ? durationFromMs(graceMs) : undefined });
    return infoOf((await this.client.call(Safety.Idempotent, (o) => this.client.api.cancelCommand(req, o))).command);
  }
}

