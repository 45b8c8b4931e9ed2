// The unmodified E2B SDK (e2b 2.51.0, pinned by package-lock.json) against execplane's E2B
// front end. Started by test/integration's TestE2BSDK against the local stack, which passes
// the front end's URL in E2B_API_URL and E2B_SANDBOX_URL and two tenants' keys in
// E2B_API_KEY and E2B_OTHER_API_KEY. Commands run on the local cluster's fake node, where a
// command's working directory is the workspace but /home/user is not mounted: commands use
// relative paths, the file API absolute and relative ones (docs/e2b.md "Paths").
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  InvalidArgumentError,
  NotFoundError,
  RateLimitError,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
} from "e2b";

function required(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this through TestE2BSDK`);
  return v;
}

const api = required("E2B_API_URL");
const key = required("E2B_API_KEY");
const otherKey = required("E2B_OTHER_API_KEY");
const warmTemplate = required("E2B_WARM_TEMPLATE");
const secondUrl = required("E2B_SECOND_URL");
const tinyTemplate = required("E2B_TINY_TEMPLATE");
const tinyCapacity = Number(required("E2B_TINY_CAPACITY"));

// eventually polls f until it returns a truthy value, or fails after ms.
async function eventually(what, ms, f) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

// raw calls the control API without the SDK: for what the SDK would not send.
async function raw(method, path, body, headers = {}) {
  const res = await fetch(api + path, {
    method,
    headers: { "X-API-Key": key, "Content-Type": "application/json", ...headers },
    body,
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

test("create from a warm pool, and cold with sandbox-wide envs", { timeout: 120_000 }, async () => {
  const warm = await Sandbox.create(warmTemplate, { metadata: { suite: "create" } });
  try {
    assert.match(warm.sandboxId, /^i[0-9a-z]{19}$/);
    const info = await warm.getInfo();
    assert.equal(info.templateId, warmTemplate);
    assert.equal(info.state, "running");
    assert.deepEqual(info.metadata, { suite: "create" });
    assert.equal((await warm.commands.run("echo ready")).stdout, "ready\n");
  } finally {
    await warm.kill();
  }
  const cold = await Sandbox.create({ envs: { FROM_CREATE: "yes" } });
  try {
    assert.equal((await cold.getInfo()).templateId, "base");
    const r = await cold.commands.run('echo "$FROM_CREATE $FROM_RUN"', { envs: { FROM_RUN: "too" } });
    assert.equal(r.stdout, "yes too\n");
  } finally {
    await cold.kill();
  }
});

test("commands: output streamed as written, exit codes, envs, cwd, stdin", { timeout: 120_000 }, async () => {
  const sbx = await Sandbox.create(warmTemplate);
  try {
    const seen = [];
    const res = await sbx.commands.run("echo one; sleep 1; echo two >&2; sleep 1; echo three", {
      onStdout: (d) => seen.push({ stream: "out", d, at: Date.now() }),
      onStderr: (d) => seen.push({ stream: "err", d, at: Date.now() }),
    });
    const ended = Date.now();
    assert.equal(res.exitCode, 0);
    assert.equal(res.stdout, "one\nthree\n");
    assert.equal(res.stderr, "two\n");
    assert.deepEqual(seen.map((s) => s.stream), ["out", "err", "out"]);
    assert.ok(seen[0].at < ended - 1500, `the first line came ${ended - seen[0].at} ms before the end, not as it was written`);

    await assert.rejects(sbx.commands.run("echo partial; exit 3"), (e) => {
      assert.ok(e instanceof CommandExitError, `${e}`);
      assert.equal(e.exitCode, 3);
      assert.equal(e.error, "exit status 3");
      assert.equal(e.stdout, "partial\n");
      return true;
    });

    await sbx.commands.run("mkdir -p sub/dir");
    const here = await sbx.commands.run('echo "$GREETING from $(basename "$PWD")"', { envs: { GREETING: "hello" }, cwd: "/home/user/sub/dir" });
    assert.equal(here.stdout, "hello from dir\n");
    const rel = await sbx.commands.run("basename \"$PWD\"", { cwd: "sub" });
    assert.equal(rel.stdout, "sub\n");
    await assert.rejects(sbx.commands.run("true", { cwd: "/etc" }), InvalidArgumentError);

    // A command's stdin is closed: cat ends at once; input cannot be sent later.
    const cat = await sbx.commands.run("cat; echo eof");
    assert.equal(cat.stdout, "eof\n");
    const bg = await sbx.commands.run("sleep 30", { background: true, stdin: true });
    await assert.rejects(bg.sendStdin("x"), (e) => e instanceof SandboxError && /stdin/.test(e.message));
    assert.equal(await bg.kill(), true);
  } finally {
    await sbx.kill();
  }
});

test("background commands: found again from a second SDK instance, listed, killed, kept across a cut stream", { timeout: 120_000 }, async () => {
  const sbx = await Sandbox.create(warmTemplate);
  try {
    const ticks = await sbx.commands.run("for i in 1 2 3; do echo tick $i; sleep 1; done", { background: true });
    assert.ok(ticks.pid > 0);
    const again = await Sandbox.connect(sbx.sandboxId);
    const listed = await again.commands.list();
    const entry = listed.find((p) => p.pid === ticks.pid);
    assert.ok(entry, `pid ${ticks.pid} not in ${JSON.stringify(listed)}`);
    assert.equal(entry.cmd, "/bin/bash");
    assert.deepEqual(entry.args, ["-l", "-c", "for i in 1 2 3; do echo tick $i; sleep 1; done"]);
    const followed = await again.commands.connect(ticks.pid);
    const done = await followed.wait();
    assert.equal(done.stdout, "tick 1\ntick 2\ntick 3\n");
    assert.equal((await ticks.wait()).stdout, "tick 1\ntick 2\ntick 3\n");

    // A stream cut mid-command: the command goes on and is found again, its output whole.
    const cut = await sbx.commands.run("echo before; sleep 2; echo after", { background: true });
    await cut.disconnect();
    const resumed = await again.commands.connect(cut.pid);
    assert.equal((await resumed.wait()).stdout, "before\nafter\n");

    const sleeper = await sbx.commands.run("sleep 300", { background: true });
    assert.ok((await sbx.commands.list()).some((p) => p.pid === sleeper.pid));
    assert.equal(await again.commands.kill(sleeper.pid), true);
    await assert.rejects(sleeper.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1);
    assert.ok(!(await sbx.commands.list()).some((p) => p.pid === sleeper.pid));
    assert.equal(await sbx.commands.kill(12345), false);
  } finally {
    await sbx.kill();
  }
});

test("files: write and read text and bytes, many at once, list, exists, makeDir, rename, remove", { timeout: 120_000 }, async () => {
  const sbx = await Sandbox.create(warmTemplate);
  try {
    const w = await sbx.files.write("/home/user/notes/a.txt", "hello");
    assert.equal(w.path, "/home/user/notes/a.txt");
    assert.equal(await sbx.files.read("/home/user/notes/a.txt"), "hello");
    assert.equal(await sbx.files.read("notes/a.txt"), "hello");
    assert.equal((await sbx.commands.run("cat notes/a.txt")).stdout, "hello");

    const bytes = new Uint8Array([0, 1, 2, 253, 254, 255]);
    await sbx.files.write("bin.dat", bytes.buffer);
    assert.deepEqual(await sbx.files.read("bin.dat", { format: "bytes" }), bytes);

    const many = await sbx.files.write([
      { path: "many/1.txt", data: "one" },
      { path: "/home/user/many/deep/2.txt", data: "two" },
    ]);
    assert.deepEqual(many.map((i) => i.path), ["/home/user/many/1.txt", "/home/user/many/deep/2.txt"]);
    const top = await sbx.files.list("/home/user/many");
    assert.deepEqual(top.map((e) => [e.name, e.type]).sort(), [["1.txt", "file"], ["deep", "dir"]]);
    const deep = await sbx.files.list("many", { depth: 2 });
    assert.deepEqual(deep.map((e) => e.path).sort(), ["/home/user/many/1.txt", "/home/user/many/deep", "/home/user/many/deep/2.txt"]);

    assert.equal(await sbx.files.exists("many/1.txt"), true);
    assert.equal(await sbx.files.exists("/home/user/nothing"), false);
    assert.equal(await sbx.files.makeDir("d1/d2"), true);
    assert.equal(await sbx.files.makeDir("d1/d2"), false);
    assert.equal((await sbx.files.getInfo("d1/d2")).type, "dir");

    const moved = await sbx.files.rename("many/1.txt", "/home/user/many/one.txt");
    assert.equal(moved.path, "/home/user/many/one.txt");
    assert.equal(await sbx.files.read("many/one.txt"), "one");
    await sbx.files.remove("many");
    assert.equal(await sbx.files.exists("many"), false);
    await sbx.files.remove("many"); // absent: no error, as envd's

    await assert.rejects(sbx.files.read("missing.txt"), FileNotFoundError);
    await assert.rejects(sbx.files.read("notes"), InvalidArgumentError);
    await assert.rejects(sbx.files.write("/etc/x", "no"), InvalidArgumentError);
    await assert.rejects(sbx.files.getInfo("/home/user/missing"), FileNotFoundError);
  } finally {
    await sbx.kill();
  }
});

test("sandboxes: connect, list by metadata, setTimeout, pause and resume keep the files, kill", { timeout: 180_000 }, async () => {
  const tag = `run-${Date.now()}`;
  const sbx = await Sandbox.create({ metadata: { suite: "lifecycle", tag }, timeoutMs: 120_000 });
  let killed = false;
  try {
    const listed = await Sandbox.list({ query: { metadata: { tag } } }).nextItems();
    assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId]);
    assert.equal(listed[0].state, "running");
    assert.equal((await Sandbox.list({ query: { metadata: { tag: "other" } } }).nextItems()).length, 0);

    const before = (await sbx.getInfo()).endAt;
    await sbx.setTimeout(600_000);
    const after = (await sbx.getInfo()).endAt;
    assert.ok(after.getTime() > before.getTime() + 400_000, `endAt ${before.toISOString()} → ${after.toISOString()}`);

    await sbx.files.write("keep.txt", "kept");
    assert.equal(await sbx.pause(), true);
    assert.equal((await sbx.getInfo()).state, "paused");
    assert.equal(await sbx.pause(), false); // already paused
    assert.equal(await sbx.isRunning(), false);
    const paused = await Sandbox.list({ query: { metadata: { tag }, state: ["paused"] } }).nextItems();
    assert.deepEqual(paused.map((s) => s.sandboxId), [sbx.sandboxId]);

    const back = await Sandbox.connect(sbx.sandboxId);
    assert.equal((await back.getInfo()).state, "running");
    assert.equal(await back.files.read("keep.txt"), "kept");
    assert.equal((await back.commands.run("cat keep.txt")).stdout, "kept");

    assert.equal(await back.kill(), true);
    killed = true;
    assert.equal(await Sandbox.kill(sbx.sandboxId), false);
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId), NotFoundError);
    await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError);
  } finally {
    if (!killed) await Sandbox.kill(sbx.sandboxId);
  }
});

test("timeouts: a sandbox ends at its timeout, or pauses with onTimeout pause", { timeout: 180_000 }, async () => {
  const ends = await Sandbox.create(warmTemplate, { timeoutMs: 3_000 });
  const pauses = await Sandbox.create(warmTemplate, { timeoutMs: 3_000, lifecycle: { onTimeout: "pause" } });
  try {
    await eventually("the sandbox killed at its timeout", 60_000, async () => {
      try {
        await Sandbox.getInfo(ends.sandboxId);
        return false;
      } catch (e) {
        if (e instanceof NotFoundError) return true;
        throw e;
      }
    });
    await eventually("the sandbox paused at its timeout", 60_000, async () => (await pauses.getInfo()).state === "paused");
    await assert.rejects(pauses.commands.run("true"), (e) => e instanceof SandboxError || e instanceof SandboxNotFoundError);
  } finally {
    await Sandbox.kill(pauses.sandboxId);
  }
});

test("replicas: a second front end finds the sandbox, its processes and its files, and both act in turn", { timeout: 120_000 }, async () => {
  const a = await Sandbox.create(warmTemplate);
  try {
    const ticks = await a.commands.run("for i in 1 2 3; do echo r$i; sleep 1; done", { background: true });
    const b = await Sandbox.connect(a.sandboxId, { apiUrl: secondUrl, sandboxUrl: secondUrl });
    assert.ok((await b.commands.list()).some((p) => p.pid === ticks.pid));
    // Each replica's calls act under the sandbox's one run: neither fences the other.
    for (let i = 0; i < 3; i++) {
      assert.equal((await b.commands.run(`echo b${i}`)).stdout, `b${i}\n`);
      await b.files.write(`from-b-${i}.txt`, `b${i}`);
      assert.equal(await a.files.read(`from-b-${i}.txt`), `b${i}`);
      assert.equal((await a.commands.run(`cat from-b-${i}.txt`)).stdout, `b${i}`);
    }
    assert.equal((await (await b.commands.connect(ticks.pid)).wait()).stdout, "r1\nr2\nr3\n");
    assert.equal((await ticks.wait()).exitCode, 0);
  } finally {
    await a.kill();
  }
});

test("keys: a wrong key is an auth error; another key's sandbox is not found", { timeout: 120_000 }, async () => {
  await assert.rejects(Sandbox.create({ apiKey: "e2b_not_a_key" }), AuthenticationError);
  await assert.rejects(Sandbox.list({ apiKey: "e2b_not_a_key" }).nextItems(), AuthenticationError);
  const mine = await Sandbox.create(warmTemplate);
  try {
    await assert.rejects(Sandbox.connect(mine.sandboxId, { apiKey: otherKey }), SandboxNotFoundError);
    await assert.rejects(Sandbox.getInfo(mine.sandboxId, { apiKey: otherKey }), NotFoundError);
    assert.equal(await Sandbox.kill(mine.sandboxId, { apiKey: otherKey }), false);
    const theirs = await Sandbox.list({ apiKey: otherKey }).nextItems();
    assert.ok(!theirs.some((s) => s.sandboxId === mine.sandboxId));
    // envd with the sandbox's id but another sandbox's token (a token is one sandbox's).
    const other = await Sandbox.create(warmTemplate, { apiKey: otherKey });
    try {
      const res = await fetch(`${api}/files?path=x`, { headers: { "E2b-Sandbox-Id": mine.sandboxId, "X-Access-Token": other.envdAccessToken ?? "" } });
      assert.equal(res.status, 401);
    } finally {
      await other.kill();
    }
    assert.equal((await mine.commands.run("echo still mine")).stdout, "still mine\n");
  } finally {
    await mine.kill();
  }
});

test("bad input: malformed JSON, unknown template, oversized uploads, a burst over the capacity", { timeout: 240_000 }, async () => {
  let r = await raw("POST", "/v2/sandboxes", "{");
  assert.equal(r.status, 400);
  assert.equal(r.body.code, 400);
  r = await raw("POST", "/v2/sandboxes", JSON.stringify({ timeout: "soon" }));
  assert.equal(r.status, 400);
  r = await raw("POST", "/v2/sandboxes", JSON.stringify({ timeout: 0 }));
  assert.equal(r.status, 400);
  r = await raw("POST", "/v2/sandboxes", JSON.stringify({ metadata: { "e2b.template": "x" } }));
  assert.equal(r.status, 400);
  await assert.rejects(Sandbox.create("no-such-template"), (e) => e instanceof SandboxError && /404/.test(e.message));

  const sbx = await Sandbox.create(warmTemplate);
  try {
    const big = new Uint8Array(1024 * 1024 + 1); // the profile's maxFileBytes is 1 MiB
    await assert.rejects(sbx.files.write("big.bin", big.buffer), (e) => e instanceof SandboxError);
    assert.equal(await sbx.files.exists("big.bin"), false);
    // A many-file write with one file too large writes none of them.
    await assert.rejects(sbx.files.write([{ path: "small.txt", data: "s" }, { path: "big.bin", data: big.buffer }]), SandboxError);
    assert.equal(await sbx.files.exists("small.txt"), false);
    const exact = new Uint8Array(1024 * 1024).fill(7);
    await sbx.files.write("exact.bin", exact.buffer);
    assert.deepEqual(await sbx.files.read("exact.bin", { format: "bytes" }), exact);
  } finally {
    await sbx.kill();
  }

  // 1,000 creates from one key against a template whose profile holds tinyCapacity
  // environments: that many succeed, every other one is 429, and nothing else exists.
  const burst = `burst-${Date.now()}`;
  const statuses = [];
  const body = JSON.stringify({ templateID: tinyTemplate, metadata: { burst } });
  for (let i = 0; i < 1000; i += 50) {
    const batch = await Promise.all(Array.from({ length: 50 }, () => raw("POST", "/v2/sandboxes", body)));
    statuses.push(...batch.map((b) => b.status));
  }
  const created = statuses.filter((s) => s === 201).length;
  const limited = statuses.filter((s) => s === 429).length;
  const counts = {};
  for (const s of statuses) counts[s] = (counts[s] ?? 0) + 1;
  assert.equal(created, tinyCapacity, `statuses: ${JSON.stringify(counts)}`);
  assert.equal(limited, 1000 - tinyCapacity);
  const listed = await Sandbox.list({ query: { metadata: { burst } } }).nextItems();
  assert.equal(listed.length, tinyCapacity);
  await assert.rejects(Sandbox.create(tinyTemplate), RateLimitError);
  for (const s of listed) assert.equal(await Sandbox.kill(s.sandboxId), true);
  // A listing reads the controller's cache: the kills show in it a moment later.
  await eventually("the killed sandboxes gone from the listing", 10_000, async () =>
    (await Sandbox.list({ query: { metadata: { burst } } }).nextItems()).length === 0);
});
