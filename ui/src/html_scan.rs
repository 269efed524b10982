//! Test support shared by this crate's unit tests and its integration tests
//! (`ui/tests/ui/main.rs` includes this file by path): the start tags of rendered
//! HTML, and the check that a page runs no inline code.
//!
//! maud, ammonia and html5ever all escape text and double-quote every
//! attribute value, so a raw `<` followed by a letter always opens a tag and
//! a value may hold `>`.

/// A start tag: its lowercased name, its attributes (names lowercased), and
/// the byte offset just past its `>`.
#[derive(Debug)]
pub struct StartTag {
    pub name: String,
    pub attributes: Vec<(String, String)>,
    pub end: usize,
}

impl StartTag {
    /// The value of attribute `name`.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the `class` attribute lists `class`.
    pub fn has_class(&self, class: &str) -> bool {
        self.attribute("class")
            .is_some_and(|value| value.split(' ').any(|c| c == class))
    }
}

/// The start tags of `html`, in order.
pub fn start_tags(html: &str) -> Vec<StartTag> {
    let bytes = html.as_bytes();
    let space = |b: u8| matches!(b, b' ' | b'\n' | b'\t');
    let mut tags = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'<' || !bytes.get(i + 1).is_some_and(u8::is_ascii_alphabetic) {
            i += 1;
            continue;
        }
        i += 1;
        let name_start = i;
        while i < bytes.len() && !space(bytes[i]) && !matches!(bytes[i], b'>' | b'/') {
            i += 1;
        }
        let name = html[name_start..i].to_ascii_lowercase();
        let mut attributes = Vec::new();
        loop {
            while i < bytes.len() && (space(bytes[i]) || bytes[i] == b'/') {
                i += 1;
            }
            if i >= bytes.len() || bytes[i] == b'>' {
                break;
            }
            let attribute_start = i;
            while i < bytes.len() && !space(bytes[i]) && !matches!(bytes[i], b'=' | b'>') {
                i += 1;
            }
            let attribute = html[attribute_start..i].to_ascii_lowercase();
            let mut value = String::new();
            if bytes.get(i) == Some(&b'=') {
                assert_eq!(bytes.get(i + 1), Some(&b'"'), "unquoted attribute value");
                let value_start = i + 2;
                let value_end = value_start + html[value_start..].find('"').expect("closing quote");
                value = html[value_start..value_end].to_owned();
                i = value_end + 1;
            }
            attributes.push((attribute, value));
        }
        tags.push(StartTag {
            name,
            attributes,
            end: i + 1,
        });
    }
    tags
}

/// Panics if `html` holds an inline script, a `<style>` element, a `style`
/// attribute, an event handler attribute or a script or data URL: a page
/// must work under the content security policy and run nothing it was sent.
pub fn assert_no_inline_code(html: &str) {
    for tag in start_tags(html) {
        assert_ne!(tag.name, "style", "style element in page");
        if tag.name == "script" {
            assert!(
                tag.attribute("src")
                    .is_some_and(|src| src.starts_with("/assets/")),
                "inline script in page"
            );
            assert!(
                html[tag.end..].starts_with("</script>"),
                "script with a body"
            );
        }
        for (name, value) in &tag.attributes {
            assert_ne!(name, "style", "style attribute on <{}>", tag.name);
            assert!(
                !name.starts_with("on"),
                "event handler {name} on <{}>",
                tag.name
            );
            let value = value.trim().to_ascii_lowercase();
            assert!(
                !value.starts_with("javascript:") && !value.starts_with("data:"),
                "{name}={value:?} on <{}>",
                tag.name
            );
        }
    }
}
