//! The `ask_user` form in headless Chromium: a person fills and submits the
//! real page served by the real `planb-mcp` binary, while the agent's call
//! waits over stdio. Needs Debian's `chromium` and `chromium-driver`
//! (`scripts/test` installs them); without them every test here fails.

use crate::support::browser::{Asked, ask};
use crate::support::{recorded_kinds, text_of};
use fantoccini::key::Key;
use planb_tests::browser::Browser;
use serde_json::{Value, json};

/// Starts the ask and a browser on its form.
async fn open_form(spec: Value, env: &[(&str, &str)]) -> (Asked, Browser) {
    let asked = ask(spec, env).await;
    let browser = Browser::start().await;
    browser.open(&asked.url).await;
    browser
        .wait_until(
            "the form's script to start",
            "document.readyState === 'complete'",
        )
        .await;
    (asked, browser)
}

/// Which tab is selected, which panel shows, and where the focus is.
async fn assert_on_tab(browser: &Browser, index: usize, focused: &str) {
    let selected = browser
        .eval("[...document.querySelectorAll('[role=tab]')].map(t => t.getAttribute('aria-selected') === 'true')")
        .await;
    let selected: Vec<bool> = serde_json::from_value(selected).expect("booleans");
    let expected: Vec<bool> = (0..selected.len()).map(|i| i == index).collect();
    assert_eq!(selected, expected, "aria-selected of the tabs");
    assert!(
        browser.is_visible(&format!("#panel-{index}")).await,
        "panel {index} is not shown"
    );
    let others_hidden = browser
        .check(&format!(
            "[...document.querySelectorAll('.panel')].every((p, i) => i === {index} || p.hidden)"
        ))
        .await;
    assert!(others_hidden, "a panel other than {index} is shown");
    assert_eq!(browser.focused_id().await, focused, "focus on tab {index}");
}

async fn submit_disabled(browser: &Browser) -> bool {
    browser
        .check("document.getElementById('submit').disabled")
        .await
}

/// For each tab, whether it carries the "unanswered required" class and its
/// dot is drawn.
async fn missing_dots(browser: &Browser) -> Vec<(bool, bool)> {
    let value = browser
        .eval(
            "[...document.querySelectorAll('[role=tab]')].map(t => [t.classList.contains('has-missing'), \
             getComputedStyle(t.querySelector('.tab-dot')).display !== 'none'])",
        )
        .await;
    serde_json::from_value(value).expect("pairs of booleans")
}

async fn wait_for_thanks(browser: &Browser) {
    browser
        .wait_until(
            "the thanks state",
            "!document.getElementById('done').hidden && document.getElementById('ask-form').hidden",
        )
        .await;
}

