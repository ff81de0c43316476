//! Stage 6, result observers: they see every finished call and change nothing. The
//! session event log gets its `tool/result` event here.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::call::{CallRequest, CallResult};
use crate::session::Session;

/// The observers of finished calls.
pub struct Observers {
    session: Arc<Session>,
}

impl Observers {
    pub fn new(session: Arc<Session>) -> Self {
        Observers { session }
    }

    /// Records a finished call.
    pub fn result(
        &self,
        call_id: &str,
        request: &CallRequest,
        result: &CallResult,
        elapsed: Duration,
    ) {
        self.session.events.write(
            "tool/result",
            json!({
                "call_id": call_id,
                "owner": &*request.owner,
                "tool": request.tool,
                "is_error": result.is_error(),
                "code": result.error.as_ref().map(|e| e.code),
                "message": result.error.as_ref().map(|e| &e.message),
                "content_bytes": result.content.len(),
                "full_output_path": result.full_output_path,
                "duration_us": elapsed.as_micros() as u64,
            }),
        );
    }
}
