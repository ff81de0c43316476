//! dsh's capabilities: the host [`services`] tool plugins act through (one folder per
//! capability, listed once in [`for_each_capability`]), the WIT [`bindings`] they
//! implement, and the foundation every layer above shares: the [`error`] vocabulary, the
//! [`call`] context, [`traces`], the [`output`] spill files and [`private`] state files.
//!
//! Below it is only the launch platform (`dsh_launch`); the engine, the pipeline and the
//! MCP server are above it, so nothing here can name them (see `ARCHITECTURE.md`).

// No `unsafe` here: what needs it is the launch platform's (the `dsh_launch` crate).
#![forbid(unsafe_code)]

pub mod bindings;
pub mod call;
pub mod error;
pub mod generated_page;
pub mod glob;
pub mod output;
pub use dsh_launch::own_files;
pub mod private;
pub mod services;
pub mod tls;
pub mod traces;
