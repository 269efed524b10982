//! The plan review page as HTML: the rendered plan, the diff against the
//! previous submission, the secret review id, the CSP invariant (no inline
//! script, no style attribute), sanitised agent Markdown, the limits handed
//! to the script, and the embedded assets the page refers to.

use crate::html_scan::{StartTag, assert_no_inline_code, start_tags};
use planb_ui::pages::review::{
    REVIEW_COMMENT_CHARS_MAX, REVIEW_COMMENTS_MAX, REVIEW_FEEDBACK_CHARS_MAX,
    REVIEW_QUOTE_CHARS_MAX,
};
use planb_ui::pages::{ReviewView, asset, review_page};

const RID: &str = "r1d-5b0e9c3a7f2d4c1e8a6b9d0c2e4f6a8b";
const PATH: &str = "/home/ada/shop/docs/plans/auth-refactor-plan.md";

const ROUND_ONE: &str = "\
# Auth refactor

1. Read the session code
2. Write tests
3. Ship it
";

const ROUND_TWO: &str = "\
# Auth refactor

1. Read the session code
2. Write more tests
3. Ship it
4. Tell the team
";

fn view<'a>(content: &'a str, previous: Option<&'a str>) -> ReviewView<'a> {
    ReviewView {
        plan_name: "auth-refactor",
        round: if previous.is_some() { 2 } else { 1 },
        content,
        previous,
        rid: RID,
        plan_path: PATH,
    }
}

fn page(content: &str, previous: Option<&str>) -> String {
    review_page(&view(content, previous)).into_string()
}

fn tag_with_id<'a>(tags: &'a [StartTag], id: &str) -> Option<&'a StartTag> {
    tags.iter().find(|tag| tag.attribute("id") == Some(id))
}

