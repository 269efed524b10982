//! `planb-mcp demo-tools`: the small MCP server the demo's execution plan
//! calls, over stdio, so the demo needs no other program and no network.
//! Three tools, each a pure function of its arguments:
//!
//! - `count_words {text}`: how many words the text has (a number);
//! - `slugify {text}`: the text as a lowercase slug (`a-small-tool`);
//! - `release_note {title, points}`: a Markdown note with the title as its
//!   heading and each point as a bullet.

use std::process::ExitCode;
use std::sync::Arc;

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServiceExt};
use serde_json::{Map, Value, json};

#[derive(Clone, Debug)]
struct DemoTools;

fn schema(properties: Value, required: &[&str]) -> Arc<Map<String, Value>> {
    let value = json!({"type": "object", "properties": properties, "required": required});
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "count_words",
            "How many words the text has.",
            schema(json!({"text": {"type": "string"}}), &["text"]),
        ),
        Tool::new(
            "slugify",
            "The text as a lowercase slug: letters and digits, words joined by '-'.",
            schema(json!({"text": {"type": "string"}}), &["text"]),
        ),
        Tool::new(
            "release_note",
            "A Markdown release note: the title as its heading, each point a bullet.",
            schema(
                json!({"title": {"type": "string"}, "points": {"type": "array", "items": {"type": "string"}}}),
                &["title", "points"],
            ),
        ),
    ]
}

/// `text` as a slug: runs of letters and digits, lowercased, joined by `-`.
fn slug(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join("-")
}

fn note(args: &Map<String, Value>) -> String {
    let title = args
        .get("title")
        .and_then(Value::as_str)
        .unwrap_or("Release");
    let mut out = format!("# {title}\n\n");
    for point in args
        .get("points")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let point = point
            .as_str()
            .map_or_else(|| point.to_string(), str::to_owned);
        out.push_str(&format!("- {point}\n"));
    }
    out
}

/// The answer to a call of `tool` with `args`.
fn answer(tool: &str, args: &Map<String, Value>) -> Result<CallToolResult, ErrorData> {
    let text = || args.get("text").and_then(Value::as_str).unwrap_or_default();
    Ok(match tool {
        "count_words" => CallToolResult::success(vec![ContentBlock::text(
            text().split_whitespace().count().to_string(),
        )]),
        "slugify" => CallToolResult::success(vec![ContentBlock::text(slug(text()))]),
        "release_note" => CallToolResult::success(vec![ContentBlock::text(note(args))]),
        other => {
            return Err(ErrorData::invalid_params(format!("no tool {other}"), None));
        }
    })
}

impl ServerHandler for DemoTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_server_info(
            Implementation::new("planb-demo-tools", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        answer(&request.name, &args).map(Into::into)
    }
}

/// Serves the demo's tools on stdin and stdout until the client leaves.
pub fn serve() -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let service = DemoTools.serve(rmcp::transport::stdio()).await?;
        service.waiting().await?;
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tool_answers_from_its_arguments_alone() {
        assert_eq!(slug("A small  tool, v2!"), "a-small-tool-v2");
        let args = json!({"title": "Release tidy", "points": ["one", 2]});
        let args = args.as_object().cloned().unwrap_or_default();
        assert_eq!(note(&args), "# Release tidy\n\n- one\n- 2\n");
        let words = json!({"text": "three words here"});
        let result = answer("count_words", words.as_object().expect("object")).expect("answer");
        let text = result.content[0].as_text().map(|t| t.text.clone());
        assert_eq!(text.as_deref(), Some("3"));
        assert!(answer("nope", &Map::new()).is_err());
    }
}
