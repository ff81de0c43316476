//! The `read` tool: a text file as numbered lines (a page of it, bounded by lines and by
//! the output budget), an image as an image, and a clear refusal for binary files and
//! directories. The read goes through the host so that it counts for freshness.

use dsh_plugin::{
    content, text, BinaryContent, CallContext, ContentItem, ErrorCode, ToolError, ToolResult,
};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{invalid, result_budget, Files, Settings};
use crate::pager::{self, MAX_PAGE_LINES};
use crate::paths;
use crate::sniff::{binary_reason, image_mime};

pub const DESCRIPTION: &str = "Read a file of the workspace. A text file comes back as numbered lines in `cat -n` layout: \
the line number, a tab, then the line (the number and tab are not part of the file: leave them out of edit's old_string). \
One call shows up to 2000 lines from `offset` (1-based, default 1), fewer when the page reaches the output budget; \
the last line gives the file's line count and the `offset` to read on with. Lines over 2000 characters are cut with a marker. \
Images (PNG, JPEG, GIF, WebP) come back as images. Binary files are refused (inspect them with bash: `file`, `xxd`), \
and so are directories (list them with glob). Read a file before you change it with edit, write or apply_patch: \
they refuse to change a file that changed since you last read it, or that you never read (STALE_FILE).";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// The file: relative to the workspace (e.g. `src/main.rs`) or absolute inside it.
    #[schemars(length(min = 1), extend("format" = "path"))]
    pub path: String,
    /// The first line to show, 1-based (default 1). To read on, pass the `offset` the
    /// previous page's last line names.
    #[schemars(range(min = 1))]
    pub offset: Option<u64>,
    /// The most lines to show (default and maximum 2000).
    #[schemars(range(min = 1, max = 2000))]
    pub limit: Option<u64>,
}

