//! dsh's engine: the WebAssembly [`engine`] (components loaded, bounded, granted and
//! compiled once), the [`registry`] (the catalog of tools the model sees), the whole of
//! `dsh.toml` ([`config`]), the [`session`] (workspace, event log, state directory) and
//! the [`metrics`] registry.
//!
//! Below it are the capabilities (`dsh_capabilities`) and the launch platform; the
//! pipeline and the MCP server are above it, so nothing here can name them (see
//! `ARCHITECTURE.md`).

// No `unsafe` here: what needs it is the launch platform's (the `dsh_launch` crate).
#![forbid(unsafe_code)]

// The layer below, at the paths the code above it has always used.
pub use dsh_capabilities::{
    bindings, call, error, for_each_capability, for_each_error_code, glob, output, own_files,
    private, services, traces,
};

pub mod config;
pub mod engine;
pub mod metrics;
pub mod registry;
pub mod session;
