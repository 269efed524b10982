//! The `ask_user` form as HTML: controls, tabs, drafts, the CSP invariant
//! (no inline script, no style attribute), sanitised Markdown, and the
//! embedded assets the page refers to.

use crate::html_scan::{assert_no_inline_code, start_tags};
use planb_core::{AnswerValue, Answers, AskSpec};
use planb_ui::pages::{self, CONTENT_SECURITY_POLICY, asset, asset_paths};
use serde_json::{Value, json};

const SID: &str = "s1d-7f3a9c0e2b4d4e8f9a1b2c3d4e5f6a7b";

/// The example call from the planb-mcp README: all five kinds, three tabs,
/// an intro and one option illustration.
fn seed_example() -> Value {
    json!({
        "title": "Project kickoff preferences",
        "introTitle": "Kickoff",
        "intro": "A few quick questions to set up your workspace.",
        "questions": [
            { "id": "project_name", "kind": "text", "label": "Project name", "placeholder": "e.g. Aurora", "required": true, "tab": "Workspace" },
            { "id": "summary", "kind": "longtext", "label": "One-paragraph summary", "placeholder": "What are we building?", "tab": "Workspace" },
            { "id": "language", "kind": "single", "label": "Primary language", "required": true, "tab": "Workspace",
              "options": [
                { "value": "TypeScript", "markdown": "### TypeScript\n\nFull-stack web with strong typing." },
                "Go", "Rust", "Python"
              ] },
            { "id": "integrations", "kind": "multi", "label": "Integrations to enable", "options": ["GitHub", "Slack", "Linear", "PagerDuty"], "tab": "Integrations" },
            { "id": "priority", "kind": "scale", "label": "Priority (1 = low, 5 = high)", "min": 1, "max": 5, "step": 1, "required": true, "tab": "Priority" }
        ]
    })
}

fn spec(input: Value) -> AskSpec {
    AskSpec::from_json(&input).expect("valid spec")
}

fn page(input: Value, draft: Option<&Answers>) -> String {
    pages::form_page(&spec(input), SID, draft).into_string()
}

/// The start tag of the element with `id`, e.g. `<input id="x" …>`.
fn tag_with_id<'a>(html: &'a str, id: &str) -> &'a str {
    let needle = format!("id=\"{id}\"");
    let at = html
        .find(&needle)
        .unwrap_or_else(|| panic!("no element with id {id:?}"));
    let start = html[..at].rfind('<').expect("tag start");
    let end = at + html[at..].find('>').expect("tag end");
    &html[start..=end]
}

/// Panics unless the start tag `tag` carries every attribute in `expected`.
fn check_attributes(tag: &str, expected: &[&str]) {
    for attribute in expected {
        assert!(tag.contains(attribute), "{attribute} missing in {tag}");
    }
}

/// The labels of the tab strip, in order; empty when there is no strip.
fn tab_labels(html: &str) -> Vec<String> {
    html.split("role=\"tab\"")
        .skip(1)
        .map(|rest| {
            let start = rest.find("class=\"tab-label\">").expect("tab label") + 18;
            let end = start + rest[start..].find('<').expect("label end");
            rest[start..end].to_owned()
        })
        .collect()
}

