#!/usr/bin/env node
// A tiny MCP stdio server for penguin's failure tests, without dependencies.
//   node fixture-server.mjs silent   never answers anything (a handshake that times out)
//   node fixture-server.mjs tools    answers; its tools:
//     crash    the process exits (code 3) in the middle of the call
//     fail     an error result (isError) with a message
//     slow     answers after {ms} milliseconds
//     pid      answers with the server's process id
import { createInterface } from "node:readline";

const mode = process.argv[2] ?? "tools";
const send = (msg) => process.stdout.write(JSON.stringify(msg) + "\n");
const tools = [
  { name: "crash", description: "Exits mid-call.", inputSchema: { type: "object" } },
  { name: "fail", description: "Returns an error result.", inputSchema: { type: "object" } },
  {
    name: "slow",
    description: "Answers after ms milliseconds.",
    inputSchema: { type: "object", properties: { ms: { type: "number" } } },
    annotations: { readOnlyHint: true },
  },
  { name: "pid", description: "The server's pid.", inputSchema: { type: "object" } },
];

createInterface({ input: process.stdin }).on("line", (line) => {
  if (mode === "silent") return;
  const msg = JSON.parse(line);
  if (msg.id === undefined) return;
  const reply = (result) => send({ jsonrpc: "2.0", id: msg.id, result });
  switch (msg.method) {
    case "initialize":
      return reply({
        protocolVersion: msg.params.protocolVersion,
        capabilities: { tools: {} },
        serverInfo: { name: "penguin-fixture", version: "1.0.0" },
      });
    case "tools/list":
      return reply({ tools });
    case "tools/call": {
      const name = msg.params.name;
      if (name === "crash") {
        process.stderr.write("fixture: crashing on purpose\n");
        process.exit(3);
      }
      if (name === "fail") {
        return reply({ content: [{ type: "text", text: "the fixture refused: bad input" }], isError: true });
      }
      if (name === "slow") {
        const ms = msg.params.arguments?.ms ?? 1000;
        setTimeout(() => reply({ content: [{ type: "text", text: `slept ${ms} ms` }] }), ms);
        return;
      }
      if (name === "pid") return reply({ content: [{ type: "text", text: String(process.pid) }] });
      return send({ jsonrpc: "2.0", id: msg.id, error: { code: -32602, message: `unknown tool ${name}` } });
    }
    default:
      return send({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "method not found" } });
  }
});
