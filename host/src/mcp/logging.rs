//! MCP logging: the level a client sets (`logging/setLevel`) and a plugin's log line
//! sent as `notifications/message`. A line is marked with the request of the call that
//! logged it, so over streamable HTTP it goes on that call's POST response stream, before
//! the call's result (the patch in `vendor/rmcp`, see its `DSH-PATCH.md`: rmcp alone
//! sends every notification but progress and cancellation on the standalone GET stream,
//! which a client need not open). A line sent once that stream has closed (the client
//! cancelled the call) goes on the GET stream; on stdio the mark changes nothing.
//!
//! rmcp marks these types deprecated (SEP-2577 drops logging from a protocol version
//! after the ones dsh serves); in every version dsh speaks (2024-11-05 to 2025-11-25)
//! they are current, hence the `allow`.
#![allow(deprecated)]

use rmcp::model::{
    LoggingLevel, LoggingMessageNotification, LoggingMessageNotificationParam, RequestId,
    ServerNotification,
};
use rmcp::service::OriginatingRequestId;
use rmcp::RoleServer;
use serde_json::json;

use crate::call::LogLevel;

/// Sends a plugin's log line to the client: logger = the plugin, data = the line, tied to
/// `request`, the call it was logged in.
pub async fn send(
    peer: &rmcp::Peer<RoleServer>,
    request: &RequestId,
    level: LogLevel,
    logger: String,
    message: String,
) {
    let line =
        LoggingMessageNotificationParam::new(mcp_level(level), json!(message)).with_logger(logger);
    let mut notification = LoggingMessageNotification::new(line);
    notification
        .extensions
        .insert(OriginatingRequestId(request.clone()));
    let notification = ServerNotification::LoggingMessageNotification(notification);
    if let Err(error) = peer.send_notification(notification).await {
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
