//! The `edit` tool's text replacement, keeping the file as it was around the change: in a
//! file with CRLF line endings the `\n`s of the model's text become `\r\n` (the model
//! reads lines without their `\r`), and the file keeps ending (or not ending) with a
//! newline. Also why a text was not found (hints for the model), and the changed region
//! shown back in `cat -n` layout.

use std::ops::Range;

use crate::pager::push_numbered;
use crate::redaction;

/// The text after a replacement.
#[derive(Debug)]
pub struct Replaced {
    pub text: String,
    /// How many occurrences were replaced.
    pub count: usize,
    /// Where each replacement's text lies in `text`.
    pub spans: Vec<Range<usize>>,
}

/// Why nothing was replaced.
#[derive(Debug, PartialEq)]
pub enum Refusal {
    /// The text does not occur.
    NotFound,
    /// The text occurs `count` times, starting on these lines (the first few).
    Ambiguous { count: usize, lines: Vec<usize> },
}

/// The line ending most of `text`'s lines end with (`\n` when there are none).
pub fn dominant_eol(text: &str) -> &'static str {
    if memchr::memchr(b'\r', text.as_bytes()).is_none() {
        return "\n";
    }
    let newlines = memchr::memchr_iter(b'\n', text.as_bytes()).count() as u64;
    let crlf = memchr::memmem::find_iter(text.as_bytes(), b"\r\n").count() as u64;
    match crlf_dominates(newlines, crlf) {
        true => "\r\n",
        false => "\n",
    }
}

/// Whether a file with `line_breaks` line breaks, `crlf` of them `\r\n`, counts as
/// having CRLF line endings: some, and at least as many as plain `\n`.
pub fn crlf_dominates(line_breaks: u64, crlf: u64) -> bool {
    crlf > 0 && crlf >= line_breaks - crlf
}

/// `text` with every line ending made `\r\n`.
pub fn to_crlf(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\n', "\r\n")
}

/// The most occurrence lines an ambiguity names.
const MAX_LINES_NAMED: usize = 20;

/// `text` with `old` replaced by `new`: the one occurrence, or every one with `all`.
/// In a file holding CRLF line endings `old` and `new` are tried with theirs made CRLF
/// first, then as given.
pub fn replace(text: &str, old: &str, new: &str, all: bool) -> Result<Replaced, Refusal> {
    let mut forms = Vec::new();
    // memchr's searches, not `str`'s: they are vectorized (a 1 MB file's search took
    // about 3 ms with `match_indices` in the plugin).
    let crlf = memchr::memchr(b'\r', text.as_bytes()).is_some()
        && memchr::memmem::find(text.as_bytes(), b"\r\n").is_some();
    if crlf && (old.contains('\n') || new.contains('\n')) {
        forms.push((to_crlf(old), to_crlf(new)));
    }
    forms.push((old.to_string(), new.to_string()));
    for (old, new) in &forms {
        if old.is_empty() {
            continue;
        }
        let starts: Vec<usize> =
            memchr::memmem::find_iter(text.as_bytes(), old.as_bytes()).collect();
        match starts.len() {
            0 => continue,
            1 => {}
            count if !all => {
                return Err(Refusal::Ambiguous {
                    count,
                    lines: line_numbers(text, &starts[..count.min(MAX_LINES_NAMED)]),
                })
            }
            _ => {}
        }
        return Ok(splice(text, &starts, old.len(), new));
    }
    Err(Refusal::NotFound)
}

