//! `dsh_plugin` (package `dsh-plugin-sdk`): write dsh plugins in Rust against the
//! contract `dsh:plugin@0.2.0` (`wit/v0.2.0`).
//!
//! - A **tool plugin** implements [`Tools`]: a list of [`Tool`]s, each a name, a
//!   description and a handler taking a typed argument struct
//!   (`serde::Deserialize` + `schemars::JsonSchema`). The tool's input schema is derived
//!   from that struct (doc comments become descriptions, see [`schema_for`]); a call's
//!   arguments are parsed into it before the handler runs, and a parse failure answers
//!   `invalid-arguments` without running it.
//! - A **guard** implements [`Guard`] (`check`), a **result filter** [`Filter`]
//!   (`filter`), a **middleware** [`Middleware`] (`handle`: it runs the rest of the
//!   call with [`middleware::next`] and counts across calls with [`middleware::tally`])
//!   and an **observer** [`Observer`] (`observe`: it sees each [`ObservedEvent`] of the
//!   event log, and reads its settings from it with [`observer::settings`]): the contract's own
//!   traits.
//! - [`export!`] names the world the plugin targets and exports it:
//!   `export!(tool: T)`, `export!(tool_process: T)`, `export!(tool_terminal: T)`,
//!   `export!(tool_lsp: T)`, `export!(tool_files: T)`, `export!(tool_subagent: T)`,
//!   `export!(tool_client: T)`, `export!(guard: T)`, `export!(result_filter: T)`,
//!   `export!(middleware: T)` or `export!(observer: T)`.
//! - Results: [`text`], [`content`], [`structured`], [`failure`], and `?` on a host
//!   call (its [`ToolError`] becomes the failed result).
//!
//! Each world has its module here ([`tool`], [`tool_process`], [`tool_terminal`],
//! [`tool_lsp`], [`tool_files`], [`tool_subagent`], [`tool_client`], [`guard`],
//! [`result_filter`], [`middleware`], [`observer`]) holding the host interfaces that
//! world imports (`tool_process::process`, `tool_terminal::terminal`,
//! `tool_files::files`, `middleware::next`, ...). The bindings are generated once per
//! world with wit-bindgen's `pub_export_macro`: the world's exports
//! reach a component only through the `export!` it invokes, and a component imports
//! only the host interfaces it calls (wit-component drops the others), so a plugin that
//! uses its world's modules imports its world's interfaces and nothing more.
//!
//! ```
//! use dsh_plugin::{text, CallContext, Tool, ToolResult, Tools};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct Args {
//!     /// Who to greet.
//!     name: String,
//! }
//!
//! struct Hello;
//!
//! impl Tools for Hello {
//!     fn tools() -> Vec<Tool> {
//!         vec![Tool::new("hello", "Greet someone.", hello).idempotent()]
//!     }
//! }
//!
//! fn hello(_context: &CallContext, args: Args) -> ToolResult {
//!     text(format!("hello, {}", args.name))
//! }
//!
//! dsh_plugin::export!(tool: Hello);
//! # fn main() {
//! #     let spec = &dsh_plugin::describe(&Hello::tools())[0];
//! #     assert!(spec.input_schema.contains(r#""description":"Who to greet.""#));
//! # }
//! ```
//!
//! A middleware runs the rest of the call itself (here once, noting a failure for the
//! model):
//!
//! ```
//! use dsh_plugin::middleware::next;
//! use dsh_plugin::{ContentItem, Middleware, PendingCall, ToolResult};
//!
//! struct Explain;
//!
//! impl Middleware for Explain {
//!     fn handle(call: PendingCall) -> ToolResult {
//!         let result = next::run(None);
//!         if result.error.is_none() {
//!             return result;
//!         }
//!         let note = format!("{} failed: check its arguments", call.tool);
//!         result.with_item(ContentItem::Text(note))
//!     }
//! }
//!
//! dsh_plugin::export!(middleware: Explain);
//! # fn main() {}
//! ```

mod results;
mod schema;
mod tools;