/// The `id`s of the question blocks inside panel `index`, in order.
fn questions_in_panel(html: &str, index: usize) -> Vec<String> {
    let start = html
        .find(&format!("id=\"panel-{index}\""))
        .expect("panel exists");
    let end = html[start + 1..]
        .find("id=\"panel-")
        .map_or(html.len(), |e| start + 1 + e);
    html[start..end]
        .split("data-question=\"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').expect("closing quote")].to_owned())
        .collect()
}

#[test]
fn every_kind_renders_its_control() {
    let html = page(seed_example(), None);
    check_attributes(
        tag_with_id(&html, "input-project_name"),
        &[
            "<input",
            "type=\"text\"",
            "name=\"project_name\"",
            "placeholder=\"e.g. Aurora\"",
            "maxlength=\"10000\"",
            "aria-required=\"true\"",
            "aria-describedby=\"error-project_name\"",
        ],
    );
    check_attributes(
        tag_with_id(&html, "label-project_name"),
        &["<label", "for=\"input-project_name\""],
    );
    check_attributes(
        tag_with_id(&html, "input-summary"),
        &[
            "<textarea",
            "name=\"summary\"",
            "placeholder=\"What are we building?\"",
            "maxlength=\"100000\"",
        ],
    );
    check_attributes(
        tag_with_id(&html, "q-language"),
        &[
            "<fieldset",
            "role=\"radiogroup\"",
            "aria-required=\"true\"",
            "aria-labelledby=\"label-language\"",
            "data-kind=\"single\"",
        ],
    );
    for (index, value) in ["TypeScript", "Go", "Rust", "Python"].iter().enumerate() {
        check_attributes(
            tag_with_id(&html, &format!("input-language-{index}")),
            &[
                "type=\"radio\"",
                "name=\"language\"",
                &format!("value=\"{value}\""),
            ],
        );
    }
    check_attributes(
        tag_with_id(&html, "q-integrations"),
        &["<fieldset", "role=\"group\"", "data-kind=\"multi\""],
    );
    for (index, value) in ["GitHub", "Slack", "Linear", "PagerDuty"]
        .iter()
        .enumerate()
    {
        check_attributes(
            tag_with_id(&html, &format!("input-integrations-{index}")),
            &[
                "type=\"checkbox\"",
                "name=\"integrations\"",
                &format!("value=\"{value}\""),
            ],
        );
    }
    let slider = tag_with_id(&html, "input-priority");
    check_attributes(
        slider,
        &[
            "type=\"range\"",
            "name=\"priority\"",
            "min=\"1\"",
            "max=\"5\"",
            "step=\"1\"",
            "aria-valuetext=\"not set\"",
        ],
    );
    assert!(
        !slider.contains("value="),
        "an unset scale has no value: {slider}"
    );
    check_attributes(
        tag_with_id(&html, "q-priority"),
        &["data-kind=\"scale\"", "data-unset=\"true\""],
    );
    assert!(
        html.contains(">Not set</output>"),
        "unset scale shows its state"
    );
}

#[test]
fn scale_without_step_accepts_any_value_and_labels_its_ends() {
    let html = page(
        json!({ "title": "T", "questions": [
            { "id": "ratio", "kind": "scale", "label": "Ratio", "min": 0, "max": 0.5 }
        ]}),
        None,
    );
    check_attributes(
        tag_with_id(&html, "input-ratio"),
        &["min=\"0\"", "max=\"0.5\"", "step=\"any\""],
    );
    assert!(
        html.contains("<span class=\"scale-tick\">0.0</span>"),
        "{html}"
    );
    assert!(
        html.contains("<span class=\"scale-tick\">0.5</span>"),
        "{html}"
    );
}

#[test]
fn tabs_follow_first_appearance_after_the_intro() {
    let html = page(
        json!({ "title": "T", "intro": "Hello",
            "questions": [
                { "id": "b1", "kind": "text", "label": "B1", "tab": "Beta" },
                { "id": "u1", "kind": "text", "label": "U1" },
                { "id": "a1", "kind": "text", "label": "A1", "tab": "Alpha" },
                { "id": "b2", "kind": "text", "label": "B2", "tab": "Beta" }
            ]
        }),
        None,
    );
    assert_eq!(
        tab_labels(&html),
        ["Overview", "Beta", "Questions", "Alpha"]
    );
    assert!(questions_in_panel(&html, 0).is_empty());
    assert_eq!(questions_in_panel(&html, 1), ["b1", "b2"]);
    assert_eq!(questions_in_panel(&html, 2), ["u1"]);
    assert_eq!(questions_in_panel(&html, 3), ["a1"]);
    check_attributes(
        tag_with_id(&html, "tab-0"),
        &[
            "role=\"tab\"",
            "aria-selected=\"true\"",
            "aria-controls=\"panel-0\"",
            "tabindex=\"0\"",
        ],
    );
    check_attributes(
        tag_with_id(&html, "tab-2"),
        &["aria-selected=\"false\"", "tabindex=\"-1\""],
    );
    check_attributes(
        tag_with_id(&html, "panel-0"),
        &["role=\"tabpanel\"", "aria-labelledby=\"tab-0\""],
    );
    let panel = tag_with_id(&html, "panel-1");
    assert!(
        panel.contains(" hidden"),
        "later panels start hidden: {panel}"
    );
    // Questions are numbered in the order the form shows them.
    let numbers: Vec<&str> = html
        .split("<span class=\"question-number\" aria-hidden=\"true\">")
        .skip(1)
        .map(|rest| &rest[..rest.find('<').expect("number end")])
        .collect();
    assert_eq!(numbers, ["1", "2", "3", "4"]);
    assert!(html.find(">B2<").expect("b2") < html.find(">U1<").expect("u1"));
}

#[test]
fn intro_tab_uses_its_title() {
    let html = page(seed_example(), None);
    assert_eq!(
        tab_labels(&html),
        ["Kickoff", "Workspace", "Integrations", "Priority"]
    );
    assert!(html.contains("<p>A few quick questions to set up your workspace.</p>"));
}

#[test]
fn one_tab_has_no_strip_and_submits_at_once() {
    let html = page(
        json!({ "title": "T", "questions": [
            { "id": "a", "kind": "text", "label": "A" },
            { "id": "b", "kind": "text", "label": "B" }
        ]}),
        None,
    );
    assert!(!html.contains("role=\"tablist\""), "{html}");
    assert!(!html.contains("role=\"tab\""), "{html}");
    assert!(!html.contains("role=\"tabpanel\""), "{html}");
    assert_eq!(questions_in_panel(&html, 0), ["a", "b"]);
    assert!(tag_with_id(&html, "next").contains(" hidden"));
    let submit = tag_with_id(&html, "submit");
    assert!(!submit.contains("hidden"), "{submit}");
    assert!(
        !submit.contains("disabled"),
        "nothing is required: {submit}"
    );
    assert!(html.contains("All questions are optional"));
}

#[test]
fn required_questions_are_marked() {
    let html = page(seed_example(), None);
    for id in ["project_name", "language", "priority"] {
        let block = tag_with_id(&html, &format!("q-{id}"));
        assert!(block.contains("data-required=\"true\""), "{block}");
    }
    for id in ["summary", "integrations"] {
        let block = tag_with_id(&html, &format!("q-{id}"));
        assert!(block.contains("data-required=\"false\""), "{block}");
    }
    assert_eq!(html.matches(">Required</span>").count(), 3);
    assert!(!tag_with_id(&html, "input-summary").contains("aria-required"));
    // Tabs holding unanswered required questions carry the dot, and
    // Submit waits for them.
    assert!(tag_with_id(&html, "tab-1").contains("has-missing"));
    assert!(!tag_with_id(&html, "tab-2").contains("has-missing"));
    assert!(tag_with_id(&html, "tab-3").contains("has-missing"));
    assert!(tag_with_id(&html, "submit").contains("disabled"));
    assert!(html.contains("0 of 3 required answered"));
}

#[test]
fn sid_appears_only_in_the_data_attribute() {
    let html = page(seed_example(), None);
    assert_eq!(html.matches(SID).count(), 1, "{html}");
    assert!(html.contains(&format!("data-sid=\"{SID}\"")));
}

#[test]
fn draft_values_are_pre_filled() {
    let draft = Answers(vec![
        (
            "project_name".into(),
            AnswerValue::Text("Au\"rora <b>".into()),
        ),
        (
            "summary".into(),
            AnswerValue::Text("Line one\n</textarea><script>x</script>".into()),
        ),
        ("language".into(), AnswerValue::Choice("Rust".into())),
        (
            "integrations".into(),
            AnswerValue::Choices(vec!["GitHub".into(), "Linear".into()]),
        ),
        ("priority".into(), AnswerValue::Number(4.0)),
    ]);
    let html = page(seed_example(), Some(&draft));
    assert!(tag_with_id(&html, "input-project_name").contains("value=\"Au&quot;rora &lt;b&gt;\""));
    assert!(
        html.contains(">Line one\n&lt;/textarea&gt;&lt;script&gt;x&lt;/script&gt;</textarea>"),
        "{html}"
    );
    let checked: Vec<bool> = (0..4)
        .map(|i| tag_with_id(&html, &format!("input-language-{i}")).contains(" checked"))
        .collect();
    assert_eq!(checked, [false, false, true, false]);
    let checked: Vec<bool> = (0..4)
        .map(|i| tag_with_id(&html, &format!("input-integrations-{i}")).contains(" checked"))
        .collect();
    assert_eq!(checked, [true, false, true, false]);
    let slider = tag_with_id(&html, "input-priority");
    assert!(slider.contains("value=\"4\""), "{slider}");
    assert!(!slider.contains("aria-valuetext"), "{slider}");
    assert!(tag_with_id(&html, "q-priority").contains("data-unset=\"false\""));
    assert!(html.contains(">4</output>"));
    assert!(html.contains("3 of 3 required answered"));
    assert!(!tag_with_id(&html, "submit").contains("disabled"));
    assert!(
        !html.contains("has-missing"),
        "every required tab is answered"
    );
}

#[test]
fn blank_draft_text_does_not_count_as_answered() {
    let draft = Answers(vec![(
        "project_name".into(),
        AnswerValue::Text("   ".into()),
    )]);
    let html = page(seed_example(), Some(&draft));
    assert!(tag_with_id(&html, "tab-1").contains("has-missing"));
    assert!(html.contains("0 of 3 required answered"));
}

#[test]
fn inline_code_check_catches_inline_code() {
    for bad in [
        "<script>alert(1)</script>",
        "<script src=\"https://cdn.example/x.js\"></script>",
        "<style>p{}</style>",
        "<p style=\"color:red\">x</p>",
        "<div onclick=\"x()\">x</div>",
        "<a href=\" javascript:x()\">x</a>",
    ] {
        let caught = std::panic::catch_unwind(|| assert_no_inline_code(bad));
        assert!(caught.is_err(), "{bad} passed the check");
    }
}

#[test]
fn page_has_no_inline_script_or_style() {
    let html = page(seed_example(), None);
    assert_no_inline_code(&html);
    let html = page(hostile_spec(), None);
    assert_no_inline_code(&html);
    let message = pages::message_page("Closed", "This form is closed.").into_string();
    assert_no_inline_code(&message);
}

/// A spec whose every agent-written text tries to run code.
fn hostile_spec() -> Value {
    json!({
        "title": "<script>alert('title')</script>",
        "introTitle": "<img src=x onerror=alert(1)>",
        "intro": "Hi <script>alert('intro')</script> [x](javascript:alert(1)) <img src=x onerror=alert(2)>\n\n<p style=\"color:red\" onclick=\"alert(3)\">p</p>\n\n```mermaid\ngraph TD\nA[\"</pre><script>alert(4)</script>\"]\n```",
        "questions": [
            { "id": "q", "kind": "single", "label": "<b onmouseover=alert(5)>label</b>",
              "tab": "<script>tab</script>",
              "options": [
                { "value": "\"><script>alert(6)</script>",
                  "markdown": "[link](javascript:alert(8))\n\n<script>alert(7)</script>\n\n<iframe src=\"https://evil.example\"></iframe><svg onload=alert(9)>" },
                "plain"
              ] },
            { "id": "t", "kind": "text", "label": "T", "placeholder": "\" onfocus=\"alert(10)" }
        ]
    })
}

#[test]
fn agent_markdown_is_neutralised_in_intro_and_illustrations() {
    let html = page(hostile_spec(), None);
    // Plain-text fields are escaped, never interpreted.
    assert!(html.contains("&lt;script&gt;alert('title')&lt;/script&gt;"));
    assert!(html.contains("&lt;b onmouseover=alert(5)&gt;label&lt;/b&gt;"));
    assert!(html.contains("value=\"&quot;&gt;&lt;script&gt;alert(6)&lt;/script&gt;\""));
    assert!(html.contains("placeholder=\"&quot; onfocus=&quot;alert(10)\""));
    // Markdown keeps its text but loses every active part.
    let illustration = tag_with_id(&html, "ill-q-0");
    assert!(
        illustration.contains("class=\"illustration md\""),
        "{illustration}"
    );
    assert_no_inline_code(&html);
    let names: Vec<String> = start_tags(&html).into_iter().map(|tag| tag.name).collect();
    for forbidden in ["iframe", "img", "object", "embed"] {
        assert!(
            !names.iter().any(|n| n == forbidden),
            "<{forbidden}> survived"
        );
    }
    assert_eq!(
        names.iter().filter(|n| *n == "svg").count(),
        start_tags(&page(seed_example(), None))
            .iter()
            .filter(|tag| tag.name == "svg")
            .count(),
        "only the page's own icons are SVG"
    );
    assert!(html.contains(">x</a>"), "the link text stays");
    assert!(html.contains(">link</a>"), "the link text stays");
    assert!(html.contains("<pre class=\"mermaid\">graph TD\nA[\"&lt;/pre&gt;&lt;script&gt;"));
}

#[test]
fn option_illustrations_get_a_side_panel() {
    let html = page(seed_example(), None);
    check_attributes(
        tag_with_id(&html, "panel-1"),
        &["class=\"panel panel-with-aside\""],
    );
    let illustration = tag_with_id(&html, "ill-language-0");
    check_attributes(illustration, &["class=\"illustration md\"", " hidden"]);
    assert!(html.contains("<h3>TypeScript</h3>\n<p>Full-stack web with strong typing.</p>"));
    assert!(html.contains("<label class=\"option\" data-illustration=\"ill-language-0\">"));
    check_attributes(
        tag_with_id(&html, "input-language-0"),
        &["aria-describedby=\"ill-language-0\""],
    );
    assert_eq!(html.matches("data-illustration=").count(), 1);
    for tab in [2, 3] {
        let panel = tag_with_id(&html, &format!("panel-{tab}"));
        assert!(!panel.contains("panel-with-aside"), "{panel}");
    }
}

/// Every `/assets/…` URL in `html`.
fn asset_urls(html: &str) -> Vec<&str> {
    html.match_indices("\"/assets/")
        .map(|(at, _)| {
            let rest = &html[at + 1..];
            &rest[..rest.find('"').expect("closing quote")]
        })
        .collect()
}

fn expected_content_type(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("md") => "text/markdown; charset=utf-8",
        _ => "text/plain; charset=utf-8",
    }
}

