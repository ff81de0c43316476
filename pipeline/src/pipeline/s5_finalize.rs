//! Stage 5, finalize: the text is cut to the call's budget (head and tail around an
//! omitted-bytes marker) and the full text is spilled to a file whose path is in the
//! result. Tools should size their content to the call's `output-budget` (bash and
//! job_output do, pointing at their own full-output files); content over it is cut here
//! all the same, so no tool can flood the model.
//!
//! The budget bounds the text items together. When they are over it, they are joined
//! (by newlines) into one text item, at the place of the first, and that is cut. Items
//! that are not text (images, audio, embedded resources) are bounded one by one by
//! [`MAX_BINARY_BYTES`]: an item over it is replaced by a text item saying what was
//! left out (the rest of the result still reaches the model). Resource links carry no
//! bytes. Structured output is not cut (it must match the tool's output schema whole).
//!
//! When the spill file cannot be written (a full disk), the text is still cut, and the
//! marker says the full output could not be kept and why (`spill failed: …`).

use crate::call::{CallContext, CallResult, ContentItem};
use crate::output;

/// The most bytes one image, audio or embedded-resource item may carry (8 MiB, before
/// MCP's base64); a bigger one is replaced by a note.
pub const MAX_BINARY_BYTES: usize = 8 << 20;

/// Bounds `result`: binary items by [`MAX_BINARY_BYTES`], the text by
/// `context.output_budget`.
pub fn finalize(mut result: CallResult, context: &CallContext) -> CallResult {
    cap_binary_items(&mut result);
    let budget = context.output_budget as usize;
    let text_bytes: usize = result
        .content
        .iter()
        .map(|item| match item {
            ContentItem::Text(text) => text.len(),
            _ => 0,
        })
        .sum();
    if text_bytes <= budget {
        return result;
    }
    let text = result.content_text();
    let first = result
        .content
        .iter()
        .position(|item| matches!(item, ContentItem::Text(_)))
        .expect("text over the budget means a text item");
    result
        .content
        .retain(|item| !matches!(item, ContentItem::Text(_)));
    let cut = cut_text(text, budget, context, &mut result.full_output_path);
    result.content.insert(first, ContentItem::Text(cut));
    result
}

/// Replaces every item over [`MAX_BINARY_BYTES`] by a note naming what it was.
fn cap_binary_items(result: &mut CallResult) {
    for item in &mut result.content {
        let bytes = item.binary_len();
        if bytes <= MAX_BINARY_BYTES {
            continue;
        }
        let kind = item.kind();
        let what = match &*item {
            ContentItem::Image(binary) | ContentItem::Audio(binary) => {
                format!("{kind} ({})", binary.mime_type)
            }
            ContentItem::Resource(resource) => format!("{kind} {}", resource.uri),
            _ => kind.to_string(),
        };
        tracing::warn!(%what, bytes, "a result item over the binary cap was left out");
        *item = ContentItem::Text(format!(
            "[{what}: {bytes} bytes left out, over dsh's cap of {MAX_BINARY_BYTES} bytes for one item]"
        ));
    }
}

/// `text` cut to `budget`, the whole spilled to a file (its path put in `full_output_path`).
fn cut_text(
    text: String,
    budget: usize,
    context: &CallContext,
    full_output_path: &mut Option<std::path::PathBuf>,
) -> String {
    let spill_path = context.spill_path("result");
    // A spill that fails still cuts: the marker says the rest is lost, and why.
    let bounded = output::cut(&text, budget, &spill_path);
    *full_output_path = bounded.full_output_path.or(full_output_path.take());
    bounded.text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{Binary, Notices};

    fn context(dir: &std::path::Path) -> CallContext {
        CallContext {
            owner: "o".into(),
            session: "s".into(),
            call_id: "call-9".into(),
            workdir: "/".into(),
            scope: "default".into(),
            tool: "t".into(),
            spill_dir: dir.to_path_buf(),
            output_budget: 100,
            spill_cap: crate::output::DEFAULT_SPILL_CAP,
            notices: Notices::default(),
            sampler: None,
            step: None,
        }
    }

    #[test]
    fn a_spill_that_fails_still_cuts_and_the_marker_says_why() {
        let dir = tempfile::tempdir().unwrap();
        // The spill directory is a file: the spill cannot be written.
        let blocked = dir.path().join("blocked");
        std::fs::write(&blocked, "").unwrap();
        let result = finalize(CallResult::ok("x".repeat(1000)), &context(&blocked));
        let content = result.content_text();
        assert!(content.len() < 400, "{content}");
        // The head before the marker and the tail after it (the marker's words have x's).
        let (head, rest) = content.split_once('…').unwrap();
        let tail = rest.rsplit_once('…').unwrap().1;
        let kept = head.matches('x').count() + tail.matches('x').count();
        assert!(
            content.contains(&format!(
                "{} bytes omitted (spill failed: the full output could not be kept",
                1000 - kept
            )),
            "{content}"
        );
        assert_eq!(result.full_output_path, None);
        assert!(!blocked.join("call-9-result.txt").exists());
    }

    #[test]
    fn long_content_is_cut_and_spilled() {
        let dir = tempfile::tempdir().unwrap();
        let text = "x".repeat(1000);
        let result = finalize(CallResult::ok(text.clone()), &context(dir.path()));
        let content = result.content_text();
        assert!(content.len() < 300);
        assert!(content.contains("900 bytes omitted"));
        let spill = result.full_output_path.unwrap();
        assert_eq!(std::fs::read_to_string(spill).unwrap(), text);
    }

    #[test]
    fn text_items_over_the_budget_become_one_cut_item_and_binary_items_stay() {
        let dir = tempfile::tempdir().unwrap();
        let image = ContentItem::Image(Binary {
            data: vec![7; 5000],
            mime_type: "image/png".into(),
        });
        let mut result = CallResult::ok("a".repeat(600));
        result.content.push(image.clone());
        result.content.push(ContentItem::Text("b".repeat(600)));
        let result = finalize(result, &context(dir.path()));
        assert_eq!(result.content.len(), 2, "{:?}", result.content);
        assert!(matches!(&result.content[0], ContentItem::Text(t) if t.contains("bytes omitted")));
        assert_eq!(
            result.content[1], image,
            "binary items are not counted in the budget"
        );
        let spilled = std::fs::read_to_string(result.full_output_path.unwrap()).unwrap();
        assert_eq!(spilled, format!("{}\n{}", "a".repeat(600), "b".repeat(600)));
    }

    #[test]
    fn a_binary_item_over_the_cap_is_replaced_by_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let mut result = CallResult::ok("small");
        result.content.push(ContentItem::Audio(Binary {
            data: vec![0; MAX_BINARY_BYTES + 1],
            mime_type: "audio/wav".into(),
        }));
        let result = finalize(result, &context(dir.path()));
        let ContentItem::Text(note) = &result.content[1] else {
            panic!("{:?}", result.content[1].kind());
        };
        assert!(
            note.starts_with("[audio (audio/wav): 8388609 bytes left out"),
            "{note}"
        );
    }
}
