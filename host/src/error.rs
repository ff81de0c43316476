//! The error vocabulary the model sees: stable codes with a message. Every failure of a
//! call becomes a [`ToolError`]; nothing a plugin or a process does reaches the model as
//! a crash.

use std::fmt;

/// A stable error code. The string form (`INVALID_ARGUMENTS`, ...) is what clients see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    InvalidArguments,
    UnknownTool,
    Denied,
    Timeout,
    Cancelled,
    PluginTrap,
    PluginOutOfMemory,
    PluginCpuLimit,
    CapabilityDenied,
    NotFound,
    NotOwner,
    SendActive,
    SessionClosing,
    LspUnavailable,
    LimitExceeded,
    /// The host is at its concurrency limit and its admission queue is full: the call
    /// never started; the same call may work a little later.
    Busy,
    Internal,
}

impl ErrorCode {
    /// The stable, upper-case name of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArguments => "INVALID_ARGUMENTS",
            ErrorCode::UnknownTool => "UNKNOWN_TOOL",
            ErrorCode::Denied => "DENIED",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::Cancelled => "CANCELLED",
            ErrorCode::PluginTrap => "PLUGIN_TRAP",
            ErrorCode::PluginOutOfMemory => "PLUGIN_OUT_OF_MEMORY",
            ErrorCode::PluginCpuLimit => "PLUGIN_CPU_LIMIT",
            ErrorCode::CapabilityDenied => "CAPABILITY_DENIED",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::NotOwner => "NOT_OWNER",
            ErrorCode::SendActive => "SEND_ACTIVE",
            ErrorCode::SessionClosing => "SESSION_CLOSING",
            ErrorCode::LspUnavailable => "LSP_UNAVAILABLE",
            ErrorCode::LimitExceeded => "LIMIT_EXCEEDED",
            ErrorCode::Busy => "BUSY",
            ErrorCode::Internal => "INTERNAL",
        }
    }
}

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