/// `text` with the `len` bytes at each of `starts` replaced by `new`, its final newline
/// (or the lack of one) kept.
fn splice(text: &str, starts: &[usize], len: usize, new: &str) -> Replaced {
    let mut out = String::with_capacity(text.len() + starts.len() * new.len());
    let mut spans = Vec::with_capacity(starts.len());
    let mut at = 0;
    for &start in starts {
        out.push_str(&text[at..start]);
        spans.push(out.len()..out.len() + new.len());
        out.push_str(new);
        at = start + len;
    }
    out.push_str(&text[at..]);
    if !out.is_empty() {
        let had_newline = text.ends_with('\n');
        if had_newline && !out.ends_with('\n') {
            out.push_str(dominant_eol(text));
        } else if !had_newline && out.ends_with('\n') {
            let cut = if out.ends_with("\r\n") { 2 } else { 1 };
            out.truncate(out.len() - cut);
            for span in &mut spans {
                span.end = span.end.min(out.len());
                span.start = span.start.min(span.end);
            }
        }
    }
    Replaced {
        text: out,
        count: starts.len(),
        spans,
    }
}

/// The 1-based line each of the ascending byte offsets `starts` is on.
fn line_numbers(text: &str, starts: &[usize]) -> Vec<usize> {
    let mut lines = Vec::with_capacity(starts.len());
    let (mut line, mut at) = (1, 0);
    for &start in starts {
        line += memchr::memchr_iter(b'\n', &text.as_bytes()[at..start]).count();
        at = start;
        lines.push(line);
    }
    lines
}

/// Why `old` may not have been found in `text`, for the model: a redaction marker, a
/// line-number prefix copied from `read`, whitespace, or text that has changed.
pub fn not_found_hint(text: &str, old: &str) -> String {
    if let Some(marker) = redaction::find_marker(old) {
        return format!(
            "it contains `{marker}`, a marker the redact_secrets filter showed you in place of a secret: \
             the file holds the secret itself, which you never saw. Leave the lines holding secrets out of \
             old_string (edit the lines around them), or change them with bash"
        );
    }
    if old.lines().any(has_line_number_prefix) {
        return "it seems to include the line-number prefix of read's output (spaces, a number, a tab): give the file's own text, without those prefixes".into();
    }
    let wanted: Vec<&str> = trimmed_lines(old);
    if !wanted.is_empty() {
        let file_lines: Vec<&str> = text.lines().collect();
        if let Some(at) = find_lines(&file_lines, &wanted, |a, b| a.trim() == b.trim()) {
            let (first, last) = (at + 1, at + wanted.len());
            return format!(
                "lines {first}-{last} match it when whitespace at the start and end of lines is ignored: copy the exact indentation (tabs or spaces) and trailing spaces from read's output"
            );
        }
        if let Some(at) = file_lines.iter().position(|line| line.contains(wanted[0])) {
            return format!(
                "its first line occurs at line {}, but the lines after it differ from the file: read the file there again and copy the text exactly",
                at + 1
            );
        }
    }
    "read the file again (it may have changed) and copy the text exactly, with its whitespace and line breaks".into()
}

/// True for a line starting like `read`'s output does (`    12\t`).
fn has_line_number_prefix(line: &str) -> bool {
    let rest = line.trim_start_matches(' ');
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0 && rest[digits..].starts_with('\t')
}

/// The lines of `text` without the blank ones at its start and end.
fn trimmed_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.iter().position(|l| !l.trim().is_empty());
    let end = lines.iter().rposition(|l| !l.trim().is_empty());
    match (start, end) {
        (Some(start), Some(end)) => lines[start..=end].to_vec(),
        _ => Vec::new(),
    }
}

/// Where `wanted` occurs in `lines` as consecutive lines equal under `same`.
fn find_lines(lines: &[&str], wanted: &[&str], same: impl Fn(&str, &str) -> bool) -> Option<usize> {
    if wanted.len() > lines.len() {
        return None;
    }
    (0..=lines.len() - wanted.len())
        .find(|&at| wanted.iter().zip(&lines[at..]).all(|(w, l)| same(l, w)))
}

