//! JSON-RPC messages read without parsing them whole: the top-level `"id"`
//! of a message, found even in one cut short or broken after it (a relay
//! answering a line over its limit, a server answering a line it could not
//! parse).

use serde_json::Value;

/// The top-level `"id"` of the JSON-RPC message `bytes` (a string or a
/// number), read without parsing the rest: found even in a message that is
/// cut short or broken after it.
pub fn top_level_id(bytes: &[u8]) -> Option<Value> {
    let mut scanner = IdScanner::default();
    scanner.feed(bytes);
    scanner.id()
}

/// Finds the top-level `"id"` of a JSON object fed in pieces, without
/// keeping the rest.
#[derive(Debug, Default)]
pub struct IdScanner {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// After `{` or `,` at the top level: the next string is a key.
    expect_key: bool,
    /// The top-level key being read (its first bytes).
    key: Option<Vec<u8>>,
    /// A top-level `method` key was read: the message is a request or a
    /// notification, not an answer.
    method: bool,
    /// A top-level `result`, `error` or `method` key was read: what the
    /// message is, is known.
    kind_known: bool,
    /// The key just read was `id` and `:` has not come yet, or has.
    id_key: bool,
    id_colon: bool,
    /// The id's text as read so far; `found` once it ended.
    value: Option<Vec<u8>>,
    found: Option<Vec<u8>>,
    /// The id was not one a request can have (too long).
    spoiled: bool,
}

/// Longer ids are not request ids this client makes.
const ID_BYTES_MAX: usize = 128;

impl IdScanner {
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if (self.found.is_some() && self.kind_known) || self.spoiled {
                return;
            }
            if self.value.is_some() {
                self.value_byte(b);
            } else if self.in_string {
                self.string_byte(b);
            } else {
                self.structure_byte(b);
            }
        }
    }

    fn value_byte(&mut self, b: u8) {
        let Some(value) = self.value.as_mut() else {
            return;
        };
        let quoted = value.first() == Some(&b'"');
        if !quoted && (b == b',' || b == b'}' || b.is_ascii_whitespace()) {
            self.id_found();
            // The byte that ended the value belongs to the structure.
            self.structure_byte(b);
            return;
        }
        value.push(b);
        if value.len() > ID_BYTES_MAX {
            self.spoiled = true;
        } else if quoted && value.len() > 1 {
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.id_found();
            }
        }
    }

    /// The id's value is read whole: the scan goes on among the keys.
    fn id_found(&mut self) {
        self.found = self.value.take();
        self.id_key = false;
        self.id_colon = false;
    }

    fn string_byte(&mut self, b: u8) {
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
            if let Some(key) = self.key.take() {
                self.id_key = key == b"id";
                self.method |= key == b"method";
                self.kind_known |= matches!(key.as_slice(), b"method" | b"result" | b"error");
            }
            return;
        }
        if let Some(key) = self.key.as_mut()
            && key.len() <= 6
        {
            key.push(b);
        }
    }

    fn structure_byte(&mut self, b: u8) {
        match b {
            b'"' if self.id_colon => self.value = Some(vec![b]),
            b'"' => {
                self.in_string = true;
                self.key = (self.depth == 1 && self.expect_key).then(Vec::new);
                self.expect_key = false;
            }
            b'{' | b'[' => {
                self.depth += 1;
                self.expect_key = self.depth == 1 && b == b'{';
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b',' if self.depth == 1 => {
                self.expect_key = true;
                self.id_key = false;
            }
            b':' if self.depth == 1 && self.id_key => self.id_colon = true,
            _ if b.is_ascii_whitespace() => {}
            _ if self.id_colon => self.value = Some(vec![b]),
            _ => {}
        }
    }

    /// Whether the message is a request (or a notification) of its own.
    pub fn is_request(&self) -> bool {
        self.method
    }

    /// The id, when one was found whole.
    pub fn id(&self) -> Option<Value> {
        let found = self.found.as_deref()?;
        match serde_json::from_slice::<Value>(found).ok()? {
            id @ (Value::Number(_) | Value::String(_)) => Some(id),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn id_of(text: &str, piece: usize) -> Option<Value> {
        let mut scanner = IdScanner::default();
        for chunk in text.as_bytes().chunks(piece) {
            scanner.feed(chunk);
        }
        scanner.id()
    }

    #[test]
    fn the_top_level_id_is_found_wherever_it_stands_and_however_it_is_cut() {
        let cases = [
            (
                r#"{"jsonrpc":"2.0","id":7,"result":{"id":1}}"#,
                Some(json!(7)),
            ),
            (
                r#"{"result":{"id":1,"content":[{"text":"\"id\":3"}]},"jsonrpc":"2.0","id":12}"#,
                Some(json!(12)),
            ),
            (r#"{ "id" : "a\"b" , "result": 1}"#, Some(json!("a\"b"))),
            (r#"{"result":{"x":"id"},"id":null}"#, None),
            (
                r#"{"method":"notifications/message","params":{"id":4}}"#,
                None,
            ),
            (r#"{"idx":5,"id":6}"#, Some(json!(6))),
        ];
        for (text, expected) in cases {
            for piece in [1, 3, 1000] {
                assert_eq!(id_of(text, piece), expected, "{text} in pieces of {piece}");
            }
        }
    }
}
