//! End-to-end tests: they start the real `dsh` binary with the real embedded plugins (and
//! the test plugins built from `plugins/`) and check what a user sees. One module per
//! area.

// Some of the client's methods serve only the containment tests (another branch).
#[allow(dead_code)]
mod mcp_stdio;
mod support;

mod bash_tool;
mod environment;
mod event_log;
mod guards;
mod long_running;
mod mcp_clients;
mod plugin_loading;
mod sandbox;
mod tool_manuals;