pub use results::{content, error, failure, structured, text};
pub use schema::{schema_for, schema_text};
pub use tools::{call, describe, parse_args, Tool, Tools};

pub use guard::{Guest as Guard, Verdict};
pub use middleware::Guest as Middleware;
pub use observer::{Guest as Observer, ObservedEvent};
pub use result_filter::Guest as Filter;
pub use types::{
    BinaryContent, CallContext, ContentItem, EmbeddedResource, ErrorCode, PendingCall,
    ResourceContents, ResourceLink, ToolError, ToolResult, ToolSpec,
};

/// The types every world shares (`dsh:plugin/types`).
pub use tool::dsh::plugin::types;

/// The `tool` world: imports `log` and `progress` (neither needs more than its grant;
/// `progress` needs none).
pub mod tool {
    wit_bindgen::generate!({
        path: "../../wit/v0.2.0",
        world: "tool",
        pub_export_macro: true,
        // `types` is shared by every world module below, guards' `pending-call` included.
        generate_unused_types: true,
    });
    pub use self::dsh::plugin::{log, progress};
}

/// Bindings of a world beyond `tool`: its own interfaces generated in the module it is
/// invoked in, the shared ones (`types`, `log`, and `progress` for a tool world) taken
/// from [`tool`]. A world that uses no type of `types` (`observer`) says `log only`:
/// wit-bindgen refuses a remapping it does not use.
macro_rules! bindings {
    (tool world $world:literal) => {
        bindings!($world, "dsh:plugin/progress@0.2.0": crate::tool::dsh::plugin::progress,);
    };
    (log only $world:literal) => {
        wit_bindgen::generate!({
            path: "../../wit/v0.2.0",
            world: $world,
            pub_export_macro: true,
            with: {
                "dsh:plugin/log@0.2.0": crate::tool::dsh::plugin::log,
            },
        });
    };
    ($world:literal $(, $($more:tt)*)?) => {
        wit_bindgen::generate!({
            path: "../../wit/v0.2.0",
            world: $world,
            pub_export_macro: true,
            with: {
                "dsh:plugin/types@0.2.0": crate::tool::dsh::plugin::types,
                "dsh:plugin/log@0.2.0": crate::tool::dsh::plugin::log,
                $($($more)*)?
            },
        });
    };
}

/// The `tool-process` world: `tool`'s imports plus `process` and `jobs`.
pub mod tool_process {
    bindings!(tool world "tool-process");
    pub use self::dsh::plugin::{jobs, process};
    pub use crate::tool::{log, progress};
}

/// The `tool-terminal` world: `tool`'s imports plus `terminal`.
pub mod tool_terminal {
    bindings!(tool world "tool-terminal");
    pub use self::dsh::plugin::terminal;
    pub use crate::tool::{log, progress};
}

/// The `tool-lsp` world: `tool`'s imports plus `lsp`.
pub mod tool_lsp {
    bindings!(tool world "tool-lsp");
    pub use self::dsh::plugin::lsp;
    pub use crate::tool::{log, progress};
}

/// The `tool-files` world: `tool`'s imports plus `files` (reads the host remembers and
/// atomic commits; the workspace itself is a read-only WASI preopen at its own path) and
/// `undo` (the caller's recent calls that changed files, and putting one's changes back).
pub mod tool_files {
    bindings!(tool world "tool-files");
    pub use self::dsh::plugin::{files, undo};
    pub use crate::tool::{log, progress};
}

/// The `tool-subagent` world: `tool`'s imports plus `subagent` (the host's loop that
/// asks the client's model, with the caller's tools).
pub mod tool_subagent {
    bindings!(tool world "tool-subagent");
    pub use self::dsh::plugin::subagent;
    pub use crate::tool::{log, progress};
}

/// The `tool-client` world: `tool`'s imports plus `sampling` (ask the caller's client's
/// model) and `elicitation` (ask its user to fill in a form); each needs its grant.
pub mod tool_client {
    bindings!(tool world "tool-client");
    pub use self::dsh::plugin::{elicitation, sampling};
    pub use crate::tool::{log, progress};
}

