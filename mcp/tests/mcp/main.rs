//! planb-mcp's tests through its front doors: the real binary, spoken to
//! by a real MCP client over stdio, the callback server over HTTP, headless
//! Chromium, the command line, real downstream servers and a private
//! PostgreSQL. One test binary (one link) with a module per subject;
//! `support` is what they share.

mod support;

mod admin;
mod browser;
mod damage_and_rebuild;
mod exec_plans;
mod jsonrpc;
mod kill9;
mod layout_at_reply;
mod limits;
mod pending_forms;
mod plan_tools;
mod plans;
mod plans_concurrent;
mod real_clients;
mod replay_layout;
mod review_browser;
mod server;
mod short_timeouts;
mod shutdown;
mod tasks;
mod team;
mod terminal;
mod unwell_servers;
