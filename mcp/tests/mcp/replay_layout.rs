//! Every kind of replay page, over what `planb-mcp demo --auto` records (a
//! session with its form, plan versions, a reviewed named plan, an
//! execution plan and a task), at a laptop's width and a phone's, light and
//! dark, measured in headless Chromium: no page scrolls sideways, no text
//! touches its card's edge, and at 1280 px no text runs in a column too
//! narrow to read.

use std::path::Path;

use planb_projections::DataRoot;
use planb_tests::browser::Browser;

/// Text nearer than this to the card's edge touches it.
const EDGE_PX_MIN: f64 = 8.0;
/// At 1280 px, no paragraph of text in a column narrower than this.
const COLUMN_PX_MIN: f64 = 200.0;

/// The pages to measure, over the data root `root` the demo wrote.
fn pages(root: &Path) -> Vec<String> {
    let (state, _) = crate::support::fold_log(root);
    let session = state
        .sessions()
        .keys()
        .next()
        .expect("a session")
        .to_string();
    let mut pages = vec![
        "/".to_owned(),
        format!("/sessions/{session}"),
        format!("/sessions/{session}/plans/1"),
        format!("/sessions/{session}/plans/1/diff/2"),
    ];
    for key in state.named_plans().keys() {
        pages.push(format!(
            "/named?dir={}&name={}",
            key.dir.replace('/', "%2F"),
            key.name.as_str()
        ));
    }
    for task in state.tasks().values() {
        pages.push(format!("/tasks/{}", task.id));
        if task.plan.is_some() {
            pages.push(format!("/tasks/{}/steps/1", task.id));
        }
    }
    pages
}

/// What is wrong with the page as laid out now, one line each.
const PROBLEMS: &str = r#"(() => {
  const problems = [];
  const overflow = document.documentElement.scrollWidth - window.innerWidth;
  if (overflow > 0) problems.push(`scrolls sideways by ${overflow}px`);
  const card = document.querySelector('main').getBoundingClientRect();
  const texts = document.querySelectorAll('main p, main li, main h1, main h2, main h3, main dd, main td, main blockquote, main pre, main .md > *');
  for (const el of texts) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || el.closest('.dag, .retro-scroll')) continue;
    const name = `${el.tagName.toLowerCase()}.${[...el.classList].join('.')} "${el.textContent.trim().slice(0, 40)}"`;
    const edge = Math.min(r.left - card.left, card.right - r.right);
    if (edge < EDGE_MIN) problems.push(`${name} is ${edge.toFixed(1)}px from the card's edge`);
    const words = el.textContent.trim().length;
    if (window.innerWidth >= 1200 && words >= 30 && r.width < COLUMN_MIN && ['P', 'LI', 'DD', 'TD'].includes(el.tagName))
      problems.push(`${name} runs in a column ${r.width.toFixed(0)}px wide`);
  }
  return JSON.stringify([...new Set(problems)].slice(0, 12));
})()"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: drives Chromium; scripts/test runs it"]
async fn every_replay_page_holds_its_layout_at_1280_and_390_light_and_dark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = planb_tests::model::ModelServer::start(planb_tests::model::Script::INSTANT).await;
    let demo = tokio::process::Command::from(crate::support::demo_auto(dir.path(), &model.spec()))
        .output()
        .await
        .expect("demo");
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stdout)
    );
    let root = DataRoot::new(dir.path());
    let (retro, mut follower) = planb_retro::Retro::open(&root);
    follower.poll(&retro);
    let address = planb_retro::serve(retro, 0)
        .await
        .expect("serve the replay");
    let browser = Browser::start().await;
    let problems = PROBLEMS
        .replace("EDGE_MIN", &EDGE_PX_MIN.to_string())
        .replace("COLUMN_MIN", &COLUMN_PX_MIN.to_string());
    let mut found = Vec::new();
    for (width, height) in [(1280, 900), (390, 844)] {
        browser.resize(width, height).await;
        for theme in ["light", "dark"] {
            for page in pages(dir.path()) {
                browser.open(&format!("http://{address}{page}")).await;
                browser
                    .js(&format!("localStorage.setItem('planb-theme', '{theme}'); document.documentElement.dataset.theme = '{theme}';"))
                    .await;
                let seen = browser.string(&problems).await;
                if seen != "[]" {
                    found.push(format!("{page} at {width}px, {theme}: {seen}"));
                }
                // The theme took: text and background differ as the theme
                // says.
                let dark = browser
                    .check("(() => { const c = getComputedStyle(document.body).backgroundColor.match(/\\d+/g).map(Number); return c[0] + c[1] + c[2] < 300; })()")
                    .await;
                assert_eq!(
                    dark,
                    theme == "dark",
                    "{page}: the {theme} theme is not applied"
                );
            }
        }
    }
    browser.close().await;
    assert!(found.is_empty(), "{}", found.join("\n"));
}
