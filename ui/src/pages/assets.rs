//! The static files the pages load, compiled into the binary.
//!
//! The form must work offline and make no request beyond its own server, so
//! every script, stylesheet and licence it refers to is embedded here with
//! `include_bytes!` and served under [`ASSETS_PREFIX`]. The vendored
//! libraries and where they come from are listed in `assets/vendor/README.md`.

/// One embedded file: its bytes and the `Content-Type` to serve them with.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Asset {
    /// The file's content, as shipped.
    pub bytes: &'static [u8],
    /// The `Content-Type` header value, charset included for text.
    pub content_type: &'static str,
}

/// The URL path under which [`asset`] files are served.
pub const ASSETS_PREFIX: &str = "/assets/";

const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const SVG: &str = "image/svg+xml";
const TEXT: &str = "text/plain; charset=utf-8";

/// URL of the form's stylesheet.
pub(super) const FORM_CSS: &str = "/assets/form.css";
/// URL of the form's script.
pub(super) const FORM_JS: &str = "/assets/form.js";
/// URL of the script that highlights code and draws diagrams.
pub(super) const MARKDOWN_JS: &str = "/assets/markdown.js";
/// URL of the review page's stylesheet.
pub(super) const REVIEW_CSS: &str = "/assets/review.css";
/// URL of the review page's script.
pub(super) const REVIEW_JS: &str = "/assets/review.js";
/// URL of the favicon.
pub(super) const RETRO_CSS: &str = "/assets/retro.css";
pub(super) const RETRO_JS: &str = "/assets/retro.js";
pub(super) const FAVICON: &str = "/assets/favicon.svg";
/// URL of highlight.js (common languages bundle).
pub(super) const HIGHLIGHT_JS: &str = "/assets/vendor/highlight/highlight.min.js";
/// URL of the light highlight.js theme.
pub(super) const HIGHLIGHT_LIGHT_CSS: &str = "/assets/vendor/highlight/github.min.css";
/// URL of the dark highlight.js theme.
pub(super) const HIGHLIGHT_DARK_CSS: &str = "/assets/vendor/highlight/github-dark.min.css";
/// URL of mermaid's one-file browser bundle.
pub(super) const MERMAID_JS: &str = "/assets/vendor/mermaid/mermaid.min.js";

/// Every served file, by its path under [`ASSETS_PREFIX`].
const ASSETS: [(&str, Asset); 15] = [
    (
        "retro.css",
        text(include_str!("../../assets/retro.css"), CSS),
    ),
    ("retro.js", text(include_str!("../../assets/retro.js"), JS)),
    ("form.css", text(include_str!("../../assets/form.css"), CSS)),
    ("form.js", text(include_str!("../../assets/form.js"), JS)),
    (
        "review.css",
        text(include_str!("../../assets/review.css"), CSS),
    ),
    // One script written in four parts by concern (see review/1-page.js).
    (
        "review.js",
        text(
            concat!(
                include_str!("../../assets/review/1-page.js"),
                include_str!("../../assets/review/2-anchors.js"),
                include_str!("../../assets/review/3-comments.js"),
                include_str!("../../assets/review/4-verdict.js"),
            ),
            JS,
        ),
    ),
    (
        "markdown.js",
        text(include_str!("../../assets/markdown.js"), JS),
    ),
    (
        "favicon.svg",
        text(include_str!("../../assets/favicon.svg"), SVG),
    ),
    (
        "vendor/README.md",
        text(
            include_str!("../../assets/vendor/README.md"),
            "text/markdown; charset=utf-8",
        ),
    ),
    (
        "vendor/highlight/highlight.min.js",
        text(
            include_str!("../../assets/vendor/highlight/highlight.min.js"),
            JS,
        ),
    ),
    (
        "vendor/highlight/github.min.css",
        text(
            include_str!("../../assets/vendor/highlight/github.min.css"),
            CSS,
        ),
    ),
    (
        "vendor/highlight/github-dark.min.css",
        text(
            include_str!("../../assets/vendor/highlight/github-dark.min.css"),
            CSS,
        ),
    ),
    (
        "vendor/highlight/LICENSE",
        text(include_str!("../../assets/vendor/highlight/LICENSE"), TEXT),
    ),
    (
        "vendor/mermaid/mermaid.min.js",
        text(
            include_str!("../../assets/vendor/mermaid/mermaid.min.js"),
            JS,
        ),
    ),
    (
        "vendor/mermaid/LICENSE",
        text(include_str!("../../assets/vendor/mermaid/LICENSE"), TEXT),
    ),
];

const fn text(content: &'static str, content_type: &'static str) -> Asset {
    Asset {
        bytes: content.as_bytes(),
        content_type,
    }
}

/// The embedded file at `path`, given either relative to [`ASSETS_PREFIX`]
/// (`form.css`) or as the full URL path (`/assets/form.css`); `None` for
/// anything else, so a server can answer 404.
pub fn asset(path: &str) -> Option<Asset> {
    let path = path.strip_prefix(ASSETS_PREFIX).unwrap_or(path);
    ASSETS
        .iter()
        .find(|(name, _)| *name == path)
        .map(|(_, asset)| *asset)
}

/// The paths of every embedded file, relative to [`ASSETS_PREFIX`].
pub fn asset_paths() -> impl Iterator<Item = &'static str> {
    ASSETS.iter().map(|(name, _)| *name)
}
