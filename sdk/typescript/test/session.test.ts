// The Go SDK's end-to-end session, walked with the TypeScript SDK against the local stack
// (started by test/integration's TestTypeScriptSDK, which passes the connection in
// EXECPLANE_* variables): ensure → ready → acquire → write → run → read → release, a
// compare-and-swap conflict, a stale-epoch refusal, and a retried call that does not act twice.
import { test } from "node:test";
import assert from "node:assert/strict";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { Client, newOperationId, withRun, isAlreadyExists, isConflict, isNotFound, isPathEscape, isStaleEpoch, isVersionMismatch, type ClientOptions, type Owner } from "../src/index.js";
import * as pb from "../src/gen/execution/v1/execution_pb.js";

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run these tests through test/integration's TestTypeScriptSDK`);
  return v;
}

function connect(extra: Partial<ClientOptions> = {}): Client {
  return new Client({ address: env("EXECPLANE_ADDRESS"), caFile: env("EXECPLANE_CA"), certFile: env("EXECPLANE_CERT"), keyFile: env("EXECPLANE_KEY"),
    serverName: process.env.EXECPLANE_SERVER_NAME, ...extra });
}

const owner = (): Owner => ({ issuer: env("EXECPLANE_ISSUER"), subject: env("EXECPLANE_OWNER") });
const profile = () => env("EXECPLANE_PROFILE");

test("session", { timeout: 180_000 }, async () => {
  const c = connect();
  try {
    const e = await c.ensure(owner(), "ts-conv-1", profile());
    assert.ok(e.created && e.status.ready && e.id && e.revision);
    const again = await c.ensure(owner(), "ts-conv-1", profile());
    assert.ok(!again.created && again.revision === e.revision);
    await assert.rejects(c.attach({ ...owner(), subject: "mallory" }, "ts-conv-1", e.id, e.revision), isNotFound);

    await withRun(e, "turn-1", async (run) => {
      assert.equal(run.epoch, e.status.epoch);
      const info = await run.writeFile("src/main.ts", "console.log('hello from ts')\n", { createParents: true });
      assert.equal(info.size, 29);
      assert.ok(info.version);
      const r = await run.run({ argv: ["sh", "-c", "tr a-z A-Z < src/main.ts > src/upper.txt; echo done; echo warn >&2; exit 3"] });
      assert.deepEqual([r.state, r.exitCode, r.stdout, r.stderr], ["FAILED", 3, "done\n", "warn\n"]);
      assert.equal(await run.readText("src/upper.txt"), "CONSOLE.LOG('HELLO FROM TS')\n");
      const ok = await run.run({ shell: "ls src", timeoutMs: 10_000 });
      assert.deepEqual([ok.state, ok.stdout], ["SUCCEEDED", "main.ts\nupper.txt\n"]);

      // Compare-and-swap: the current version wins once; the stale one is refused.
      const v2 = await run.writeFile("src/main.ts", "2\n", { ifVersion: info.version });
      await assert.rejects(run.writeFile("src/main.ts", "lost update\n", { ifVersion: info.version }), (err) =>
        isVersionMismatch(err) && isConflict(err) && !err.retryable && err.requestId !== "");
      assert.equal(await run.readText("src/main.ts"), "2\n");
      assert.equal((await run.stat("src/main.ts")).version, v2.version);
      await assert.rejects(run.writeFile("src/main.ts", "x", { createOnly: true }), isAlreadyExists);
      await assert.rejects(run.stat("src/absent.txt"), isNotFound);
      await assert.rejects(run.readFile("../etc/passwd"), isPathEscape);

      assert.deepEqual((await run.listDir("src")).map((f) => f.path).sort(), ["main.ts", "upper.txt"]);
      assert.deepEqual(await run.glob("**/*.ts"), { paths: ["src/main.ts"], truncated: false });
      assert.deepEqual((await run.grep("HELLO")).matches, [{ path: "src/upper.txt", line: 1, text: "CONSOLE.LOG('HELLO FROM TS')" }]);
      await run.rename("src/upper.txt", "src/UPPER.txt");
      assert.equal(await run.remove("src", { recursive: true }), 3);
    });
    // Released: the claim is gone.
    await e.refresh();
    assert.equal(e.status.activeRun, undefined);
  } finally {
    c.close();
  }
});

test("stale epoch", { timeout: 120_000 }, async () => {
  const c = connect();
  try {
    const e = await c.ensure(owner(), "ts-conv-2", profile());
    const first = await e.acquire("turn-1", { renew: false });
    await first.writeFile("f.txt", "first\n");
    // The claim ends behind this handle's back (released by another process holding the
    // same run) and another run takes it: this handle's epoch is stale from then on.
    await c.api.releaseRun(create(pb.ReleaseRunRequestSchema, { operationId: newOperationId(), runGrant: first.runGrant(), environment: e.ref }));
    await withRun(await c.attach(owner(), "ts-conv-2", e.id, e.revision), "turn-2", async (second) => {
      assert.ok(second.epoch > first.epoch);
      await assert.rejects(first.writeFile("f.txt", "from the fenced run\n"), isStaleEpoch);
      await assert.rejects(first.run({ argv: ["true"] }), isStaleEpoch);
      assert.equal(await second.readText("f.txt"), "first\n");
    });
  } finally {
    c.close();
  }
});

test("a retried call does not act twice", { timeout: 120_000 }, async () => {
  // Lets the first AcquireRun through and drops its answer, as a connection that broke after
  // the server acted would: the SDK sees UNAVAILABLE with no answer.
  const seen: pb.AcquireRunRequest[] = [];
  const loseFirstAnswer: Interceptor = (next) => async (req) => {
    const res = await next(req);
    if (req.method.name === "AcquireRun") {
      seen.push(req.message as pb.AcquireRunRequest);
      if (seen.length === 1) throw new ConnectError("connection reset (injected after the server answered)", Code.Unavailable);
    }
    return res;
  };
  const c = connect({ interceptors: [loseFirstAnswer] });
  try {
    const e = await c.ensure(owner(), "ts-conv-3", profile());
    const before = e.status.epoch;
    await withRun(e, "turn-1", async (run) => {
      assert.equal(seen.length, 2);
      assert.equal(seen[0].operationId, seen[1].operationId);
      assert.equal(run.epoch, before + 1n);
      await e.refresh();
      assert.equal(e.status.epoch, before + 1n);
      // A durable command started twice under one id runs once.
      const a = await run.start({ shell: "echo ran >> runs.txt", commandId: "ts-once" });
      const b = await run.start({ shell: "echo ran >> runs.txt", commandId: "ts-once" });
      assert.equal(a.id, "ts-once");
      assert.equal(b.id, "ts-once");
      for (let i = 0; i < 100 && (await run.commandStatus("ts-once")).info.state === "RUNNING"; i++) await new Promise((r) => setTimeout(r, 100));
      assert.equal((await run.commandStatus("ts-once")).info.state, "SUCCEEDED");
      assert.equal(await run.readText("runs.txt"), "ran\n");
    });
  } finally {
    c.close();
  }
});