#[tokio::test]
#[ignore = "slow: drives Chromium; scripts/test runs it"]
async fn keyboard_alone_fills_every_kind_across_tabs_and_submits() {
    let spec = json!({
        "title": "Keyboard only",
        "introTitle": "Start here",
        "intro": "Use the keyboard.",
        "questions": [
            {"id": "name", "kind": "text", "label": "Name", "required": true, "tab": "About"},
            {"id": "summary", "kind": "longtext", "label": "Summary", "tab": "About"},
            {"id": "language", "kind": "single", "label": "Language", "required": true,
             "options": ["Rust", "Go", "Zig"], "tab": "Choices"},
            {"id": "integrations", "kind": "multi", "label": "Integrations",
             "options": ["GitHub", "Slack", "Linear"], "tab": "Choices"},
            {"id": "priority", "kind": "scale", "label": "Priority", "min": 1, "max": 5, "step": 1,
             "required": true, "tab": "Rating"}
        ]
    });
    let (mut asked, browser) = open_form(spec, &[]).await;
    assert_eq!(browser.text("#tab-0 .tab-label").await, "Start here");

    // The tab strip: Right and Left step, End and Home jump.
    browser.tab_to("tab-0", false, 6).await;
    assert_on_tab(&browser, 0, "tab-0").await;
    browser.press(Key::Right).await;
    assert_on_tab(&browser, 1, "tab-1").await;
    browser.press(Key::Right).await;
    assert_on_tab(&browser, 2, "tab-2").await;
    browser.press(Key::Left).await;
    assert_on_tab(&browser, 1, "tab-1").await;
    browser.press(Key::End).await;
    assert_on_tab(&browser, 3, "tab-3").await;
    browser.press(Key::Home).await;
    assert_on_tab(&browser, 0, "tab-0").await;
    browser.press(Key::Left).await;
    assert_on_tab(&browser, 3, "tab-3").await;
    browser.press(Key::Right).await;
    assert_on_tab(&browser, 0, "tab-0").await;
    browser.press(Key::Right).await;
    assert_on_tab(&browser, 1, "tab-1").await;

    // Text fields keep their native keys, Enter included.
    browser.press(Key::Tab).await;
    assert_eq!(browser.focused_id().await, "input-name");
    browser.type_text("Aurora").await;
    browser.press(Key::Tab).await;
    assert_eq!(browser.focused_id().await, "input-summary");
    browser.type_text("Line one").await;
    browser.press(Key::Enter).await;
    browser.type_text("line two").await;

    // Back to the tab strip, then the next tab.
    browser.tab_to("tab-1", true, 3).await;
    browser.press(Key::Right).await;
    assert_on_tab(&browser, 2, "tab-2").await;

    // A single choice: Down and Up move without choosing, Space chooses.
    browser.press(Key::Tab).await;
    assert_eq!(browser.focused_id().await, "input-language-0");
    browser.press(Key::Down).await;
    browser.press(Key::Down).await;
    assert_eq!(browser.focused_id().await, "input-language-2");
    browser.press(Key::Up).await;
    assert_eq!(browser.focused_id().await, "input-language-1");
    assert!(
        browser
            .check("!document.querySelector('#q-language .option-input:checked')")
            .await,
        "moving between options must not choose one"
    );
    browser.press(Key::Space).await;
    assert!(
        browser
            .check("document.getElementById('input-language-1').checked")
            .await
    );

    // Several choices: Space and Enter toggle.
    browser.press(Key::Tab).await;
    assert_eq!(browser.focused_id().await, "input-integrations-0");
    browser.press(Key::Space).await;
    browser.press(Key::Down).await;
    browser.press(Key::Down).await;
    browser.press(Key::Enter).await;
    browser.press(Key::Up).await;
    assert_eq!(browser.focused_id().await, "input-integrations-1");
    browser.press(Key::Enter).await;
    browser.press(Key::Enter).await;
    let checked = browser
        .eval("[...document.querySelectorAll('#q-integrations .option-input')].map(i => i.checked)")
        .await;
    assert_eq!(checked, json!([true, false, true]));

    // From an option, Right moves to the next tab.
    browser.press(Key::Right).await;
    assert_on_tab(&browser, 3, "tab-3").await;
    assert!(submit_disabled(&browser).await, "the scale is still unset");

    // The slider keeps its native keys.
    browser.press(Key::Tab).await;
    assert_eq!(browser.focused_id().await, "input-priority");
    browser.press(Key::End).await;
    assert_eq!(browser.text("#value-priority").await, "5");
    browser.press(Key::Home).await;
    assert_eq!(browser.text("#value-priority").await, "1");
    for _ in 0..3 {
        browser.press(Key::Right).await;
    }
    assert_eq!(browser.text("#value-priority").await, "4");

    browser.tab_to("submit", false, 4).await;
    assert!(!submit_disabled(&browser).await);
    browser.press(Key::Enter).await;
    wait_for_thanks(&browser).await;
    assert_eq!(
        browser.text("#done-title").await,
        "Thanks — your answers were sent"
    );

    assert_eq!(
        asked.answers().await,
        json!({
            "name": "Aurora",
            "summary": "Line one\nline two",
            "language": "Go",
            "integrations": ["GitHub", "Linear"],
            "priority": 4
        })
    );
    browser.close().await;
    asked.stop().await;
}

