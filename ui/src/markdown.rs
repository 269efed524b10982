//! Agent-written Markdown to safe HTML: [`render`].
//!
//! The intro of an ask and its option illustrations are GitHub-flavoured
//! Markdown written by a model, so they are untrusted input shown on a page
//! that can submit answers. pulldown-cmark turns them into HTML and ammonia
//! then keeps only an allow-list of tags and attributes; nothing the author
//! writes, raw HTML included, reaches the browser without passing ammonia.
//!
//! Two things are shaped for the form's script: fenced code keeps
//! `class="language-xxx"` on `<code>` for highlight.js, and a ```` ```mermaid ````
//! fence becomes `<pre class="mermaid">` holding the escaped diagram source,
//! which the vendored mermaid renders in the browser. Images become links to
//! their target: the page's Content-Security-Policy would refuse to load them
//! anyway, and a broken image frame helps nobody.

use std::borrow::Cow;
use std::sync::LazyLock;

use pulldown_cmark::{CodeBlockKind, CowStr, Event, Options, Parser, Tag, TagEnd};

/// Most Markdown bytes rendered; the rest is replaced by a note. The core
/// already caps the intro and the illustrations far below this, so the cap
/// only guards callers that render other text.
pub const INPUT_BYTES_MAX: usize = 256 * 1024;

/// Renders GitHub-flavoured Markdown (tables, strikethrough, task lists) to
/// sanitised HTML, safe to embed in a page as is.
pub fn render(markdown: &str) -> String {
    let (source, omitted_bytes) = truncate(markdown);
    let parser = Parser::new_ext(source, parse_options());
    let mut html = String::with_capacity(source.len() * 3 / 2);
    pulldown_cmark::html::push_html(&mut html, Rewrite::new(parser));
    let html = alignment_as_attribute(&html);
    let mut clean = SANITIZER.clean(&html).to_string();
    if omitted_bytes > 0 {
        let note = maud::html! {
            p.md-truncated { "The rest of this text (" (omitted_bytes) " bytes) is too long to show." }
        };
        clean.push_str(&note.into_string());
    }
    clean
}

fn parse_options() -> Options {
    Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS
}

/// The longest prefix of at most [`INPUT_BYTES_MAX`] bytes that ends on a
/// character boundary, and how many bytes were left out.
fn truncate(markdown: &str) -> (&str, usize) {
    if markdown.len() <= INPUT_BYTES_MAX {
        return (markdown, 0);
    }
    let mut end = INPUT_BYTES_MAX;
    while !markdown.is_char_boundary(end) {
        end -= 1;
    }
    (&markdown[..end], markdown.len() - end)
}

/// The event stream with mermaid fences turned into `<pre class="mermaid">`
/// and images turned into links.
struct Rewrite<'a, I> {
    events: I,
    /// Source of the mermaid fence being collected, if inside one.
    mermaid: Option<String>,
    _marker: std::marker::PhantomData<&'a ()>,
}

impl<'a, I: Iterator<Item = Event<'a>>> Rewrite<'a, I> {
    fn new(events: I) -> Self {
        Self {
            events,
            mermaid: None,
            _marker: std::marker::PhantomData,
        }
    }
}

impl<'a, I: Iterator<Item = Event<'a>>> Iterator for Rewrite<'a, I> {
    type Item = Event<'a>;

    fn next(&mut self) -> Option<Event<'a>> {
        loop {
            let event = self.events.next()?;
            if let Some(source) = &mut self.mermaid {
                match event {
                    Event::Text(text) => source.push_str(&text),
                    Event::End(TagEnd::CodeBlock) => {
                        let block = maud::html! { pre.mermaid { (source) } }.into_string();
                        self.mermaid = None;
                        return Some(Event::Html(CowStr::from(block)));
                    }
                    // A code block holds only text; nothing else can occur.
                    _ => {}
                }
                continue;
            }
            return Some(match event {
                Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info)))
                    if fence_language(&info) == "mermaid" =>
                {
                    self.mermaid = Some(String::new());
                    continue;
                }
                Event::Start(Tag::Image {
                    link_type,
                    dest_url,
                    title,
                    id,
                }) => Event::Start(Tag::Link {
                    link_type,
                    dest_url,
                    title,
                    id,
                }),
                Event::End(TagEnd::Image) => Event::End(TagEnd::Link),
                other => other,
            });
        }
    }
}

