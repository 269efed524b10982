//! The value a tool's answer binds to a step's `result_variable` (and, for
//! a task's tool step, the artifact it makes).
//!
//! - An error answer (`isError: true`) binds nothing: the step fails with
//!   its text.
//! - A wrapped primitive: servers built on the Python SDK (FastMCP) and the
//!   TypeScript SDK's newer versions send a tool's string, number, list or
//!   null as structured content `{"result": value}`, with an output schema
//!   whose only property is `result`. The value is `value`, not the
//!   wrapper: `${var}` in a string parameter gets the string.
//! - Other structured content (an object result) is the value as sent.
//! - Text alone: the text blocks joined by newlines, read as JSON when it is
//!   JSON, else the text.
//! - No text and no structured content: the content blocks as JSON.
//!
//! Without structured content these are the rules mcp-cli binds by; with
//! it, mcp-cli binds the text while this binds the structured value, which
//! the protocol defines as the machine-readable result (the SDKs send the
//! same value as JSON text beside it for objects).

use rmcp::model::CallToolResult;
use serde_json::Value;

/// An error answer (`isError: true`): what the step fails with.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum ErrorAnswer {
    /// Its text blocks, joined by newlines.
    #[error("{0}")]
    Text(String),
    /// It holds no text.
    #[error("Tool execution failed")]
    Silent,
}

/// Whether an output schema is the wrapper of a primitive result: an
/// object schema whose one property is `result`.
pub fn wraps_primitive(output_schema: Option<&serde_json::Map<String, Value>>) -> bool {
    let Some(schema) = output_schema else {
        return false;
    };
    schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| p.len() == 1 && p.contains_key("result"))
}

/// The value `result` binds; `wrapped` says the tool's output schema is the
/// primitive wrapper ([`wraps_primitive`]). An error result is its text.
pub fn bound_value(result: &CallToolResult, wrapped: bool) -> Result<Value, ErrorAnswer> {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    if result.is_error == Some(true) {
        let text = texts.join("\n");
        return Err(if text.trim().is_empty() {
            ErrorAnswer::Silent
        } else {
            ErrorAnswer::Text(text)
        });
    }
    if let Some(structured) = &result.structured_content {
        if wrapped
            && let Value::Object(fields) = structured
            && fields.len() == 1
            && let Some(value) = fields.get("result")
        {
            return Ok(value.clone());
        }
        return Ok(structured.clone());
    }
    if !texts.is_empty() {
        let text = texts.join("\n");
        return Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)));
    }
    Ok(serde_json::to_value(&result.content).unwrap_or(Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;
    use serde_json::json;

    fn text(parts: &[&str]) -> CallToolResult {
        CallToolResult::success(parts.iter().map(|t| ContentBlock::text(*t)).collect())
    }

    fn with(mut result: CallToolResult, structured: Value) -> CallToolResult {
        result.structured_content = Some(structured);
        result
    }

    #[test]
    fn every_kind_of_answer_binds_its_value_not_an_envelope() {
        let wrapper = json!({"type": "object", "properties": {"result": {"type": "string"}}});
        let wrapped = wraps_primitive(wrapper.as_object());
        assert!(wrapped);
        let object = json!({"type": "object", "properties": {"result": {}, "more": {}}});
        assert!(!wraps_primitive(object.as_object()));
        assert!(!wraps_primitive(None));
        let cases = [
            (text(&["hello"]), false, json!("hello")),
            (text(&["{\"a\": 1}"]), false, json!({"a": 1})),
            (text(&["42"]), false, json!(42)),
            (text(&["first", "second"]), false, json!("first\nsecond")),
            (
                with(text(&["hello"]), json!({"result": "hello"})),
                true,
                json!("hello"),
            ),
            (
                with(text(&["[1, 2]"]), json!({"result": "[1, 2]"})),
                true,
                json!("[1, 2]"),
            ),
            (
                with(text(&["1", "2"]), json!({"result": [1, 2]})),
                true,
                json!([1, 2]),
            ),
            (with(text(&[]), json!({"result": null})), true, Value::Null),
            // Without the wrapper's schema, `result` is a field like any.
            (
                with(text(&["x"]), json!({"result": "x"})),
                false,
                json!({"result": "x"}),
            ),
            (
                with(text(&["{}"]), json!({"a": 1, "b": 2})),
                false,
                json!({"a": 1, "b": 2}),
            ),
        ];
        for (result, wrapped, expected) in cases {
            assert_eq!(bound_value(&result, wrapped), Ok(expected), "{result:?}");
        }
        let image = CallToolResult::success(vec![ContentBlock::image("aGk=", "image/png")]);
        let bound = bound_value(&image, false).expect("blocks");
        assert_eq!(bound[0]["type"], "image");
        let failed = CallToolResult::error(vec![ContentBlock::text("boom")]);
        assert_eq!(
            bound_value(&failed, true),
            Err(ErrorAnswer::Text("boom".into()))
        );
        let silent = CallToolResult::error(vec![]);
        assert_eq!(bound_value(&silent, false), Err(ErrorAnswer::Silent));
    }
}
