// An MCP server built on the official TypeScript SDK, for the
// execution-plan binding test: tools answering text, structured content and
// both; `record` appends the tag and value it is given, as JSON, to $SDK_RECORD.
import { appendFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/server";
import { StdioServerTransport } from "@modelcontextprotocol/server/stdio";
import * as z from "zod/v4";

const server = new McpServer({ name: "tssdk", version: "1.0.0" });
const text = (t) => ({ type: "text", text: t });

server.registerTool("text", { description: "text only" }, async () => ({
  content: [text("hello")],
}));
server.registerTool("two_texts", { description: "two text blocks" }, async () => ({
  content: [text("first"), text("second")],
}));
server.registerTool(
  "summary_and_data",
  { description: "a summary and an object", outputSchema: z.object({ total: z.number() }) },
  async () => ({ content: [text("the total is 5")], structuredContent: { total: 5 } }),
);
server.registerTool(
  "wrapped",
  { description: "a wrapped string", outputSchema: z.object({ result: z.string() }) },
  async () => ({ content: [text("hello")], structuredContent: { result: "hello" } }),
);
server.registerTool("broken", { description: "an error" }, async () => ({
  content: [text("it broke")],
  isError: true,
}));
server.registerTool(
  "record",
  { description: "records its value", inputSchema: z.object({ tag: z.string(), value: z.any() }) },
  async ({ tag, value }) => {
    appendFileSync(process.env.SDK_RECORD, JSON.stringify({ tag, value }) + "\n");
    return { content: [text("recorded")] };
  },
);

await server.connect(new StdioServerTransport());
