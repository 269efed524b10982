//! Small helpers shared by the validators and JSON writers: path building,
//! number output and echoing rejected input.

use serde_json::Value;

/// Largest integer an IEEE double holds exactly (2^53); beyond it an integral
/// `f64` is printed as a float so no digits are invented.
const EXACT_INTEGER_MAX: f64 = 9_007_199_254_740_992.0;

/// Writes a number the way JavaScript's `JSON.stringify` does for the values
/// we store: integral values without a fraction (`4`, not `4.0`).
///
/// Non-finite values have no JSON form and become `null`; validation keeps
/// them out of specs and answers, so only hand-built values can get there.
pub(crate) fn number_to_json(number: f64) -> Value {
    if number.fract() == 0.0 && number.abs() <= EXACT_INTEGER_MAX {
        // The range check above makes the cast exact.
        Value::from(number as i64)
    } else {
        serde_json::Number::from_f64(number).map_or(Value::Null, Value::Number)
    }
}

/// Longest part of a rejected input echoed back in an error message, so an
/// error about a huge argument stays readable.
const ECHO_CHARS_MAX: usize = 64;

/// Shortens `input` for echoing in an error message.
pub(crate) fn echo(input: &str) -> String {
    match input.char_indices().nth(ECHO_CHARS_MAX) {
        Some((end, _)) => format!("{}…", &input[..end]),
        None => input.to_owned(),
    }
}

/// `parent.key`, or just `key` at the root.
pub(crate) fn field_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

/// `parent[index]`.
pub(crate) fn index_path(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// The JSON type of a value, for "must be a string (got number)" messages.
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Serializes a SHA-256 as lowercase hex.
pub(crate) fn hex<S: serde::Serializer>(
    bytes: &[u8; 32],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&crate::hash::ContentHash(*bytes).to_hex())
}

/// [`hex`] for an optional hash; `None` is `null`.
pub(crate) fn hex_option<S: serde::Serializer>(
    bytes: &Option<[u8; 32]>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match bytes {
        Some(bytes) => hex(bytes, serializer),
        None => serializer.serialize_none(),
    }
}

/// Serializes bytes by their count, for a rendering that names a blob
/// without carrying it.
pub(crate) fn byte_count<S: serde::Serializer>(
    bytes: &[u8],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(bytes.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integral_numbers_print_without_fraction() {
        assert_eq!(number_to_json(4.0).to_string(), "4");
        assert_eq!(number_to_json(-0.0).to_string(), "0");
        assert_eq!(number_to_json(2.5).to_string(), "2.5");
        assert_eq!(number_to_json(1e300).to_string(), "1e+300");
        assert_eq!(number_to_json(f64::NAN), Value::Null);
    }
}
