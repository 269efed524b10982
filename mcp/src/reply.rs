//! A tool's result: its JSON value, and the same value as text with
//! nothing in it a terminal acts on (C1 control characters escaped).

use rmcp::model::CallToolResult;
use serde_json::Value;

/// A result carrying `value`, its text shown safely.
pub(crate) fn structured(value: Value) -> CallToolResult {
    shown(CallToolResult::structured(value))
}

/// A refusal carrying `value`, its text shown safely.
pub(crate) fn structured_error(value: Value) -> CallToolResult {
    shown(CallToolResult::structured_error(value))
}

fn shown(mut result: CallToolResult) -> CallToolResult {
    if let Some(value) = &result.structured_content {
        let text = planb_core::text::json_visible(value.to_string());
        result.content = vec![rmcp::model::ContentBlock::text(text)];
    }
    result
}
