//! planb-ui's tests: every page rendered and checked, and the review page.
//! One test binary with a module per subject.

#[path = "../../src/html_scan.rs"]
mod html_scan;

mod pages;
mod review_page;