#[test]
fn every_referenced_asset_is_served_with_its_type() {
    let mut input = seed_example();
    input["intro"] = json!("```mermaid\ngraph TD; A-->B\n```\n\n```rust\nfn main() {}\n```");
    let html = page(input, None);
    let urls = asset_urls(&html);
    for expected in [
        "/assets/form.css",
        "/assets/form.js",
        "/assets/markdown.js",
        "/assets/favicon.svg",
        "/assets/vendor/highlight/highlight.min.js",
        "/assets/vendor/highlight/github.min.css",
        "/assets/vendor/highlight/github-dark.min.css",
        "/assets/vendor/mermaid/mermaid.min.js",
    ] {
        assert!(urls.contains(&expected), "{expected} not referenced");
    }
    let message = pages::message_page("Closed", "Gone.").into_string();
    assert!(
        !message.contains("markdown.js"),
        "a message has no Markdown"
    );
    for url in urls.into_iter().chain(asset_urls(&message)) {
        let served = asset(url).unwrap_or_else(|| panic!("{url} is not served"));
        assert!(!served.bytes.is_empty(), "{url} is empty");
        assert_eq!(served.content_type, expected_content_type(url), "{url}");
    }
    for path in asset_paths() {
        let served = asset(path).expect("listed assets are served");
        assert_eq!(served.content_type, expected_content_type(path), "{path}");
        assert_eq!(asset(&format!("/assets/{path}")), Some(served));
    }
}

