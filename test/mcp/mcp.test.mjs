// execctl mcp, driven over stdio by the TypeScript MCP SDK's client — what an agent host
// (Claude Desktop, an IDE, an agent framework) runs. Started by test/integration's
// TestMCPWithTheTypeScriptClient against the local stack, which passes the connection in
// EXECPLANE_* variables and the binary in EXECCTL.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const execctl = process.env.EXECCTL;

function required(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this through TestMCPWithTheTypeScriptClient`);
  return v;
}

// call runs a tool that must succeed and returns its structured output.
async function call(client, name, args, options) {
  const res = await client.callTool({ name, arguments: args }, undefined, options);
  assert.ok(!res.isError, `${name}: ${JSON.stringify(res.content)}`);
  return res.structuredContent;
}

// refusal runs a tool that must fail and returns its error text.
async function refusal(client, name, args) {
  const res = await client.callTool({ name, arguments: args });
  assert.equal(res.isError, true, `${name} succeeded: ${JSON.stringify(res.structuredContent)}`);
  assert.equal(res.content.length, 1);
  return res.content[0].text;
}

test("an agent session through execctl mcp", { timeout: 240_000 }, async () => {
  required("EXECPLANE_ADDRESS");
  required("EXECPLANE_BINDING");
  const transport = new StdioClientTransport({ command: required("EXECCTL"), args: ["mcp"], env: { ...process.env }, stderr: "inherit" });
  const client = new Client({ name: "execplane-mcp-test", version: "1.0.0" });
  await client.connect(transport);
  try {
    // The tools, each with a typed input schema.
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name).sort();
    assert.deepEqual(names, ["cancel_command", "command_status", "delete_environment", "ensure_environment", "glob", "grep", "list_directory",
      "read_file", "remove", "rename", "run_command", "snapshot_workspace", "stat", "write_file"]);
    const write = tools.find((t) => t.name === "write_file");
    assert.deepEqual(write.inputSchema.required, ["path", "content"]);
    assert.equal(write.inputSchema.properties.if_version.type, "string");

    const env = await call(client, "ensure_environment", {});
    assert.equal(env.state, "READY");
    assert.equal(env.ready, true);
    assert.ok(env.epoch >= 1, `epoch ${env.epoch}`);

    // Write a file, run a command reading it (its output streamed as progress), read the result.
    const written = await call(client, "write_file", { path: "notes/in.txt", content: "hello mcp\n", create_parents: true });
    assert.equal(written.size, 10);
    assert.ok(written.version, "a written file has a version");
    const progress = [];
    const ran = await call(client, "run_command", { command: "tr a-z A-Z < notes/in.txt | tee notes/out.txt; sleep 2; echo done >&2" },
      { onprogress: (p) => progress.push(p) });
    assert.equal(ran.state, "SUCCEEDED");
    assert.equal(ran.exit_code, 0);
    assert.equal(ran.stdout.text, "HELLO MCP\n");
    assert.equal(ran.stderr.text, "done\n");
    // The output came as progress while the command ran: its first line two seconds before
    // the end. The last chunk's notification may be lost — this client handles a
    // notification a microtask after the response it was read with, and drops progress for
    // a request already answered (seen in CI) — so progress is the output or all of it but
    // that chunk; the result always carries the whole output.
    const streamed = progress.map((p) => p.message).join("");
    assert.ok(["HELLO MCP\n", "HELLO MCP\ndone\n"].includes(streamed), `progress: ${JSON.stringify(progress)}`);
    const read = await call(client, "read_file", { path: "notes/out.txt" });
    assert.deepEqual({ content: read.content, encoding: read.encoding, more: read.more }, { content: "HELLO MCP\n", encoding: "utf-8", more: false });

    // Compare-and-swap: a write against the version read succeeds once; the stale version is refused.
    const v2 = await call(client, "write_file", { path: "notes/in.txt", content: "second\n", if_version: written.version });
    assert.notEqual(v2.version, written.version);
    const stale = await refusal(client, "write_file", { path: "notes/in.txt", content: "lost update\n", if_version: written.version });
    assert.match(stale, /^VERSION_MISMATCH: /);
    assert.equal((await call(client, "read_file", { path: "notes/in.txt" })).content, "second\n");

    // Refusals as tool errors carrying the API's reason.
    assert.match(await refusal(client, "read_file", { path: "notes/absent.txt" }), /^NOT_FOUND: /);
    assert.match(await refusal(client, "read_file", { path: "../etc/passwd" }), /^(PATH_ESCAPE|INVALID_ARGUMENT): /);
    assert.match(await refusal(client, "run_command", { command: "true", argv: ["true"] }), /^INVALID_ARGUMENT: /);
    assert.match(await refusal(client, "write_file", { path: "x", content: "%%%", encoding: "base64" }), /^INVALID_ARGUMENT: /);

    // A failing command is a result, not a refusal.
    const failed = await call(client, "run_command", { argv: ["sh", "-c", "echo oops >&2; exit 3"] });
    assert.deepEqual({ state: failed.state, code: failed.exit_code, stderr: failed.stderr.text }, { state: "FAILED", code: 3, stderr: "oops\n" });

    // Files: list, stat, glob, grep, rename, remove.
    const listed = await call(client, "list_directory", { path: "notes" });
    assert.deepEqual(listed.entries.map((e) => e.path).sort(), ["in.txt", "out.txt"]);
    assert.equal((await call(client, "stat", { path: "notes" })).type, "DIRECTORY");
    assert.deepEqual((await call(client, "glob", { pattern: "**/*.txt" })).paths, ["notes/in.txt", "notes/out.txt"]);
    const grep = await call(client, "grep", { pattern: "hello", ignore_case: true });
    assert.deepEqual(grep.matches, [{ path: "notes/out.txt", line: 1, text: "HELLO MCP" }]);
    await call(client, "rename", { from: "notes/out.txt", to: "notes/upper.txt" });
    assert.match(await refusal(client, "rename", { from: "notes/upper.txt", to: "notes/in.txt" }), /^ALREADY_EXISTS: /);
    assert.equal((await call(client, "remove", { path: "notes", recursive: true })).removed, 3);

    // A detached command runs on; command_status waits for it and pages its output.
    const started = await call(client, "run_command", { command: "echo started; sleep 1; echo done", detach: true, command_id: "mcp-detached-1" });
    assert.equal(started.command_id, "mcp-detached-1");
    assert.equal(started.state, "RUNNING");
    const status = await call(client, "command_status", { command_id: "mcp-detached-1", wait_seconds: 30 });
    assert.deepEqual({ state: status.command.state, code: status.command.exit_code, out: status.stdout_text, next: status.next_stdout_offset },
      { state: "SUCCEEDED", code: 0, out: "started\ndone\n", next: 13 });
    const rest = await call(client, "command_status", { command_id: "mcp-detached-1", stdout_offset: 8 });
    assert.equal(rest.stdout_text, "done\n");
  } finally {
    await client.close(); // ends execctl mcp, which releases the run claim
  }
});

// The same server over streamable HTTP: execctl mcp --http on a loopback port (0: any),
// the URL read from its stderr, the bearer token from the file it wrote; a request without
// the token is refused 401; SIGTERM ends it and releases the run claim.
test("execctl mcp over streamable HTTP", { timeout: 120_000 }, async () => {
  const tokenFile = join(mkdtempSync(join(tmpdir(), "execctl-mcp-")), "token");
  const server = spawn(required("EXECCTL"), ["mcp", "--http", "127.0.0.1:0", "--token-file", tokenFile,
    "--binding", process.env.EXECPLANE_BINDING + "-http"],
    { env: { ...process.env }, stdio: ["ignore", "inherit", "pipe"] });
  try {
    let stderr = "";
    const url = await new Promise((resolve, reject) => {
      server.stderr.on("data", (b) => {
        stderr += b;
        const m = stderr.match(/serving (http:\/\/\S+\/mcp)/);
        if (m) resolve(m[1]);
      });
      server.on("exit", (code) => reject(new Error(`execctl mcp exited (${code}): ${stderr}`)));
    });
    const token = readFileSync(tokenFile, "utf8").trim();
    const anonymous = await fetch(url, { method: "POST", headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "1" } } }) });
    assert.equal(anonymous.status, 401, "a request without the bearer token is refused");
    const client = new Client({ name: "execplane-mcp-http-test", version: "1.0.0" });
    await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
    try {
      assert.equal((await client.listTools()).tools.length, 14);
      assert.equal((await call(client, "ensure_environment", {})).state, "READY");
      await call(client, "write_file", { path: "over-http.txt", content: "streamable\n" });
      const ran = await call(client, "run_command", { argv: ["cat", "over-http.txt"] });
      assert.equal(ran.stdout.text, "streamable\n");
      assert.match(await refusal(client, "stat", { path: "absent" }), /^NOT_FOUND: /);
    } finally {
      await client.close();
    }
  } finally {
    server.kill("SIGTERM");
    if (server.exitCode === null) await once(server, "exit");
  }
  assert.equal(server.exitCode, 0, "execctl mcp ended cleanly on SIGTERM");
});
