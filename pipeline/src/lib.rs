//! dsh's call pipeline ([`pipeline`]: the gate, guards, execution, filters,
//! finalization and observation every call passes) and the [`host`] that assembles it with
//! the engine, the catalog and the capabilities, kept current by [`reload`] and
//! [`config_watch`].
//!
//! Below it are the engine (`dsh_engine`), the capabilities and the launch platform; the
//! MCP server and the binary are above it, so nothing here can name them (see
//! `ARCHITECTURE.md`).

// No `unsafe` here: what needs it is the launch platform's (the `dsh_launch` crate).
#![forbid(unsafe_code)]

// The layers below, at the paths the code above them has always used.
pub use dsh_capabilities::{
    bindings, call, error, for_each_capability, for_each_error_code, glob, output, own_files,
    private, services, traces,
};
pub use dsh_engine::{config, engine, metrics, registry, session};

pub mod config_watch;
pub mod host;
pub mod pipeline;
pub mod reload;
