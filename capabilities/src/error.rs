//! The error vocabulary the model sees: stable codes with a message. Every failure of a
//! call becomes a [`ToolError`]; nothing a plugin or a process does reaches the model as
//! a crash.

use std::fmt;
use std::sync::LazyLock;

/// The error codes, defined once: the variant, its stable name, and its name in the WIT
/// current contract's `error-code` enum (`-` where it has none). The host enum, its names
/// and the conversions to and from the current contract are generated from this list, so
/// adding a code is a line here and a line in the WIT enum. Frozen versions convert by
/// name in their binding module (`bindings::v0_1_0`); the codes only they have stay here
/// so a plugin built against them is reported as it was.
///
/// `for_each_error_code!(my_macro)` calls `my_macro!` with the whole list.
#[macro_export]
macro_rules! for_each_error_code {
    ($callback:ident) => {
        $callback! {
            /// The arguments do not match the tool's schema, or make no sense.
            InvalidArguments = "INVALID_ARGUMENTS", wit;
            /// No tool of that name is registered in the caller's scope.
            UnknownTool = "UNKNOWN_TOOL", wit;
            /// The gate, a guard or an approval refused the call, or a host interface
            /// refused what the operator's configuration does not allow (a commit into a
            /// read-only extra root of the file tools).
            Denied = "DENIED", wit;
            /// The call ran out of time.
            Timeout = "TIMEOUT", wit;
            /// The caller cancelled the call.
            Cancelled = "CANCELLED", wit;
            /// The plugin trapped.
            PluginTrap = "PLUGIN_TRAP", wit;
            /// The plugin tried to grow its memory past its cap.
            PluginOutOfMemory = "PLUGIN_OUT_OF_MEMORY", wit;
            /// The plugin used more guest CPU than its budget.
            PluginCpuLimit = "PLUGIN_CPU_LIMIT", wit;
            /// Contract 0.1.0 only: a 0.1.0 plugin said it used a capability it was not
            /// granted. The host never gives it (0.2.0 plugins say `DENIED`).
            CapabilityDenied = "CAPABILITY_DENIED", -;
            /// No such resource for this owner (the same for ids that never existed).
            NotFound = "NOT_FOUND", wit;
            /// Contract 0.1.0 only: a 0.1.0 plugin said the resource belongs to another
            /// owner. The host never gives it (another owner's id is `NOT_FOUND`).
            NotOwner = "NOT_OWNER", -;
            /// A terminal already has a send that has not settled.
            SendActive = "SEND_ACTIVE", wit;
            /// The session is closing and takes no more input.
            SessionClosing = "SESSION_CLOSING", wit;
            /// No language server can answer for the file: none is configured for its
            /// extension, its binary is missing, or it died again after its restart.
            LspUnavailable = "LSP_UNAVAILABLE", wit;
            /// A configured limit (count, size) would be exceeded.
            LimitExceeded = "LIMIT_EXCEEDED", wit;
            /// A commit of the file tools would change a file its caller has not read
            /// since the file last changed (or has never read): read it again, then
            /// retry. Nothing was changed.
            StaleFile = "STALE_FILE", wit;
            /// The filesystem refused a read or write the arguments allowed: the disk
            /// is full, the filesystem is read-only, permission is denied. The message
            /// says which (and, for a commit, that nothing was changed).
            IoError = "IO_ERROR", wit;
            /// The MCP client cannot be asked for a model's answer: it did not declare
            /// sampling with tools (`sampling.tools`), or the call has no client to ask
            /// (`dsh call`); for a plugin's plain request, it did not declare sampling.
            /// Nothing ran.
            SamplingUnavailable = "SAMPLING_UNAVAILABLE", wit;
            /// The MCP client cannot be asked for its user's input: it did not declare
            /// elicitation (form mode), or the call has no client to ask. Nothing was
            /// sent.
            ElicitationUnavailable = "ELICITATION_UNAVAILABLE", wit;
            /// An operator's model endpoint (`[subagent.models]`) did not answer or refused:
            /// the message gives the provider's status and its own error text (never the
            /// key or a header), after the retries its configuration allows.
            ModelUnavailable = "MODEL_UNAVAILABLE", wit;
            /// An undo would overwrite a change it did not make: a later call, another
            /// owner's call or something outside dsh changed one of its paths since. The
            /// message names each path and what changed it; nothing was changed.
            UndoConflict = "UNDO_CONFLICT", wit;
            /// A person holds the terminal session (they took it over in the console or
            /// with `dsh attach --write`): nothing was sent. `terminal_read` still works;
            /// sends work again once they release it.
            TerminalHeld = "TERMINAL_HELD", wit;
            /// The host is at its concurrency limit and its admission queue is full: the
            /// call never started; the same call may work a little later. Plugins never
            /// see it (it is given before any plugin runs).
            Busy = "BUSY", -;
            /// The tool's structured output does not match the output schema it declared
            /// (or it declared one and returned none). The tool ran; its result is
            /// withheld. Given after the result filters, so plugins never see it.
            InvalidOutput = "INVALID_OUTPUT", -;
            /// Something went wrong inside dsh itself.
            Internal = "INTERNAL", wit;
        }
    };
}

macro_rules! define_error_codes {
    ($($(#[doc = $doc:literal])* $code:ident = $name:literal, $wit:tt;)*) => {
        /// A stable error code. The string form (`INVALID_ARGUMENTS`, ...) is what
        /// clients see.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $code,)*
        }

        impl ErrorCode {
            /// Every code, in the order of the list.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$code,)*];

            /// The stable, upper-case name of the code.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$code => $name,)*
                }
            }

            /// What the code means: its doc comment in the list, each line trimmed and
            /// joined with spaces (the reference page's text, `docs/src/reference/errors.md`).
            pub fn meaning(self) -> &'static str {
                static MEANINGS: LazyLock<Vec<String>> = LazyLock::new(|| {
                    let docs: &[&[&str]] = &[$(&[$($doc),*],)*];
                    docs.iter().map(|lines| joined_doc(lines)).collect()
                });
                &MEANINGS[self as usize]
            }

            /// Whether the current contract's `error-code` enum has the code (`wit` in
            /// the list): a plugin can return it.
            pub fn in_contract(self) -> bool {
                match self {
                    $(ErrorCode::$code => in_contract!($wit),)*
                }
            }
        }
    };
}

/// Whether a code's WIT column (`wit` or `-`) says the current contract has it.
macro_rules! in_contract {
    (wit) => {
        true
    };
    (-) => {
        false
    };
}

/// A doc comment's lines (as `#[doc]` literals give them) as one line of text: each
/// trimmed, the empty ones dropped, joined with spaces.
fn joined_doc(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|line| line.trim())
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

for_each_error_code!(define_error_codes);

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A structured failure of one call: a stable code and a message for the model.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    pub code: ErrorCode,
    pub message: String,
}

impl ToolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ToolError {
            code,
            message: message.into(),
        }
    }
}

// The reference page of the codes, rendered from this list and checked against the
// committed `docs/src/reference/errors.md`.
#[cfg(test)]
mod error_reference;