#[tokio::test]
#[ignore = "slow: drives Chromium; scripts/test runs it"]
async fn submit_waits_for_every_required_answer_and_dots_follow() {
    let spec = json!({
        "title": "Required",
        "questions": [
            {"id": "name", "kind": "text", "label": "Name", "required": true, "tab": "Identity"},
            {"id": "nickname", "kind": "text", "label": "Nickname", "tab": "Identity"},
            {"id": "language", "kind": "single", "label": "Language", "required": true,
             "options": ["Rust", "Go"], "tab": "Stack"},
            {"id": "tools", "kind": "multi", "label": "Tools", "required": true,
             "options": ["cargo", "clippy"], "tab": "Stack"},
            {"id": "effort", "kind": "scale", "label": "Effort", "min": 1, "max": 10, "step": 1,
             "required": true, "tab": "Effort"},
            {"id": "notes", "kind": "longtext", "label": "Notes", "tab": "Effort"}
        ]
    });
    let (mut asked, browser) = open_form(spec, &[]).await;
    let all_missing = vec![(true, true); 3];
    assert!(submit_disabled(&browser).await);
    assert_eq!(missing_dots(&browser).await, all_missing);
    assert_eq!(browser.text("#progress").await, "0 of 4 required answered");

    // Optional answers and blank text change nothing.
    browser.send_keys("#input-nickname", "Ada").await;
    browser.send_keys("#input-name", "   ").await;
    assert!(submit_disabled(&browser).await);
    assert_eq!(missing_dots(&browser).await, all_missing);

    browser
        .send_keys("#input-name", &format!("{0}{0}{0}Ada", Key::Backspace))
        .await;
    assert!(submit_disabled(&browser).await);
    assert_eq!(
        missing_dots(&browser).await,
        [(false, false), (true, true), (true, true)]
    );

    browser.click("#tab-1").await;
    browser.click_option("language", 0).await;
    assert!(submit_disabled(&browser).await);
    assert_eq!(
        missing_dots(&browser).await,
        [(false, false), (true, true), (true, true)],
        "the multi question on the same tab is still unanswered"
    );
    browser.click_option("tools", 1).await;
    assert!(submit_disabled(&browser).await);
    assert_eq!(
        missing_dots(&browser).await,
        [(false, false), (false, false), (true, true)]
    );

    browser.click("#tab-2").await;
    browser
        .send_keys("#input-effort", &Key::Home.to_string())
        .await;
    assert!(!submit_disabled(&browser).await);
    assert_eq!(missing_dots(&browser).await, vec![(false, false); 3]);
    assert_eq!(browser.text("#progress").await, "4 of 4 required answered");

    // Taking an answer back disables Submit again.
    browser.click("#tab-1").await;
    browser.click_option("tools", 1).await;
    assert!(submit_disabled(&browser).await);
    assert_eq!(
        missing_dots(&browser).await,
        [(false, false), (true, true), (false, false)]
    );
    browser.click_option("tools", 0).await;
    assert!(!submit_disabled(&browser).await);

    browser.click("#tab-2").await;
    browser.click("#submit").await;
    wait_for_thanks(&browser).await;
    assert_eq!(
        asked.answers().await,
        json!({"name": "Ada", "nickname": "Ada", "language": "Rust", "tools": ["cargo"], "effort": 1})
    );
    browser.close().await;
    asked.stop().await;
}

#[tokio::test]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn a_server_rejection_shows_under_its_question_and_marks_its_tab() {
    let spec = json!({
        "title": "Rejected",
        "questions": [
            {"id": "name", "kind": "text", "label": "Name", "required": true, "tab": "Basics"},
            {"id": "language", "kind": "single", "label": "Language", "required": true,
             "options": ["Rust", "Go"], "tab": "Stack"}
        ]
    });
    let (mut asked, browser) = open_form(spec, &[]).await;
    browser.send_keys("#input-name", "Aurora").await;
    browser.click("#tab-1").await;
    // The option's value is rewritten after the page loaded: the browser
    // then sends a value the spec does not know, which only the server sees.
    browser
        .js("document.getElementById('input-language-1').value = 'Cobol';")
        .await;
    browser.click_option("language", 1).await;
    browser.click("#submit").await;

    browser
        .wait_until(
            "the message under the rejected question",
            "!document.getElementById('error-language').hidden",
        )
        .await;
    let message = browser.text("#error-language").await;
    assert!(
        message.contains("Cobol") && message.contains("is not one of the options"),
        "{message:?}"
    );
    assert!(
        browser
            .check("document.getElementById('q-language').classList.contains('has-error')")
            .await
    );
    assert!(
        browser
            .check("document.getElementById('error-name').hidden")
            .await
    );
    let tab_errors = browser
        .eval("[...document.querySelectorAll('[role=tab]')].map(t => t.classList.contains('has-error'))")
        .await;
    assert_eq!(tab_errors, json!([false, true]));
    assert!(browser.is_visible("#tab-1 .tab-dot").await);
    assert!(browser.is_visible("#banner").await);
    assert!(browser.is_visible("#panel-1").await);
    assert!(
        !asked.pending.is_finished(),
        "a rejected submission reached the agent: {:?}",
        asked.pending
    );

    // Choosing a known option clears the error, and the form still submits.
    browser.click_option("language", 0).await;
    assert!(
        browser
            .check("document.getElementById('error-language').hidden")
            .await
    );
    let tab_errors = browser
        .eval("[...document.querySelectorAll('[role=tab]')].map(t => t.classList.contains('has-error'))")
        .await;
    assert_eq!(tab_errors, json!([false, false]));
    browser.click("#submit").await;
    wait_for_thanks(&browser).await;
    assert_eq!(
        asked.answers().await,
        json!({"name": "Aurora", "language": "Rust"})
    );
    browser.close().await;
    asked.stop().await;
}

