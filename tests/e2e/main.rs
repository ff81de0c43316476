//! End-to-end tests: they start the real `dsh` binary with the real embedded plugins (and
//! the test plugins built from `plugins/`) and check what a user sees. One module per
//! area.

mod mcp_stdio;
mod python_env;
mod support;

mod admission;
mod agent_clients;
mod attach;
mod bash_tool;
mod confined_view;
mod container_executor;
mod containment;
mod contract;
mod cpu_budget;
mod egress;
mod egress_world;
mod environment;
mod event_log;
mod files_never_block;
mod fresh_instances;
mod full_disk;
mod guards;
mod languages;
mod live_config;
mod local_secrets;
mod long_running;
mod lsp;
mod mcp_clients;
mod mcp_typescript;
mod middleware;
mod network_grants;
mod operator_view;
mod plugin_cli;
mod plugin_loading;
mod private_state;
mod reference_pages;
mod rewrite;
mod sandbox;
mod sandbox_executor;
mod sandbox_files;
mod sandbox_syscalls;
mod stdio_ends;
mod tool_manuals;
mod undo;