/// The first word of a fence's info string, as pulldown-cmark uses it for
/// the `language-` class.
fn fence_language(info: &str) -> &str {
    info.split(' ').next().unwrap_or("")
}

/// pulldown-cmark aligns table cells with a `style` attribute, which the
/// sanitiser drops (and the page's CSP would refuse); the `align` attribute
/// survives and the stylesheet honours it.
fn alignment_as_attribute(html: &str) -> Cow<'_, str> {
    if !html.contains(" style=\"text-align: ") {
        return Cow::Borrowed(html);
    }
    let mut html = html.to_owned();
    for side in ["left", "center", "right"] {
        let from = format!(" style=\"text-align: {side}\">");
        let to = format!(" align=\"{side}\">");
        html = html.replace(&from, &to);
    }
    Cow::Owned(html)
}

/// The allow-list: ammonia's defaults (which already drop scripts, styles,
/// event handlers and every URL scheme but the safe ones) without images,
/// plus code classes, mermaid blocks and read-only task-list checkboxes.
static SANITIZER: LazyLock<ammonia::Builder<'static>> = LazyLock::new(|| {
    let mut builder = ammonia::Builder::default();
    builder
        .rm_tags(["img", "map", "area"])
        .add_tags(["input"])
        .add_tag_attributes("code", ["class"])
        .add_tag_attributes("pre", ["class"])
        .add_tag_attributes("input", ["checked"])
        // Every input becomes a disabled checkbox: a task-list marker is
        // the only input Markdown produces, and the person must not mistake
        // an illustration for part of the form.
        .set_tag_attribute_value("input", "type", "checkbox")
        .set_tag_attribute_value("input", "disabled", "")
        .set_tag_attribute_value("a", "target", "_blank")
        .link_rel(Some("noopener noreferrer"))
        // Relative links would point into the form server itself.
        .url_relative(ammonia::UrlRelative::Deny)
        .attribute_filter(|element, attribute, value| match (element, attribute) {
            ("code", "class") => is_language_class(value).then_some(Cow::Borrowed(value)),
            ("pre", "class") => (value == "mermaid").then_some(Cow::Borrowed(value)),
            _ => Some(Cow::Borrowed(value)),
        });
    builder
});

