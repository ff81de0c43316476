//! Stage 5, finalize: the content is cut to the call's budget (head and tail around an
//! omitted-bytes marker) and the full text is spilled to a file whose path is in the
//! result. Tools should size their content to the call's `output-budget` (bash and
//! job_output do, pointing at their own full-output files); content over it is cut here
//! all the same, so no tool can flood the model.

use crate::call::{CallContext, CallResult};
use crate::output;

/// Cuts `result` to `context.output_budget`.
pub fn finalize(mut result: CallResult, context: &CallContext) -> CallResult {
    let budget = context.output_budget as usize;
    if result.content.len() <= budget {
        return result;
    }
    match output::cut(&result.content, budget, &context.spill_path("result")) {
        Ok(bounded) => {
            result.content = bounded.text;
            result.full_output_path = bounded.full_output_path.or(result.full_output_path);
        }
        Err(error) => {
            tracing::error!(%error, "cannot spill a long result; cutting without a spill file");
            let mut end = budget;
            while !result.content.is_char_boundary(end) {
                end -= 1;
            }
            let omitted = result.content.len() - end;
            result.content.truncate(end);
            result.content.push_str(&format!(
                "\n… {omitted} bytes omitted (spill failed: {error}) …\n"
            ));
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_content_is_cut_and_spilled() {
        let dir = tempfile::tempdir().unwrap();
        let context = CallContext {
            owner: "o".into(),
            session: "s".into(),
            call_id: "call-9".into(),
            workdir: "/".into(),
            scope: "default".into(),
            tool: "t".into(),
            spill_dir: dir.path().to_path_buf(),
            output_budget: 100,
            spill_cap: crate::output::DEFAULT_SPILL_CAP,
        };
        let text = "x".repeat(1000);
        let result = finalize(CallResult::ok(text.clone()), &context);
        assert!(result.content.len() < 300);
        assert!(result.content.contains("900 bytes omitted"));
        let spill = result.full_output_path.unwrap();
        assert_eq!(std::fs::read_to_string(spill).unwrap(), text);
    }
}