#[test]
fn vendored_libraries_ship_their_licences() {
    for licence in ["vendor/mermaid/LICENSE", "vendor/highlight/LICENSE"] {
        let served = asset(licence).unwrap_or_else(|| panic!("{licence} missing"));
        let text = String::from_utf8_lossy(served.bytes);
        assert!(
            text.contains("Permission is hereby granted") || text.contains("Redistribution"),
            "{licence} is not a licence text"
        );
    }
    let readme = String::from_utf8_lossy(asset("vendor/README.md").expect("readme").bytes);
    let highlight = String::from_utf8_lossy(
        asset("vendor/highlight/highlight.min.js")
            .expect("highlight")
            .bytes,
    );
    assert!(highlight.starts_with("/*!\n  Highlight.js v11.12.0"));
    assert!(readme.contains("| 11.12.0 |"));
    let mermaid = asset("vendor/mermaid/mermaid.min.js").expect("mermaid");
    assert!(String::from_utf8_lossy(mermaid.bytes).contains("\"11.17.2\""));
    assert!(readme.contains("| 11.17.2 |"));
}

#[test]
fn unknown_asset_paths_are_not_served() {
    for path in [
        "",
        "/assets/",
        "missing.js",
        "../Cargo.toml",
        "/assets/../src/lib.rs",
        "vendor/mermaid",
        "FORM.CSS",
    ] {
        assert_eq!(asset(path), None, "{path:?}");
    }
}

