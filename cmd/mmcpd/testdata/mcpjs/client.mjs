// client.mjs drives mmcpd with the official TypeScript MCP client, as an
// MCP host (Claude Desktop, an IDE) would, and prints what it saw as one
// JSON object for the Go test to check.
//
//   node client.mjs http URL TOKEN     streamable HTTP to the daemon's /mcp
//   node client.mjs stdio MMCPD        mmcpd mcp as a child process (its
//                                      environment names the daemon)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [mode, target, token] = process.argv.slice(2);
const out = { questions: [] };

function transport(withToken) {
  if (mode === "http") {
    const headers = withToken ? { Authorization: `Bearer ${token}` } : {};
    return new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers } });
  }
  return new StdioClientTransport({ command: target, args: ["mcp"], env: process.env, stderr: "inherit" });
}

function newClient() {
  const c = new Client({ name: "mmcpd-js-test", version: "1.0.0" }, { capabilities: { elicitation: {} } });
  // The user's answers, in order: accept the first approval, decline the next.
  const answers = ["accept", "decline"];
  c.setRequestHandler(ElicitRequestSchema, async (req) => {
    out.questions.push(req.params.message);
    return { action: answers.shift() ?? "cancel", content: {} };
  });
  return c;
}

function text(res) {
  return (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

if (mode === "http") {
  try {
    await newClient().connect(transport(false));
    out.unauthorized = "connected";
  } catch (e) {
    out.unauthorized = String(e?.message ?? e);
  }
}

const client = newClient();
await client.connect(transport(true));
out.server = client.getServerVersion()?.name;
out.tools = (await client.listTools()).tools.map((t) => ({ name: t.name, schema: t.inputSchema, description: t.description }));
const echo = await client.callTool({ name: "works_echo", arguments: { text: "from node" } });
out.echo = { text: text(echo), isError: !!echo.isError };
const ask = await client.callTool({ name: "ask", arguments: { message: "hello from node" } });
out.ask = { text: text(ask), isError: !!ask.isError, structured: ask.structuredContent };
const accepted = await client.callTool({ name: "guard_remove", arguments: { text: "accepted in node" } });
out.accepted = { text: text(accepted), isError: !!accepted.isError };
const declined = await client.callTool({ name: "guard_remove", arguments: { text: "declined in node" } });
out.declined = { text: text(declined), isError: !!declined.isError };
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