/// The `guard` world: imports `log`; exports `check`.
pub mod guard {
    bindings!("guard");
    pub use crate::tool::log;
}

/// The `result-filter` world: imports `log`; exports `filter`.
pub mod result_filter {
    bindings!("result-filter");
    pub use crate::tool::log;
}

/// The `middleware` world: imports `log`, `next` (run the rest of the call: the
/// middleware after this one, the host's execute stage and the tool) and `tally` (counts
/// the host keeps for this plugin across calls, in sliding windows); exports `handle`.
pub mod middleware {
    bindings!("middleware");
    pub use self::dsh::plugin::{next, tally};
    pub use crate::tool::log;
}

/// The `observer` world: imports `log`; exports `observe`, which sees one record of the
/// event log (an [`ObservedEvent`]: its kind and its JSON text) off the call's path.
pub mod observer {
    bindings!(log only "observer");
    pub use crate::tool::log;

    /// This observer's settings from `dsh.toml` (`[plugins.NAME.settings]`), which come
    /// with every record, as `T`; `T`'s default when there are none or they do not parse.
    pub fn settings<T: serde::de::DeserializeOwned + Default>(event: &ObservedEvent) -> T {
        serde_json::from_str(&event.settings_json).unwrap_or_default()
    }
}

/// Exports `$ty` as the plugin of a world: `tool`, `tool_process`, `tool_terminal`,
/// `tool_lsp`, `tool_files`, `tool_subagent` or `tool_client` for a type implementing
/// [`Tools`], `guard` for a [`Guard`], `result_filter` for a [`Filter`], `middleware`
/// for a [`Middleware`], `observer` for an [`Observer`]. Invoke it once, at the plugin
/// crate's root.
#[macro_export]
macro_rules! export {
    (tool: $ty:ident) => {
        $crate::__export_tools!(tool, __export_tool_impl, $ty);
    };
    (tool_process: $ty:ident) => {
        $crate::__export_tools!(tool_process, __export_tool_process_impl, $ty);
    };
    (tool_terminal: $ty:ident) => {
        $crate::__export_tools!(tool_terminal, __export_tool_terminal_impl, $ty);
    };
    (tool_lsp: $ty:ident) => {
        $crate::__export_tools!(tool_lsp, __export_tool_lsp_impl, $ty);
    };
    (tool_files: $ty:ident) => {
        $crate::__export_tools!(tool_files, __export_tool_files_impl, $ty);
    };
    (tool_subagent: $ty:ident) => {
        $crate::__export_tools!(tool_subagent, __export_tool_subagent_impl, $ty);
    };
    (tool_client: $ty:ident) => {
        $crate::__export_tools!(tool_client, __export_tool_client_impl, $ty);
    };
    (guard: $ty:ident) => {
        $crate::__export_guard_impl!($ty with_types_in $crate::guard);
    };
    (result_filter: $ty:ident) => {
        $crate::__export_result_filter_impl!($ty with_types_in $crate::result_filter);
    };
    (middleware: $ty:ident) => {
        $crate::__export_middleware_impl!($ty with_types_in $crate::middleware);
    };
    (observer: $ty:ident) => {
        $crate::__export_observer_impl!($ty with_types_in $crate::observer);
    };
}

/// The body of [`export!`] for a tool world: the world's `Guest` answered from the
/// type's [`Tools`], then wit-bindgen's export of that world.
#[doc(hidden)]
#[macro_export]
macro_rules! __export_tools {
    ($world:ident, $export:ident, $ty:ident) => {
        impl $crate::$world::Guest for $ty {
            fn describe() -> ::std::vec::Vec<$crate::ToolSpec> {
                $crate::describe(&<$ty as $crate::Tools>::tools())
            }

            fn call(
                context: $crate::CallContext,
                name: ::std::string::String,
                args_json: ::std::string::String,
            ) -> $crate::ToolResult {
                $crate::call(
                    &<$ty as $crate::Tools>::tools(),
                    &context,
                    &name,
                    &args_json,
                )
            }
        }

        $crate::$export!($ty with_types_in $crate::$world);
    };
}