/// `language-` followed by a short name such as `rust`, `c++`, `c#` or
/// `objective-c`; anything else would let the author pick arbitrary classes
/// of the page's stylesheet.
fn is_language_class(class: &str) -> bool {
    class.strip_prefix("language-").is_some_and(|name| {
        !name.is_empty()
            && name.len() <= 40
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | '#' | '.' | '-'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start tags of `html`, lowercased whole (names, attributes and
    /// values), so the checks below see what a browser would act on.
    fn start_tags(html: &str) -> Vec<crate::html_scan::StartTag> {
        crate::html_scan::start_tags(&html.to_ascii_lowercase())
    }

    const ALLOWED_ATTRIBUTES: [&str; 26] = [
        "href", "hreflang", "rel", "target", "title", "lang", "class", "align", "start", "colspan",
        "rowspan", "checked", "disabled", "type", "cite", "datetime", "dir", "char", "charoff",
        "span", "headers", "scope", "summary", "size", "width", "height",
    ];
    const FORBIDDEN_TAGS: [&str; 20] = [
        "script", "style", "iframe", "frame", "object", "embed", "svg", "math", "img", "form",
        "button", "textarea", "select", "base", "meta", "link", "noscript", "template", "video",
        "audio",
    ];

    /// Panics unless `html` is inert: no dangerous tag, no attribute outside
    /// the allow-list, no URL with a scheme that runs code or embeds data.
    fn assert_inert(input: &str, html: &str) {
        for tag in start_tags(html) {
            assert!(
                !FORBIDDEN_TAGS.contains(&tag.name.as_str()),
                "<{}> survived {input:?}: {html}",
                tag.name
            );
            for (name, value) in &tag.attributes {
                assert!(
                    ALLOWED_ATTRIBUTES.contains(&name.as_str()),
                    "attribute {name} on <{}> survived {input:?}: {html}",
                    tag.name
                );
                let value: String = value.chars().filter(|c| !c.is_whitespace()).collect();
                for scheme in ["javascript:", "vbscript:", "data:", "&#"] {
                    assert!(
                        !value.starts_with(scheme),
                        "{name}={value:?} survived {input:?}: {html}"
                    );
                }
                if name == "class" {
                    assert!(
                        value == "mermaid" || is_language_class(&value),
                        "class {value:?} survived {input:?}: {html}"
                    );
                }
            }
            if tag.name == "a" {
                let has = |name: &str, value: &str| {
                    tag.attributes.iter().any(|(n, v)| n == name && v == value)
                };
                assert!(has("target", "_blank"), "{html}");
                assert!(has("rel", "noopener noreferrer"), "{html}");
            }
            if tag.name == "input" {
                let names: Vec<&str> = tag.attributes.iter().map(|(n, _)| n.as_str()).collect();
                assert!(names.contains(&"disabled"), "{html}");
                assert!(
                    tag.attributes.contains(&("type".into(), "checkbox".into())),
                    "{html}"
                );
            }
        }
    }

    #[test]
    fn xss_corpus_never_survives() {
        let corpus = [
            "<script>alert(1)</script>",
            "<SCRIPT SRC=https://evil.example/x.js></SCRIPT>",
            "<scr<script>ipt>alert(1)</script>",
            "<img src=x onerror=alert(1)>",
            "<img src=\"javascript:alert(1)\">",
            "![pwn](javascript:alert(1))",
            "[click](javascript:alert(1))",
            "[click](JaVaScRiPt:alert(1))",
            "[click]( javascript:alert(1))",
            "[click](&#106;avascript:alert(1))",
            "[click](java\tscript:alert(1))",
            "[ref]\n\n[ref]: javascript:alert(1)",
            "<a href=\"javascript:alert(1)\">x</a>",
            "<a href=\"&#106;&#97;vascript:alert(1)\">x</a>",
            "<a href=\"&#x6A;avascript&#x3A;alert(1)\">x</a>",
            "<a href=\"java&#x09;script:alert(1)\">x</a>",
            "<a href=\"data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==\">x</a>",
            "<a href=\"vbscript:msgbox(1)\">x</a>",
            "<a href=\"/submit\" id=\"tab-0\" name=\"x\">relative</a>",
            "<a href=\"https://ok.example\" target=\"_self\" onclick=\"alert(1)\">ok</a>",
            "<iframe src=\"https://evil.example\"></iframe>",
            "<iframe srcdoc=\"<script>alert(1)</script>\"></iframe>",
            "<p style=\"background:url(javascript:alert(1))\">styled</p>",
            "<div style=\"position:fixed;inset:0\" class=\"lightbox\">overlay</div>",
            "<svg><script>alert(1)</script></svg>",
            "<svg onload=alert(1)><circle r=5 /></svg>",
            "<svg><a xlink:href=\"javascript:alert(1)\"><text>x</text></a></svg>",
            "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
            "<noscript><p title=\"</noscript><img src=x onerror=alert(1)>\"></noscript>",
            "<details open ontoggle=alert(1)><summary>s</summary></details>",
            "<object data=\"https://evil.example/x.swf\"></object><embed src=\"x.swf\">",
            "<form action=\"/submit\"><button formaction=\"javascript:alert(1)\">go</button></form>",
            "<input type=\"text\" name=\"project_name\" value=\"x\" autofocus onfocus=\"alert(1)\">",
            "<textarea name=\"summary\">x</textarea><select><option>1</option></select>",
            "<base href=\"https://evil.example/\">",
            "<meta http-equiv=\"refresh\" content=\"0;url=javascript:alert(1)\">",
            "<link rel=\"stylesheet\" href=\"https://evil.example/x.css\">",
            "<style>body{display:none}</style>",
            "<!-- x --><script>alert(1)</script><!-- y -->",
            "&lt;script&gt;alert(1)&lt;/script&gt;",
            "<video src=x onerror=alert(1)></video><audio src=x onerror=alert(1)></audio>",
            "<template><script>alert(1)</script></template>",
            "```mermaid\n</pre><script>alert(1)</script>\n```",
            "```\"><script>alert(1)</script>\nx\n```",
            "```rust onclick=alert(1)\nfn main() {}\n```",
            "<pre class=\"mermaid lightbox\">x</pre><code class=\"hljs language-rust\">y</code>",
            "<table><tr><td background=\"javascript:alert(1)\">x</td></tr></table>",
        ];
        for input in corpus {
            let html = render(input);
            assert_inert(input, &html);
            assert!(
                !html.to_ascii_lowercase().contains("<script"),
                "{input:?}: {html}"
            );
        }
    }

    /// The attributes of the only `<name>` tag of `html`, sorted, since
    /// ammonia adds the attributes it sets in hash order.
    fn sorted_attributes(html: &str, name: &str) -> Vec<Vec<(String, String)>> {
        start_tags(html)
            .into_iter()
            .filter(|tag| tag.name == name)
            .map(|mut tag| {
                tag.attributes.sort();
                tag.attributes
            })
            .collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn safe_link_keeps_its_href_and_opens_in_a_new_tab() {
        let html = render("[docs](https://example.com/a?b=1&c=2)");
        assert_eq!(
            sorted_attributes(&html, "a"),
            [pairs(&[
                ("href", "https://example.com/a?b=1&amp;c=2"),
                ("rel", "noopener noreferrer"),
                ("target", "_blank"),
            ])]
        );
        assert!(html.contains(">docs</a>"), "{html}");
    }

    #[test]
    fn relative_links_lose_their_href() {
        let html = render("[submit](/submit)");
        assert!(!html.contains("href"), "{html}");
        assert!(html.contains(">submit</a>"), "{html}");
    }

    #[test]
    fn images_become_links() {
        let html = render("![a diagram](https://example.com/d.png)");
        assert!(!html.contains("<img"), "{html}");
        assert!(
            html.contains("<a href=\"https://example.com/d.png\""),
            "{html}"
        );
        assert!(html.contains(">a diagram</a>"), "{html}");
    }

    #[test]
    fn tables_render_with_alignment() {
        let html = render("| a | b |\n|:-:|--:|\n| 1 | 2 |\n");
        assert!(html.contains("<table>"), "{html}");
        assert!(html.contains("<th align=\"center\">a</th>"), "{html}");
        assert!(html.contains("<td align=\"right\">2</td>"), "{html}");
        assert!(!html.contains("style"), "{html}");
    }

    #[test]
    fn lists_strikethrough_and_task_lists_render() {
        let html = render("- one\n- ~~two~~\n\n1. first\n\n- [x] done\n- [ ] open\n");
        assert!(html.contains("<ul>\n<li>one</li>"), "{html}");
        assert!(html.contains("<del>two</del>"), "{html}");
        assert!(html.contains("<ol>\n<li>first</li>"), "{html}");
        assert_eq!(
            sorted_attributes(&html, "input"),
            [
                pairs(&[("checked", ""), ("disabled", ""), ("type", "checkbox")]),
                pairs(&[("disabled", ""), ("type", "checkbox")]),
            ]
        );
    }

    #[test]
    fn fenced_code_keeps_its_language_class() {
        let html = render("```rust\nfn main() { let x = 1 < 2; }\n```\n");
        assert_eq!(
            html,
            "<pre><code class=\"language-rust\">fn main() { let x = 1 &lt; 2; }\n</code></pre>\n"
        );
        let html = render("```c++\nint x;\n```\n");
        assert!(html.contains("class=\"language-c++\""), "{html}");
    }

    #[test]
    fn text_and_ascii_fences_stay_code_blocks() {
        for language in ["text", "ascii"] {
            let html = render(&format!("```{language}\n+--+\n|  |\n+--+\n```\n"));
            assert_eq!(
                html,
                format!(
                    "<pre><code class=\"language-{language}\">+--+\n|  |\n+--+\n</code></pre>\n"
                )
            );
        }
    }

    #[test]
    fn mermaid_fence_becomes_an_escaped_mermaid_block() {
        let html = render("```mermaid\ngraph TD\n  A[\"<b>x</b>\"] --> B & C\n```\n");
        assert_eq!(
            html,
            "<pre class=\"mermaid\">graph TD\n  A[\"&lt;b&gt;x&lt;/b&gt;\"] --&gt; B &amp; C\n</pre>"
        );
    }

    #[test]
    fn oversized_input_is_cut_with_a_note() {
        let input = format!("{}\n\nend", "é".repeat(INPUT_BYTES_MAX));
        let html = render(&input);
        assert!(!html.contains("end"), "the tail must not be rendered");
        let omitted = input.len() - INPUT_BYTES_MAX;
        assert!(
            html.ends_with(&format!(
                "<p class=\"md-truncated\">The rest of this text ({omitted} bytes) is too long to show.</p>"
            )),
            "{}",
            &html[html.len() - 200..]
        );
        let small = render("just this");
        assert!(!small.contains("md-truncated"));
    }
}
