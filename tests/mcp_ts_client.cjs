// `storyd mcp` driven by the TypeScript SDK's client (protocol 2025-11-25), as the MCP
// Inspector and TypeScript agents drive it: list the tools, call `resume` (the SDK checks
// its structuredContent against the tool's outputSchema with ajv), list the resources,
// then wait for `notifications/resources/list_changed` through the client's own
// `listChanged` option, which the SDK honours only when the server declares
// `resources.listChanged`.
//
// usage: node mcp_ts_client.cjs NODE_PREFIX RESUME_ARGUMENTS_JSON COMMAND [ARG...]
// Prints one JSON line when ready (then the test changes a state file) and one when the
// resource list changed; exits 2 when no change is heard within 30 s.

const path = require("node:path");
const { createRequire } = require("node:module");

const [prefix, resumeArguments, command, ...args] = process.argv.slice(2);
const need = createRequire(path.join(prefix, "package.json"));
const { Client } = need("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = need("@modelcontextprotocol/sdk/client/stdio.js");
const { LATEST_PROTOCOL_VERSION } = need("@modelcontextprotocol/sdk/types.js");

function say(line) {
  process.stdout.write(JSON.stringify(line) + "\n");
}

async function main() {
  let heard;
  const changed = new Promise((resolve) => { heard = resolve; });
  const client = new Client({ name: "storyd-tests", version: "0" }, {
    listChanged: { resources: { onChanged: (error, items) => heard({ error, items }) } },
  });
  const transport = new StdioClientTransport({
    command, args, env: process.env, cwd: process.cwd(), stderr: "inherit",
  });
  await client.connect(transport);
  const tools = await client.listTools();
  const resumed = await client.callTool({ name: "resume", arguments: JSON.parse(resumeArguments) });
  const resources = await client.listResources();
  say({
    step: "ready",
    protocol: LATEST_PROTOCOL_VERSION,
    capabilities: client.getServerCapabilities(),
    tools: tools.tools.map((t) => ({ name: t.name, outputSchema: t.outputSchema ?? null })),
    resume: resumed,
    resources: resources.resources.map((r) => r.uri),
  });
  const timer = setTimeout(() => { say({ step: "timeout" }); process.exit(2); }, 30000);
  const { error, items } = await changed;
  clearTimeout(timer);
  say({
    step: "changed",
    error: error ? String(error) : null,
    resources: (items || []).map((r) => r.uri),
  });
  await client.close();
}

main().catch((error) => {
  say({ step: "error", error: String(error && error.stack ? error.stack : error) });
  process.exit(1);
});