/// The text of `html` with every tag removed and the page's entities
/// decoded.
fn text_of(html: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

/// The diff as `(kind, old line, new line, screen-reader text)`, one per
/// line, in page order; folded lines included.
fn diff_lines(html: &str) -> Vec<(String, String, String, String)> {
    html.split("<div class=\"diff-line diff-")
        .skip(1)
        .map(|rest| {
            let kind = rest[..rest.find('"').expect("class end")].to_owned();
            let line = &rest[..rest.find("</div>").expect("line end")];
            let cells: Vec<&str> = line
                .split("<span class=\"diff-num\" aria-hidden=\"true\">")
                .collect();
            let number = |cell: &str| text_of(&cell[..cell.find("</span>").expect("number end")]);
            let text_start = line.find("class=\"diff-text\"").expect("diff text");
            let text = text_of(&line[line[..text_start].rfind('<').expect("text tag")..]);
            (kind, number(cells[1]), number(cells[2]), text)
        })
        .collect()
}

fn row(kind: &str, old: &str, new: &str, text: &str) -> (String, String, String, String) {
    (kind.into(), old.into(), new.into(), text.into())
}

#[test]
fn plan_renders_with_its_name_round_and_path() {
    let content = "# Auth refactor\n\nMove sessions to **signed cookies**.\n\n| step | owner |\n|---|---|\n| 1 | ada |\n\n```rust\nfn main() {}\n```\n";
    let html = page(content, None);
    let tags = start_tags(&html);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<title>Review auth-refactor · planb</title>"));
    assert!(html.contains("<h1 class=\"form-title review-title\">auth-refactor</h1>"));
    assert!(html.contains("<span class=\"round-number\">Round 1</span>"));
    assert!(html.contains(&format!("<p class=\"plan-path\" title=\"{PATH}\">")));
    let plan = tag_with_id(&tags, "plan").expect("the plan");
    assert!(plan.has_class("md"), "the plan is styled as Markdown");
    let plan_html = &html[plan.end..];
    assert!(plan_html.starts_with(
        "<h1>Auth refactor</h1>\n<p>Move sessions to <strong>signed cookies</strong>.</p>"
    ));
    assert!(plan_html.contains("<th>step</th>"));
    assert!(plan_html.contains("<pre><code class=\"language-rust\">fn main() {}\n</code></pre>"));
    // Every control the script needs is there.
    for id in [
        "review-form",
        "selection-comment",
        "composer",
        "composer-text",
        "comment-list",
        "comments-limit",
        "feedback",
        "approve",
        "approve-cancel",
        "request-changes",
        "verdict-message",
        "banner",
        "done-approve",
        "done-changes",
    ] {
        assert!(tag_with_id(&tags, id).is_some(), "no element #{id}");
    }
    assert!(html.contains("Approved — the agent can proceed"));
    assert!(html.contains("Changes requested — sent to the agent"));
}

#[test]
fn diff_marks_added_and_removed_lines() {
    let html = page(ROUND_TWO, Some(ROUND_ONE));
    assert_eq!(
        diff_lines(&html),
        [
            row("unchanged", "1", "1", "# Auth refactor"),
            row("unchanged", "2", "2", ""),
            row("unchanged", "3", "3", "1. Read the session code"),
            row("removed", "4", "", "Removed: 2. Write tests"),
            row("added", "", "4", "Added: 2. Write more tests"),
            row("unchanged", "5", "5", "3. Ship it"),
            row("added", "", "6", "Added: 4. Tell the team"),
        ]
    );
    // Removed lines are <del>, added ones <ins>, and the changed words
    // within a changed line are marked.
    assert!(html.contains(
        "<ins class=\"diff-text\"><span class=\"visually-hidden\">Added: </span>2. Write <span class=\"diff-word\">more </span>tests</ins>"
    ));
    assert!(html.contains(
        "<del class=\"diff-text\"><span class=\"visually-hidden\">Removed: </span>2. Write tests</del>"
    ));
    assert!(html.contains(
        "<span class=\"count-added\">2 lines added</span>, <span class=\"count-removed\">1 line removed</span>"
    ));
    assert!(html.contains("<span class=\"visually-hidden\">, 2 lines added, 1 removed</span>"));
    assert!(html.contains("Revised since last round"));
}

#[test]
fn long_unchanged_runs_are_folded_with_context() {
    let old: String = (1..=30).map(|n| format!("- step {n}\n")).collect();
    let new = old.replace("- step 15\n", "- step fifteen\n");
    let html = page(&new, Some(&old));
    let lines = diff_lines(&html);
    assert_eq!(lines.len(), 31, "folded lines stay in the page");
    assert_eq!(html.matches("<details class=\"diff-fold\">").count(), 2);
    assert!(html.contains("<span class=\"fold-show\">Show 11 unchanged lines</span>"));
    assert!(html.contains("<span class=\"fold-show\">Show 12 unchanged lines</span>"));
    // Three lines of context stay visible on each side of the change.
    let visible: Vec<String> = html
        .split("<details")
        .enumerate()
        .flat_map(|(index, part)| {
            let part = if index == 0 {
                part
            } else {
                &part[part.find("</details>").expect("fold end")..]
            };
            diff_lines(part).into_iter().map(|(_, _, _, text)| text)
        })
        .collect();
    assert_eq!(
        visible,
        [
            "- step 12",
            "- step 13",
            "- step 14",
            "Removed: - step 15",
            "Added: - step fifteen",
            "- step 16",
            "- step 17",
            "- step 18",
        ]
    );
}

#[test]
fn first_submission_has_no_changes_view() {
    let html = page(ROUND_ONE, None);
    let tags = start_tags(&html);
    assert!(html.contains("First submission"));
    assert!(!html.contains("role=\"tablist\""), "one view needs no tabs");
    assert!(tag_with_id(&tags, "tab-changes").is_none());
    assert!(tag_with_id(&tags, "panel-changes").is_none());
    assert!(!html.contains("diff-line"));
    let panel = tag_with_id(&tags, "panel-plan").expect("plan panel");
    assert_eq!(panel.attribute("role"), None);
    assert_eq!(panel.attribute("hidden"), None);
}

#[test]
fn second_round_has_plan_and_changes_tabs() {
    let html = page(ROUND_TWO, Some(ROUND_ONE));
    let tags = start_tags(&html);
    let tablist: Vec<&StartTag> = tags
        .iter()
        .filter(|tag| tag.attribute("role") == Some("tablist"))
        .collect();
    assert_eq!(tablist.len(), 1);
    let expect = [
        ("tab-plan", "panel-plan", "true", "0"),
        ("tab-changes", "panel-changes", "false", "-1"),
    ];
    for (tab, panel, selected, tabindex) in expect {
        let tab_tag = tag_with_id(&tags, tab).expect("tab");
        assert_eq!(tab_tag.attribute("role"), Some("tab"));
        assert_eq!(tab_tag.attribute("aria-controls"), Some(panel));
        assert_eq!(tab_tag.attribute("aria-selected"), Some(selected));
        assert_eq!(tab_tag.attribute("tabindex"), Some(tabindex));
        let panel_tag = tag_with_id(&tags, panel).expect("panel");
        assert_eq!(panel_tag.attribute("role"), Some("tabpanel"));
        assert_eq!(panel_tag.attribute("aria-labelledby"), Some(tab));
        assert_eq!(panel_tag.attribute("hidden").is_some(), selected == "false");
    }
}

#[test]
fn unchanged_resubmission_says_so() {
    let html = page(ROUND_ONE, Some(&ROUND_ONE.replace('\n', "\r\n")));
    assert!(html.contains("No changes since round 1"));
    assert!(html.contains("Unchanged since last round"));
    assert!(!html.contains("diff-line"));
    assert!(!html.contains("tab-count"));
}

#[test]
fn rid_appears_only_in_the_data_attribute() {
    let html = page(ROUND_TWO, Some(ROUND_ONE));
    assert_eq!(html.matches(RID).count(), 1, "{html}");
    let tags = start_tags(&html);
    let form = tag_with_id(&tags, "review-form").expect("form");
    assert_eq!(form.attribute("data-rid"), Some(RID));
}

#[test]
fn limits_reach_the_script_from_the_core() {
    assert_eq!(
        (
            REVIEW_COMMENTS_MAX,
            REVIEW_QUOTE_CHARS_MAX,
            REVIEW_COMMENT_CHARS_MAX,
            REVIEW_FEEDBACK_CHARS_MAX
        ),
        (100, 2_000, 10_000, 100_000)
    );
    let html = page(ROUND_ONE, None);
    let tags = start_tags(&html);
    let form = tag_with_id(&tags, "review-form").expect("form");
    assert_eq!(form.attribute("data-comments-max"), Some("100"));
    assert_eq!(form.attribute("data-quote-chars-max"), Some("2000"));
    assert_eq!(form.attribute("data-comment-chars-max"), Some("10000"));
    assert_eq!(form.attribute("data-feedback-chars-max"), Some("100000"));
    assert!(html.contains("shortened to its first 2\u{202f}000 characters"));
}

#[test]
fn page_has_no_inline_script_or_style() {
    assert_no_inline_code(&page(ROUND_ONE, None));
    assert_no_inline_code(&page(ROUND_TWO, Some(ROUND_ONE)));
}

const HOSTILE: &str = "\
# Plan <script>alert('heading')</script>

Click [here](javascript:alert(1)) or [there](JaVaScRiPt:alert(2)).

<img src=x onerror=alert(3)>
<p style=\"color:red\" onclick=\"alert(4)\">styled</p>
<iframe src=\"https://evil.example\"></iframe>

```mermaid
graph TD
A[\"</pre><script>alert(5)</script>\"]
```
";

#[test]
fn agent_markdown_is_neutralised_in_plan_and_diff() {
    let html = page(HOSTILE, Some("# Plan\n"));
    assert_no_inline_code(&html);
    let names: Vec<String> = start_tags(&html).into_iter().map(|tag| tag.name).collect();
    for forbidden in ["iframe", "img", "object", "embed"] {
        assert!(
            !names.iter().any(|n| n == forbidden),
            "<{forbidden}> survived"
        );
    }
    assert_eq!(
        names.iter().filter(|n| *n == "script").count(),
        start_tags(&page("```mermaid\ngraph TD\n```\n", None))
            .iter()
            .filter(|tag| tag.name == "script")
            .count(),
        "only the page's own scripts"
    );
    assert!(
        html.contains(">here</a>") && html.contains(">there</a>"),
        "link text stays"
    );
    assert!(html.contains("<pre class=\"mermaid\">graph TD\nA[\"&lt;/pre&gt;&lt;script&gt;"));
    // The diff shows the source as text.
    assert!(html.contains(
        "<span class=\"visually-hidden\">Added: </span>Click [here](javascript:alert(1))"
    ));
    assert!(html.contains("&lt;iframe src=&quot;https://evil.example&quot;&gt;&lt;/iframe&gt;"));
}

#[test]
fn plan_name_and_path_are_escaped() {
    let review = ReviewView {
        plan_name: "<b>x</b>",
        plan_path: "/tmp/\"><script>alert(1)</script>",
        ..view(ROUND_ONE, None)
    };
    let html = review_page(&review).into_string();
    assert_no_inline_code(&html);
    assert!(html.contains(">&lt;b&gt;x&lt;/b&gt;</h1>"));
    assert!(html.contains("title=\"/tmp/&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;\""));
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

#[test]
fn every_referenced_asset_is_served() {
    let content =
        format!("{ROUND_TWO}\n```mermaid\ngraph TD; A-->B\n```\n\n```rust\nfn main() {{}}\n```\n");
    let html = page(&content, Some(ROUND_ONE));
    let urls = asset_urls(&html);
    for expected in [
        "/assets/form.css",
        "/assets/form.js",
        "/assets/review.css",
        "/assets/review.js",
        "/assets/markdown.js",
        "/assets/vendor/highlight/highlight.min.js",
        "/assets/vendor/mermaid/mermaid.min.js",
    ] {
        assert!(urls.contains(&expected), "{expected} not referenced");
    }
    for url in urls {
        let served = asset(url).unwrap_or_else(|| panic!("{url} is not served"));
        assert!(!served.bytes.is_empty(), "{url} is empty");
        let expected_type = match url.rsplit('.').next() {
            Some("css") => "text/css; charset=utf-8",
            Some("js") => "text/javascript; charset=utf-8",
            Some("svg") => "image/svg+xml",
            other => panic!("unexpected asset type {other:?}"),
        };
        assert_eq!(served.content_type, expected_type, "{url}");
    }
}

#[test]
fn libraries_load_only_when_the_plan_needs_them() {
    let html = page(ROUND_ONE, None);
    assert!(html.contains("markdown.js"), "the plan is Markdown");
    assert!(!html.contains("highlight.min.js"));
    assert!(!html.contains("mermaid.min.js"));
    let html = page("```ts\nconst x = 1;\n```\n", None);
    assert!(html.contains("highlight.min.js"));
    assert!(!html.contains("mermaid.min.js"));
    let html = page("```mermaid\ngraph TD; A-->B\n```\n", None);
    assert!(html.contains("mermaid.min.js"));
    assert!(!html.contains("highlight.min.js"));
}

#[test]
fn review_script_runs_after_the_markdown_script() {
    let html = page("```rust\nfn main() {}\n```\n", None);
    let markdown = html
        .find("src=\"/assets/markdown.js\" defer")
        .expect("markdown.js");
    let review = html
        .find("src=\"/assets/review.js\" defer")
        .expect("review.js");
    assert!(markdown < review, "review.js needs the wrapped code blocks");
    let stylesheet = html
        .find("href=\"/assets/review.css\"")
        .expect("review.css");
    let main = html.find("<main").expect("main");
    assert!(
        stylesheet < main,
        "the stylesheet comes before the content it styles"
    );
}
