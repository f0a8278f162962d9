// A stock MCP host's client: the official TypeScript SDK (1.x) against a gated hatp server.
//
// Usage: node client.mjs '<config JSON>'
//   config: {
//     "connect": {"http": URL} | {"stdio": {"command", "args", "cwd"?, "env"?}},
//     "scenario": "basic" | "changed",
//     "args": {...},          the gated call's arguments (charge_card)
//     "otherArgs": {...},     another call of the same tool ("basic" only)
//     "plainArgs": {...},     the plain tool's arguments (card_balance)
//     "pollSeconds": 60       how long to keep calling again while people decide
//   }
//
// It declares no extension (a stock client), calls tools as the scenario says and prints
// one JSON line per thing it saw on stdout. The test (tests/mcp/test_ts_client.py) judges
// them; this script only calls, and polls (calls the same tool again with the same
// arguments) until the result changes or the bound passes.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const POLL_INTERVAL_MS = 250;

function say(event, fields) {
  process.stdout.write(`${JSON.stringify({ event, ...fields })}\n`);
}

function transportFor(connect) {
  if (connect.http) {
    return new StreamableHTTPClientTransport(new URL(connect.http));
  }
  const { command, args = [], cwd, env } = connect.stdio;
  return new StdioClientTransport({
    command,
    args,
    cwd,
    env: env ? { ...process.env, ...env } : undefined,
    stderr: "inherit",
  });
}

// The protocol version the client and server agreed on: the SDK hands it to the
// transport (HTTP transports send it as a header); record it on the way.
function recordProtocolVersion(transport) {
  const seen = { version: undefined };
  const original = transport.setProtocolVersion?.bind(transport);
  transport.setProtocolVersion = (version) => {
    seen.version = version;
    original?.(version);
  };
  return seen;
}

// What a refusal result says, to tell when a polled result has changed: its code and
// the ask it waits on.
function refusalOf(result) {
  const error = result.structuredContent?.error;
  if (!result.isError || !error) {
    return null;
  }
  return { code: error.code, askId: error.data?.ask?.askId };
}

async function call(client, step, name, args) {
  const result = await client.callTool({ name, arguments: args });
  say("result", { step, tool: name, arguments: args, result });
  return result;
}

// Call again with the same arguments until the result is not the same refusal as
// `first`: no refusal, another code or another ask, or one that reports what became
// of an earlier approval.
async function pollUntilChanged(client, step, name, args, first, seconds) {
  const before = JSON.stringify(refusalOf(first));
  const deadline = Date.now() + seconds * 1000;
  let calls = 0;
  while (Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, POLL_INTERVAL_MS));
    const result = await client.callTool({ name, arguments: args });
    calls += 1;
    const earlier = result.structuredContent?.error?.data?.earlier;
    if (earlier || JSON.stringify(refusalOf(result)) !== before) {
      say("result", { step, tool: name, arguments: args, result, calls });
      return result;
    }
  }
  say("timeout", { step, tool: name, seconds, calls });
  throw new Error(`${step}: ${name} still answered the same after ${seconds} s`);
}

async function listTools(client, step) {
  const { tools } = await client.listTools();
  say("tools", { step, tools });
}

const SCENARIOS = {
  // Plain tool; gated call refused; called again until people approved and it ran;
  // the same call again; another call; the plain tool again.
  async basic(client, config) {
    const { args, otherArgs, plainArgs, pollSeconds } = config;
    await listTools(client, "listed");
    await call(client, "plain-before", "card_balance", plainArgs);
    const refused = await call(client, "gated", "charge_card", args);
    await pollUntilChanged(client, "approved", "charge_card", args, refused, pollSeconds);
    await call(client, "replay", "charge_card", args);
    await call(client, "other", "charge_card", otherArgs);
    await call(client, "plain-after", "card_balance", plainArgs);
  },
  // Gated call refused; the listing changes; called again until the result changes
  // (the approval given for the old listing is reported), then until the new ask ran.
  async changed(client, config) {
    const { args, pollSeconds } = config;
    await listTools(client, "listed");
    const refused = await call(client, "gated", "charge_card", args);
    await call(client, "edit", "edit_listing", { description: config.description });
    await listTools(client, "relisted");
    const changed = await pollUntilChanged(client, "changed", "charge_card", args, refused, pollSeconds);
    await pollUntilChanged(client, "approved", "charge_card", args, changed, pollSeconds);
  },
};

async function main() {
  const config = JSON.parse(process.argv[2]);
  const scenario = SCENARIOS[config.scenario];
  if (!scenario) {
    throw new Error(`no scenario ${config.scenario}: one of ${Object.keys(SCENARIOS)}`);
  }
  const transport = transportFor(config.connect);
  const negotiated = recordProtocolVersion(transport);
  const client = new Client({ name: "hatp-ts-test", version: "1.0.0" });
  await client.connect(transport);
  say("connected", {
    protocolVersion: negotiated.version,
    serverCapabilities: client.getServerCapabilities(),
    serverVersion: client.getServerVersion(),
  });
  try {
    await scenario(client, config);
    say("done", {});
  } finally {
    await client.close();
  }
}

main().catch((error) => {
  say("failed", { message: String(error?.stack ?? error) });
  process.exitCode = 1;
});