#[tokio::test]
#[ignore = "slow: starts PostgreSQL; scripts/test runs it"]
async fn markdown_renders_and_the_side_panel_follows_the_focused_option() {
    let intro = "\
| Option | Cost |
|--------|------|
| Small  | 1    |

- first point
- second point

Read [the docs](https://example.com/docs).

```rust
fn main() { let answer = 42; println!(\"{answer}\"); }
```

```mermaid
graph TD
  Start --> Finish
```
";
    let spec = json!({
        "title": "Markdown",
        "intro": intro,
        "questions": [
            {"id": "store", "kind": "single", "label": "Storage", "tab": "Storage", "options": [
                {"value": "Postgres", "markdown": "**Postgres** is relational"},
                {"value": "Redis", "markdown": "*Redis* keeps data in memory"},
                "SQLite"
            ]}
        ]
    });
    let (asked, browser) = open_form(spec, &[]).await;
    assert_eq!(
        browser.missing_assets().await,
        Vec::<String>::new(),
        "the page refers to assets its server does not serve"
    );

    let headers = browser
        .eval("[...document.querySelectorAll('.intro table th')].map(e => e.textContent.trim())")
        .await;
    assert_eq!(headers, json!(["Option", "Cost"]));
    let items = browser
        .eval("[...document.querySelectorAll('.intro li')].map(e => e.textContent.trim())")
        .await;
    assert_eq!(items, json!(["first point", "second point"]));
    let link = browser
        .eval("(a => a && [a.getAttribute('href'), a.getAttribute('rel'), a.textContent])(document.querySelector('.intro a'))")
        .await;
    assert_eq!(link[0], "https://example.com/docs");
    assert!(
        link[1]
            .as_str()
            .is_some_and(|rel| rel.split(' ').any(|r| r == "noopener")),
        "{link}"
    );
    assert_eq!(link[2], "the docs");
    browser
        .wait_until(
            "highlighted Rust code",
            "document.querySelector('.intro pre code.language-rust.hljs span[class^=\"hljs-\"]') !== null",
        )
        .await;
    assert!(
        browser
            .text(".intro pre code")
            .await
            .contains("let answer = 42;")
    );
    browser
        .wait_until(
            "the mermaid diagram as SVG",
            "document.querySelector('.intro .diagram svg') !== null",
        )
        .await;
    let diagram_text = browser.text_content(".intro .diagram svg").await;
    assert!(
        diagram_text.contains("Finish"),
        "the diagram shows its nodes: {diagram_text:?}"
    );
    assert!(
        !browser
            .check("document.querySelector('.diagram-failed') !== null")
            .await
    );

    // The side panel follows the focused option.
    browser.click("#tab-1").await;
    browser.press(Key::Tab).await;
    assert_eq!(browser.focused_id().await, "input-store-0");
    assert!(browser.is_visible("#ill-store-0").await);
    assert!(!browser.is_visible("#ill-store-1").await);
    assert_eq!(browser.text("#ill-store-0").await, "Postgres is relational");
    assert!(
        browser
            .check("document.querySelector('#ill-store-0 strong') !== null")
            .await
    );
    assert_eq!(
        browser.text_content("#panel-1 .illustration-caption").await,
        "Postgres"
    );

    browser.press(Key::Down).await;
    assert_eq!(browser.focused_id().await, "input-store-1");
    assert!(browser.is_visible("#ill-store-1").await);
    assert!(!browser.is_visible("#ill-store-0").await);
    assert_eq!(
        browser.text("#ill-store-1").await,
        "Redis keeps data in memory"
    );
    assert_eq!(
        browser.text_content("#panel-1 .illustration-caption").await,
        "Redis"
    );

    browser.press(Key::Down).await;
    assert!(!browser.is_visible("#ill-store-1").await);
    assert_eq!(
        browser.text("#panel-1 .illustration-none").await,
        "No details for SQLite."
    );
    browser.close().await;
    asked.stop().await;
}

#[tokio::test]
#[ignore = "slow: drives Chromium; scripts/test runs it"]
async fn agent_markdown_cannot_run_script() {
    let payload = "\
<script>window.__xss=1</script>

<img src=x onerror=\"window.__xss=2\">

[click](javascript:window.__xss=3)

<a href=\"javascript:window.__xss=4\">x</a>
";
    let spec = json!({
        "title": "Hostile",
        "intro": format!("Intro.\n\n{payload}"),
        "questions": [
            {"id": "pick", "kind": "single", "label": "Pick", "tab": "Pick", "options": [
                {"value": "A", "markdown": format!("Option A.\n\n{payload}")},
                "B"
            ]}
        ]
    });
    let (asked, browser) = open_form(spec, &[]).await;
    // The payload's harmless parts made it to the page, so it was rendered.
    assert!(browser.text(".intro").await.contains("click"));

    let clickable =
        "[...document.querySelectorAll('.md a')].filter(a => a.getClientRects().length > 0).length";
    let intro_links = browser.eval(clickable).await;
    assert_eq!(intro_links, json!(2), "both links of the intro show");
    for index in 0..2 {
        click_visible_link(&browser, index).await;
    }
    browser.click("#tab-1").await;
    assert!(browser.is_visible("#ill-pick-0").await);
    assert!(browser.text("#ill-pick-0").await.contains("click"));
    for index in 0..2 {
        click_visible_link(&browser, index).await;
    }
    browser
        .wait_until(
            "the page to finish loading",
            "document.readyState === 'complete'",
        )
        .await;

    assert!(
        browser.check("typeof window.__xss === 'undefined'").await,
        "agent markdown ran script: window.__xss = {}",
        browser.eval("String(window.__xss)").await
    );
    let javascript_urls = browser
        .eval(
            "[...document.querySelectorAll('*')].flatMap(e => [...e.attributes]) \
             .filter(a => a.value.replace(/\\s/g, '').toLowerCase().includes('javascript:')) \
             .map(a => a.name + '=' + a.value)",
        )
        .await;
    assert_eq!(javascript_urls, json!([]), "javascript: URLs in the DOM");
    let handlers = browser
        .eval(
            "[...document.querySelectorAll('.md *')].flatMap(e => [...e.attributes]) \
             .filter(a => a.name.startsWith('on')).map(a => a.name)",
        )
        .await;
    assert_eq!(
        handlers,
        json!([]),
        "event handler attributes in rendered markdown"
    );
    assert!(
        browser
            .check("document.querySelector('.md script') === null")
            .await,
        "a script element in rendered markdown"
    );
    browser.close().await;
    asked.stop().await;
}

/// Clicks the `index`-th rendered link in the page's Markdown.
async fn click_visible_link(browser: &Browser, index: usize) {
    let links = browser
        .client()
        .find_all(fantoccini::Locator::Css(".md a"))
        .await
        .expect("links");
    let mut visible = Vec::new();
    for link in links {
        if link.is_displayed().await.expect("displayed") {
            visible.push(link);
        }
    }
    let link = visible
        .get(index)
        .unwrap_or_else(|| panic!("no visible link {index} of {}", visible.len()));
    link.click().await.expect("click link");
}

#[tokio::test]
#[ignore = "slow: drives Chromium; scripts/test runs it"]
async fn an_answer_after_the_timeout_is_recorded_and_the_page_says_so() {
    let spec = json!({
        "title": "Late",
        "questions": [{"id": "name", "kind": "text", "label": "Name", "required": true}]
    });
    let mut asked = ask(spec, &[("ASK_ANSWER_TIMEOUT_MS", "500")]).await;
    let result = asked.result().await;
    let text = text_of(&result);
    assert!(text.contains("timed out"), "{text}");

    let browser = Browser::start().await;
    browser.open(&asked.url).await;
    browser.send_keys("#input-name", "Later").await;
    browser.click("#submit").await;
    wait_for_thanks(&browser).await;
    assert!(
        browser
            .check("document.getElementById('done').classList.contains('is-late')")
            .await
    );
    assert_eq!(
        browser.text("#done-title").await,
        "Your answers were recorded"
    );
    assert!(
        browser.text("#done-text").await.contains("moved on"),
        "{}",
        browser.text("#done-text").await
    );
    browser.close().await;

    let dir = asked.stop().await;
    let kinds = recorded_kinds(dir.path());
    assert!(kinds.contains(&"ask_timed_out"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "ask_late_answer").count(),
        1,
        "{kinds:?}"
    );
}
