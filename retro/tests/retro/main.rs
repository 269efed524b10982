//! planb-retro's tests: the replay app in process and as the real binary,
//! its pages in headless Chromium, damaged and long logs, the team view on
//! a private PostgreSQL. One test binary with a module per subject.

mod oneshot;
mod support;

mod app;
mod browser;
mod command_line;
mod connections;
mod damaged;
mod index;
mod long_session;
mod tasks;
mod team;
