//! dsh: a native host runtime for AI agent tools.
//!
//! The model declares tool calls; the [`registry`] validates them against the tools'
//! schemas, the [`pipeline`] runs them through the gate, guards, execution, filters and
//! finalization, and tool plugins — WebAssembly components loaded by the [`engine`] —
//! act through the host [`services`], which own every process. See `ARCHITECTURE.md`.

// No `unsafe` here: what needs it is the launch platform's (the `dsh_launch` crate).
#![forbid(unsafe_code)]

pub mod bindings;
pub mod call;
pub mod config;
pub mod config_watch;
pub mod control;
pub mod engine;
pub mod error;
pub mod glob;
pub mod host;
pub mod mcp;
pub mod metrics;
pub mod output;
pub use dsh_launch::own_files;
pub mod pipeline;
pub mod private;
pub mod registry;
pub mod reload;
pub mod services;
pub mod session;
#[cfg(test)]
mod tidy;
pub mod traces;
pub mod upgrade;