#[test]
fn libraries_load_only_when_the_markdown_needs_them() {
    let plain = json!({ "title": "T", "questions": [{ "id": "a", "kind": "text", "label": "A" }] });
    let html = page(plain, None);
    assert!(!html.contains("markdown.js"));
    assert!(!html.contains("id=\"lightbox\""));
    let html = page(seed_example(), None);
    assert!(html.contains("markdown.js"));
    assert!(!html.contains("mermaid.min.js"));
    assert!(!html.contains("highlight.min.js"));
    let mut input = seed_example();
    input["questions"][2]["options"][0]["markdown"] = json!("```ts\nconst x = 1;\n```");
    let html = page(input, None);
    assert!(html.contains("highlight.min.js"));
    assert!(!html.contains("mermaid.min.js"));
}

#[test]
fn content_security_policy_is_strict() {
    assert_eq!(
        CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; \
         frame-ancestors 'none'"
    );
}

#[test]
fn page_says_the_form_is_for_non_sensitive_input() {
    let html = page(seed_example(), None);
    assert!(html.contains("For non-sensitive input only."));
    assert!(html.contains("passwords, API keys, tokens or payment details"));
}

#[test]
fn message_page_escapes_its_text() {
    let html =
        pages::message_page("Already <answered>", "Close this tab & relax <script>").into_string();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<title>Already &lt;answered&gt; · planb</title>"));
    assert!(html.contains("<h1 class=\"message-title\">Already &lt;answered&gt;</h1>"));
    assert!(html.contains("Close this tab &amp; relax &lt;script&gt;"));
    assert!(!html.contains("ask-form"));
}
