//! MCP logging: the level a client sets (`logging/setLevel`) and a plugin's log line
//! sent as `notifications/message`. rmcp marks these types deprecated (SEP-2577 drops
//! logging from a protocol version after the ones dsh serves); in every version dsh
//! speaks (2024-11-05 to 2025-11-25) they are current, hence the `allow`.
#![allow(deprecated)]

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::RoleServer;
use serde_json::json;

use crate::call::LogLevel;

/// Sends a plugin's log line to the client: logger = the plugin, data = the line.
pub async fn send(peer: &rmcp::Peer<RoleServer>, level: LogLevel, logger: String, message: String) {
    let line =
        LoggingMessageNotificationParam::new(mcp_level(level), json!(message)).with_logger(logger);
    if let Err(error) = peer.notify_logging_message(line).await {
        tracing::debug!(%error, "a log notification could not be sent");
    }
}

/// MCP's level for a plugin line's level.
fn mcp_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Notice => LoggingLevel::Notice,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
        LogLevel::Critical => LoggingLevel::Critical,
        LogLevel::Alert => LoggingLevel::Alert,
        LogLevel::Emergency => LoggingLevel::Emergency,
    }
}

/// The host's level for the level a client set.
pub fn host_level(level: LoggingLevel) -> LogLevel {
    match level {
        LoggingLevel::Debug => LogLevel::Debug,
        LoggingLevel::Info => LogLevel::Info,
        LoggingLevel::Notice => LogLevel::Notice,
        LoggingLevel::Warning => LogLevel::Warning,
        LoggingLevel::Error => LogLevel::Error,
        LoggingLevel::Critical => LogLevel::Critical,
        LoggingLevel::Alert => LogLevel::Alert,
        LoggingLevel::Emergency => LogLevel::Emergency,
    }
}