pub fn run(files: &dyn Files, context: &CallContext, args: Args) -> Result<ToolResult, ToolError> {
    let path = paths::resolve(&context.workdir, &args.path, "path")?;
    let shown = paths::display(&context.workdir, &path);
    if files.is_dir(&path) {
        return Err(invalid(format!(
            "{shown} is a directory, not a file: list what is in it with glob (pattern `*`, or `**/*` for every depth, with path `{shown}`), or search it with grep"
        )));
    }
    let max_bytes = Settings::of(context).max_read_bytes();
    let offset = args.offset.unwrap_or(1).max(1);
    let limit = args.limit.map_or(MAX_PAGE_LINES, |l| l as usize);
    let with_hint = |mut e: ToolError| {
        if e.code == ErrorCode::LimitExceeded {
            e.message.push_str(
                ". Look into it with grep (it searches files of any size) or with bash (`head -n 100`, `sed -n '5000,5100p'`)",
            );
        }
        e
    };
    // The model sees the contents: the read counts for freshness. Only the page crosses
    // into the plugin; the host counts the whole file's lines.
    let file = files
        .read_lines(
            &path,
            max_bytes,
            true,
            offset,
            limit.min(MAX_PAGE_LINES) as u32,
        )
        .map_err(with_hint)?;
    let shown = if file.path.is_empty() {
        shown
    } else {
        file.path.clone()
    };
    if let Some(mime) = image_mime(&file.head) {
        // An image is shown whole.
        let bytes = files
            .read(&path, max_bytes, true)
            .map_err(with_hint)?
            .contents;
        return Ok(content(vec![
            ContentItem::Text(format!("{shown}: a {mime} image of {} bytes", bytes.len())),
            ContentItem::Image(BinaryContent {
                mime_type: mime.to_string(),
                data: bytes,
            }),
        ]));
    }
    if let Some(why) = binary_reason(&file.head, file.invalid_utf8_at.map(|at| at as usize)) {
        return Err(invalid(format!(
            "{shown} is a binary file of {} bytes: {why}. read shows text files and images only; inspect it with bash, e.g. `file {shown}` or `xxd {shown} | head -40`",
            file.size
        )));
    }
    if file.size == 0 {
        return Ok(text(format!("{shown} is empty (0 bytes).")));
    }
    let lines = std::str::from_utf8(&file.lines).map_err(|_| {
        dsh_plugin::error(
            ErrorCode::Internal,
            format!("the host returned lines of {shown} that are not UTF-8, though it found the file UTF-8"),
        )
    })?;
    // A byte order mark is not shown; a file holding only one has no lines.
    const BOM: &str = "\u{feff}";
    let total = match file.size == BOM.len() as u64 && file.head.starts_with(BOM.as_bytes()) {
        true => 0,
        false => file.total_lines,
    };
    let lines = match offset {
        1 => lines.strip_prefix(BOM).unwrap_or(lines),
        _ => lines,
    };
    if offset > total {
        return Err(invalid(format!(
            "offset {offset} is past the end of {shown}: it has {total} line{}",
            if total == 1 { "" } else { "s" }
        )));
    }
    let budget = result_budget(context);
    let page = pager::page_of(lines, offset as usize, total as usize, limit, budget);
    let mut notes = Vec::new();
    let line_breaks = total - u64::from(!file.final_newline);
    if crate::replace::crlf_dominates(line_breaks, file.crlf_lines) {
        notes.push("the file has CRLF line endings (edit and apply_patch keep them; give text with plain line breaks)");
    }
    if !file.final_newline && page.last == page.total {
        notes.push("no newline at the end of the file");
    }
    let footer = page.footer(budget, &notes);
    let mut out = page.text;
    out.push_str(&footer);
    Ok(text(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::memory::Memory;
    use crate::tools::result_budget;
    use crate::tools::testing::{context, failed, ok_text};

    fn read(files: &Memory, args: serde_json::Value) -> ToolResult {
        let args: Args = serde_json::from_value(args).unwrap();
        run(files, &context(), args).into()
    }

    #[test]
    fn a_text_file_comes_back_numbered_with_its_footer() {
        let files = Memory::new();
        files.put("src/a.rs", "fn main() {\n}\n");
        let out = ok_text(read(&files, serde_json::json!({"path": "src/a.rs"})));
        assert_eq!(
            out,
            "     1\tfn main() {\n     2\t}\n[end of file: 2 lines]"
        );
    }

    #[test]
    fn paging_a_big_file_names_the_next_offset_and_stays_in_the_budget() {
        let files = Memory::new();
        let big: String = (1..=100_000).map(|i| format!("line {i}\n")).collect();
        files.put("big.txt", &big);
        let out = ok_text(read(&files, serde_json::json!({"path": "/ws/big.txt"})));
        assert!(out.len() <= 30_000, "{}", out.len());
        let footer = out.lines().last().unwrap();
        assert!(
            footer.contains("of 100000") && footer.contains("output budget"),
            "{footer}"
        );
        let page = ok_text(read(
            &files,
            serde_json::json!({"path": "big.txt", "offset": 99_998, "limit": 5}),
        ));
        assert_eq!(
            page,
            " 99998\tline 99998\n 99999\tline 99999\n100000\tline 100000\n[lines 99998-100000 of 100000; end of file]"
        );
        let (code, message) = failed(read(
            &files,
            serde_json::json!({"path": "big.txt", "offset": 100_001}),
        ));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(message.contains("past the end of big.txt: it has 100000 lines"));
    }

    #[test]
    fn a_byte_order_mark_is_not_shown_and_a_file_of_one_has_no_lines() {
        let files = Memory::new();
        files.put("bom.txt", "\u{feff}first\nsecond\n");
        assert_eq!(
            ok_text(read(&files, serde_json::json!({"path": "bom.txt"}))),
            "     1\tfirst\n     2\tsecond\n[end of file: 2 lines]"
        );
        assert_eq!(
            ok_text(read(
                &files,
                serde_json::json!({"path": "bom.txt", "offset": 2})
            )),
            "     2\tsecond\n[line 2 of 2; end of file]"
        );
        files.put("only.txt", "\u{feff}");
        for offset in [1, 2] {
            let (code, message) = failed(read(
                &files,
                serde_json::json!({"path": "only.txt", "offset": offset}),
            ));
            assert_eq!(code, ErrorCode::InvalidArguments);
            assert!(message.contains("it has 0 lines"), "{message}");
        }
    }

    #[test]
    fn every_page_of_a_file_is_the_page_of_its_whole_text() {
        // The tool pages what `read-lines` sends; `pager::page` pages the whole text.
        let text: String = (1..=300)
            .map(|i| format!("{}{}\n", "x".repeat(i % 7 * 400), i))
            .collect();
        let files = Memory::new();
        files.put("p.txt", &text);
        for (offset, limit, budget) in [
            (1, 2000, 30_000),
            (17, 5, 30_000),
            (250, 100, 4000),
            (300, 1, 100),
        ] {
            let mut context = context();
            context.output_budget = budget as _;
            let args: Args = serde_json::from_value(
                serde_json::json!({"path": "p.txt", "offset": offset, "limit": limit}),
            )
            .unwrap();
            let out = ok_text(run(&files, &context, args).into());
            let page = pager::page(&text, offset, limit, result_budget(&context)).unwrap();
            assert!(out.starts_with(&page.text), "{offset} {limit} {budget}");
            assert_eq!(
                &out[page.text.len()..],
                page.footer(result_budget(&context), &[])
            );
        }
    }

    #[test]
    fn crlf_and_a_missing_final_newline_are_mentioned() {
        let files = Memory::new();
        files.put("w.txt", "a\r\nb");
        let out = ok_text(read(&files, serde_json::json!({"path": "w.txt"})));
        assert!(
            out.starts_with("     1\ta\n     2\tb\n[end of file: 2 lines; the file has CRLF"),
            "{out}"
        );
        assert!(out.ends_with("; no newline at the end of the file]"));
    }

    #[test]
    fn images_binaries_empty_files_directories_and_missing_files() {
        let files = Memory::new();
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDRdata".to_vec();
        files.put("img/logo.png", &png);
        let result = read(&files, serde_json::json!({"path": "img/logo.png"}));
        match result.content.as_slice() {
            [ContentItem::Text(t), ContentItem::Image(image)] => {
                assert!(t.contains("image/png"));
                assert_eq!((image.mime_type.as_str(), &image.data), ("image/png", &png));
            }
            other => panic!("{other:?}"),
        }

        files.put("app.bin", b"\x7fELF\x02\x01\0\0");
        let (code, message) = failed(read(&files, serde_json::json!({"path": "app.bin"})));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(
            message.contains("binary") && message.contains("xxd app.bin"),
            "{message}"
        );

        files.put("latin1.txt", b"caf\xe9\n");
        let (code, message) = failed(read(&files, serde_json::json!({"path": "latin1.txt"})));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(message.contains("not UTF-8"));

        files.put("empty.txt", "");
        assert_eq!(
            ok_text(read(&files, serde_json::json!({"path": "empty.txt"}))),
            "empty.txt is empty (0 bytes)."
        );

        let (code, message) = failed(read(&files, serde_json::json!({"path": "img"})));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(message.contains("is a directory") && message.contains("glob"));

        let (code, _) = failed(read(&files, serde_json::json!({"path": "nope.txt"})));
        assert_eq!(code, ErrorCode::NotFound);

        let (code, message) = failed(read(&files, serde_json::json!({"path": ""})));
        assert_eq!(code, ErrorCode::InvalidArguments);
        assert!(message.contains("empty"));
    }

    #[test]
    fn a_file_over_the_size_setting_is_limit_exceeded_with_what_to_do() {
        let files = Memory::new();
        files.put("log.txt", "x".repeat(2000));
        let mut context = context();
        context.settings_json = r#"{"max_read_bytes": 1000}"#.into();
        let args: Args = serde_json::from_value(serde_json::json!({"path": "log.txt"})).unwrap();
        let (code, message) = failed(run(&files, &context, args).into());
        assert_eq!(code, ErrorCode::LimitExceeded);
        assert!(message.contains("grep"), "{message}");
    }

    #[test]
    fn long_lines_are_cut_with_a_marker() {
        let files = Memory::new();
        files.put("min.js", format!("{}\n", "x".repeat(2500)));
        let out = ok_text(read(&files, serde_json::json!({"path": "min.js"})));
        assert!(
            out.contains("… [line cut: 500 more characters]"),
            "{}",
            &out[out.len() - 200..]
        );
        assert!(out.contains("lines over 2000 characters were cut"));
    }
}