/// The lines of `text` around each of `spans` (with `context` lines on either side) in
/// `cat -n` layout, groups apart by a `...` line, at most `max_lines` lines in all.
pub fn changed_region(
    text: &str,
    spans: &[Range<usize>],
    context: usize,
    max_lines: usize,
) -> String {
    // Each span's first and last line.
    let mut offsets: Vec<usize> = Vec::with_capacity(spans.len() * 2);
    for span in spans {
        offsets.push(span.start);
        offsets.push(if span.end > span.start {
            span.end - 1
        } else {
            span.start
        });
    }
    let mut order: Vec<usize> = (0..offsets.len()).collect();
    order.sort_by_key(|&i| offsets[i]);
    let sorted: Vec<usize> = order.iter().map(|&i| offsets[i]).collect();
    let numbers = line_numbers(text, &sorted);
    let mut line_of = vec![0; offsets.len()];
    for (k, &i) in order.iter().enumerate() {
        line_of[i] = numbers[k];
    }
    let mut groups: Vec<(usize, usize)> = Vec::new();
    for pair in line_of.chunks(2) {
        let first = pair[0].saturating_sub(context).max(1);
        // Past the file's last line the walk below simply ends: the whole file need
        // not be counted for it.
        let last = pair[1] + context;
        match groups.last_mut() {
            Some(group) if first <= group.1 + 1 => group.1 = group.1.max(last),
            _ => groups.push((first, last)),
        }
    }
    let mut out = String::new();
    let mut shown = 0;
    let mut group = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let number = index + 1;
        while group < groups.len() && number > groups[group].1 {
            group += 1;
        }
        if group == groups.len() {
            break;
        }
        if number < groups[group].0 {
            continue;
        }
        if shown == max_lines {
            let left = groups.len() - group;
            out.push_str(&format!(
                "[... the rest not shown: {left} more changed place{}]\n",
                if left == 1 { "" } else { "s" }
            ));
            return out;
        }
        if number == groups[group].0 && group > 0 && !out.is_empty() {
            out.push_str("   ...\n");
        }
        push_numbered(&mut out, number, line);
        shown += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replaced(text: &str, old: &str, new: &str) -> String {
        replace(text, old, new, false).unwrap().text
    }

    #[test]
    fn a_unique_occurrence_is_replaced() {
        assert_eq!(replaced("a\nb\nc\n", "b", "B"), "a\nB\nc\n");
        let r = replace("one two three\n", "two", "2", false).unwrap();
        assert_eq!((r.count, r.spans[0].clone()), (1, 4..5));
    }

    #[test]
    fn missing_and_ambiguous_texts_are_refused_with_their_lines() {
        assert_eq!(
            replace("a\nb\n", "x", "y", false).unwrap_err(),
            Refusal::NotFound
        );
        let text = "x = 1\ny = 2\nx = 1\n\nx = 1\n";
        assert_eq!(
            replace(text, "x = 1", "x = 3", false).unwrap_err(),
            Refusal::Ambiguous {
                count: 3,
                lines: vec![1, 3, 5]
            }
        );
        let all = replace(text, "x = 1", "x = 3", true).unwrap();
        assert_eq!(all.count, 3);
        assert_eq!(all.text, "x = 3\ny = 2\nx = 3\n\nx = 3\n");
    }

    #[test]
    fn a_crlf_file_keeps_crlf_when_the_model_gives_lf_text() {
        let text = "fn a() {\r\n    1\r\n}\r\nfn b() {}\r\n";
        let out = replaced(text, "fn a() {\n    1\n}", "fn a() {\n    2\n    3\n}");
        assert_eq!(out, "fn a() {\r\n    2\r\n    3\r\n}\r\nfn b() {}\r\n");
        // Text given with CRLF already works as well.
        let out = replaced(text, "    1\r\n", "    4\r\n");
        assert_eq!(out, "fn a() {\r\n    4\r\n}\r\nfn b() {}\r\n");
        // One line, no line break in it: nothing to convert.
        assert_eq!(
            replaced(text, "fn b() {}", "fn c() {}"),
            "fn a() {\r\n    1\r\n}\r\nfn c() {}\r\n"
        );
    }

    #[test]
    fn a_file_without_a_final_newline_keeps_it_that_way_and_one_with_keeps_it() {
        assert_eq!(replaced("a\nb", "b", "c"), "a\nc");
        assert_eq!(replaced("a\nb", "b", "c\n"), "a\nc");
        assert_eq!(replaced("a\nb", "a\nb", "x\ny\n"), "x\ny");
        assert_eq!(replaced("a\nb\n", "b\n", "c"), "a\nc\n");
        assert_eq!(replaced("a\r\nb\r\n", "b\n", "c"), "a\r\nc\r\n");
        assert_eq!(replaced("a\r\nb", "b", "c\n"), "a\r\nc");
        // Removing everything leaves an empty file.
        assert_eq!(replaced("a\n", "a\n", ""), "");
    }

    #[test]
    fn eol_detection_follows_the_majority() {
        assert_eq!(dominant_eol("a\r\nb\r\nc\n"), "\r\n");
        assert_eq!(dominant_eol("a\nb\nc\r\n"), "\n");
        assert_eq!(dominant_eol("abc"), "\n");
        assert_eq!(to_crlf("a\nb\r\nc"), "a\r\nb\r\nc");
    }

    #[test]
    fn hints_name_markers_prefixes_whitespace_and_changed_text() {
        let text = "fn main() {\n\tlet key = \"AKIA...\";\n\tprintln!();\n}\n";
        assert!(
            not_found_hint(text, "let key = \"[REDACTED:aws-access-key-id]\";")
                .contains("redact_secrets")
        );
        assert!(not_found_hint(text, "     2\t\tlet key").contains("line-number prefix"));
        let hint = not_found_hint(text, "    let key = \"AKIA...\";\n    println!();");
        assert!(
            hint.starts_with("lines 2-3 match it when whitespace"),
            "{hint}"
        );
        let hint = not_found_hint(text, "fn main() {\n    other();");
        assert!(
            hint.starts_with("its first line occurs at line 1"),
            "{hint}"
        );
        assert!(not_found_hint(text, "nothing like it").starts_with("read the file again"));
    }

    #[test]
    fn the_changed_region_is_shown_with_context_and_line_numbers() {
        let text: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        let r = replace(&text, "line 10\n", "ten\nTEN\n", false).unwrap();
        let region = changed_region(&r.text, &r.spans, 2, 50);
        assert_eq!(
            region,
            "     8\tline 8\n     9\tline 9\n    10\tten\n    11\tTEN\n    12\tline 11\n    13\tline 12\n"
        );
        // Deleting a line: the lines around where it was.
        let r = replace(&text, "line 5\n", "", false).unwrap();
        let region = changed_region(&r.text, &r.spans, 1, 50);
        assert_eq!(region, "     4\tline 4\n     5\tline 6\n     6\tline 7\n");
        // At the end, with and without a final newline: the context stops at the last line.
        let r = replace(&text, "line 20\n", "twenty\n", false).unwrap();
        let region = changed_region(&r.text, &r.spans, 3, 50);
        assert_eq!(
            region,
            "    17\tline 17\n    18\tline 18\n    19\tline 19\n    20\ttwenty\n"
        );
        let r = replace("a\nb", "b", "c", false).unwrap();
        assert_eq!(
            changed_region(&r.text, &r.spans, 3, 50),
            "     1\ta\n     2\tc\n"
        );
    }

    #[test]
    fn far_apart_changes_are_separate_groups_and_the_region_is_capped() {
        let text: String = (1..=100)
            .map(|i| format!("{}\n", if i % 30 == 0 { "x" } else { "." }))
            .collect();
        let r = replace(&text, "x", "y", true).unwrap();
        assert_eq!(r.count, 3);
        let region = changed_region(&r.text, &r.spans, 1, 100);
        assert_eq!(region.matches("   ...\n").count(), 2);
        assert!(region.contains("    30\ty\n") && region.contains("    90\ty\n"));
        let capped = changed_region(&r.text, &r.spans, 1, 4);
        assert!(
            capped.ends_with("[... the rest not shown: 2 more changed places]\n"),
            "{capped}"
        );
    }
}
