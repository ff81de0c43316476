//! dsh: a native host runtime for AI agent tools.
//!
//! The model declares tool calls; the [`registry`] validates them against the tools'
//! schemas, the [`pipeline`] runs them through the gate, guards, execution, filters and
//! finalization, and tool plugins — WebAssembly components loaded by the [`engine`] —
//! act through the host [`services`], which own every process. See `ARCHITECTURE.md`.

// No `unsafe` here: what needs it is the launch platform's (the `dsh_launch` crate).
#![forbid(unsafe_code)]

// The layers below, at the paths the code above them has always used.
pub use dsh_capabilities::{
    bindings, call, error, for_each_capability, for_each_error_code, glob, output, own_files,
    private, services, traces,
};
pub use dsh_engine::{config, engine, metrics, registry, session};
pub use dsh_pipeline::{config_watch, host, pipeline, reload};

pub mod console;
pub mod control;
pub mod mcp;
#[cfg(test)]
mod tidy;
#[cfg(test)]
mod tidy_docs;
pub mod upgrade;
