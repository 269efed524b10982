//! `${var}` references in a step's arguments (the rules of docs/execution-plans.md).
//!
//! - A string that is exactly one `${path}` becomes the value itself, of any
//!   JSON type (`"${users}"` → `[{"id": 1}]`).
//! - `${a.b.c}` walks into objects.
//! - A string with text around its references stays a string: each
//!   reference is replaced by the value's text (a string as it is, anything
//!   else as compact JSON).
//! - A reference that does not resolve is left as written, so the tool sees
//!   `${missing}` rather than a silently empty value.

use serde_json::{Map, Value};

/// Every reference in `text`: `(start, end, path)` with `start..end` the
/// whole `${path}`.
fn references(text: &str) -> Vec<(usize, usize, &str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(offset) = text[from..].find("${") {
        let start = from + offset;
        let Some(close) = text[start + 2..].find('}') else {
            break;
        };
        let end = start + 2 + close + 1;
        let path = &text[start + 2..end - 1];
        if !path.is_empty() {
            out.push((start, end, path));
        }
        from = end;
    }
    out
}

fn lookup<'v>(path: &str, variables: &'v Map<String, Value>) -> Option<&'v Value> {
    let mut parts = path.split('.');
    let mut current = variables.get(parts.next()?)?;
    for part in parts {
        current = current.as_object()?.get(part)?;
    }
    Some(current)
}

fn resolve_text(text: &str, variables: &Map<String, Value>) -> Value {
    let found = references(text);
    if let [(0, end, path)] = found.as_slice()
        && *end == text.len()
    {
        return lookup(path, variables).map_or_else(|| Value::from(text), Clone::clone);
    }
    if found.is_empty() {
        return Value::from(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for (start, end, path) in found {
        out.push_str(&text[copied..start]);
        match lookup(path, variables) {
            Some(Value::String(s)) => out.push_str(s),
            Some(other) => out.push_str(&other.to_string()),
            None => out.push_str(&text[start..end]),
        }
        copied = end;
    }
    out.push_str(&text[copied..]);
    Value::from(out)
}

/// `value` with every resolvable reference replaced, recursing into
/// objects and arrays (keys are left alone).
pub fn resolve(value: &Value, variables: &Map<String, Value>) -> Value {
    match value {
        Value::String(text) => resolve_text(text, variables),
        Value::Array(items) => items.iter().map(|v| resolve(v, variables)).collect(),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), resolve(v, variables)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A step's arguments with every resolvable reference replaced.
pub fn resolve_args(
    args: &Map<String, Value>,
    variables: &Map<String, Value>,
) -> Map<String, Value> {
    args.iter()
        .map(|(k, v)| (k.clone(), resolve(v, variables)))
        .collect()
}

/// The variable names (the first part of each path) a step's arguments
/// refer to.
pub fn referenced_names(args: &Map<String, Value>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut visit = |text: &str| {
        for (_, _, path) in references(text) {
            let name = path.split('.').next().unwrap_or(path);
            if !seen.contains(name) {
                seen.insert(name.to_owned());
                out.push(name.to_owned());
            }
        }
    };
    let mut stack: Vec<&Value> = args.values().collect();
    while let Some(at) = stack.pop() {
        match at {
            Value::String(text) => visit(text),
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    out
}

/// An argument written as exactly one `${path}` whose value is not a
/// string: the tool is given the value with its JSON type, which a tool
/// expecting text refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypedArg {
    /// The argument's name.
    pub arg: String,
    /// The reference's path (`n`, `point.x`).
    pub path: String,
    /// The value's JSON type: `number`, `boolean`, `object`, `array`, `null`.
    pub kind: &'static str,
}

impl TypedArg {
    /// One line: what was passed and how to pass it as text instead.
    pub fn hint(&self) -> String {
        format!(
            "argument {arg:?} was \"${{{path}}}\", which passes {path} as {a} {kind}, not text; \
             to pass it as text write it with other text, e.g. \"{arg} = ${{{path}}}\"",
            arg = self.arg,
            path = self.path,
            a = if self.kind == "array" { "an" } else { "a" },
            kind = self.kind,
        )
    }
}

/// The path of `text` when it is exactly one `${path}`: the value is
/// passed with its own JSON type.
pub fn whole_reference(text: &str) -> Option<&str> {
    match references(text).as_slice() {
        [(0, end, path)] if *end == text.len() => Some(path),
        _ => None,
    }
}

/// The arguments of `args` (as written) that are exactly one reference
/// resolving, with `variables`, to a value that is not a string.
pub fn typed_args(args: &Map<String, Value>, variables: &Map<String, Value>) -> Vec<TypedArg> {
    let mut out = Vec::new();
    for (arg, written) in args {
        let Some(path) = written.as_str().and_then(whole_reference) else {
            continue;
        };
        match lookup(path, variables) {
            None | Some(Value::String(_)) => {}
            Some(value) => out.push(TypedArg {
                arg: arg.clone(),
                path: path.to_owned(),
                kind: crate::json::type_name(value),
            }),
        }
    }
    out
}
