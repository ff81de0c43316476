//! Applying an update's hunks to a file's text, as Codex's `apply_patch` finds them:
//! hunks in file order, each searched from where the previous one ended (after its
//! `@@` anchor line when it has one), its lines matched exactly, then ignoring trailing
//! whitespace, then ignoring whitespace on both sides, then also taking typographic
//! dashes, quotes and spaces for their ASCII forms. A hunk marked `*** End of File` is
//! tried at the end of the file first.
//!
//! The file keeps its line endings: lines the patch leaves alone keep theirs, new lines
//! get the file's usual one (CRLF in a CRLF file), and the file keeps ending (or not
//! ending) with a newline.

use super::Hunk;

/// Why a hunk does not apply: which hunk (1-based) and what was not found.
#[derive(Debug, PartialEq)]
pub struct HunkError {
    pub hunk: usize,
    pub message: String,
}

/// A file's lines without their endings, and each one's ending.
struct Lines<'a> {
    text: Vec<&'a str>,
    endings: Vec<&'a str>,
}

fn split(text: &str) -> Lines<'_> {
    let mut lines = Lines {
        text: Vec::new(),
        endings: Vec::new(),
    };
    for piece in text.split_inclusive('\n') {
        let (body, ending) = if let Some(body) = piece.strip_suffix("\r\n") {
            (body, "\r\n")
        } else if let Some(body) = piece.strip_suffix('\n') {
            (body, "\n")
        } else {
            (piece, "")
        };
        lines.text.push(body);
        lines.endings.push(ending);
    }
    lines
}

/// `text` with `hunks` applied.
pub fn apply(text: &str, hunks: &[Hunk]) -> Result<String, HunkError> {
    let lines = split(text);
    let eol = crate::replace::dominant_eol(text);
    let final_newline = text.is_empty() || text.ends_with('\n');
    let replacements = replacements(&lines.text, hunks)?;

    let mut out = String::with_capacity(text.len() + 256);
    let mut next = 0;
    let push = |out: &mut String, line: &str, ending: &str| {
        out.push_str(line);
        out.push_str(if ending.is_empty() { eol } else { ending });
    };
    for (start, len, new) in &replacements {
        for i in next..*start {
            push(&mut out, lines.text[i], lines.endings[i]);
        }
        for line in new {
            push(&mut out, line, eol);
        }
        next = start + len;
    }
    for i in next..lines.text.len() {
        push(&mut out, lines.text[i], lines.endings[i]);
    }
    if !final_newline && !out.is_empty() {
        let cut = if out.ends_with("\r\n") { 2 } else { 1 };
        out.truncate(out.len() - cut);
    }
    Ok(out)
}

/// Where a hunk applies: its first line, how many lines it replaces, the new lines.
type Replacement<'a> = (usize, usize, Vec<&'a str>);

/// Where each hunk applies: (first line, lines replaced, new lines), in file order.
/// Context lines keep the file's own text (which may differ in whitespace).
fn replacements<'a>(
    lines: &[&'a str],
    hunks: &'a [Hunk],
) -> Result<Vec<Replacement<'a>>, HunkError> {
    let mut replacements = Vec::new();
    let mut from = 0;
    for (index, hunk) in hunks.iter().enumerate() {
        let number = index + 1;
        if let Some(anchor) = &hunk.anchor {
            match seek(lines, std::slice::from_ref(anchor), from, false) {
                Some(at) => from = at + 1,
                None => {
                    let earlier = seek(lines, std::slice::from_ref(anchor), 0, false)
                        .filter(|_| from > 0)
                        .map(|at| format!(" (it is at line {}, before the previous hunk: hunks go in file order)", at + 1))
                        .unwrap_or_default();
                    return Err(HunkError {
                        hunk: number,
                        message: format!(
                            "its anchor line `@@ {anchor}` was not found{}{earlier}",
                            after(from)
                        ),
                    });
                }
            }
        }
        if hunk.old.is_empty() {
            // Only added lines: after the anchor, else at the end of the file.
            let at = if hunk.anchor.is_some() && !hunk.end_of_file {
                from
            } else {
                lines.len()
            };
            replacements.push((at, 0, hunk.new.iter().map(String::as_str).collect()));
            continue;
        }
        let (mut old_len, mut new_len) = (hunk.old.len(), hunk.new.len());
        let mut found = seek(lines, &hunk.old, from, hunk.end_of_file);
        if found.is_none() && hunk.trailing_blank > 0 {
            // Blank patch lines at the end of a hunk are most likely separators.
            let drop = hunk.trailing_blank.min(old_len).min(new_len);
            old_len -= drop;
            new_len -= drop;
            found = seek(lines, &hunk.old[..old_len], from, hunk.end_of_file);
        }
        let Some(at) = found else {
            return Err(not_found(lines, hunk, number, from));
        };
        let mut new: Vec<&str> = hunk.new[..new_len].iter().map(String::as_str).collect();
        for &(old_index, new_index) in &hunk.context {
            if old_index < old_len && new_index < new_len {
                new[new_index] = lines[at + old_index];
            }
        }
        replacements.push((at, old_len, new));
        from = at + old_len;
    }
    Ok(replacements)
}

fn after(from: usize) -> String {
    if from == 0 {
        String::new()
    } else {
        format!(" after line {from}")
    }
}

/// The error of a hunk whose lines are not in the file.
fn not_found(lines: &[&str], hunk: &Hunk, number: usize, from: usize) -> HunkError {
    let mut message = format!(
        "its lines were not found{}{}; the file has no run of lines matching these (context and `-` lines):\n",
        after(from),
        if hunk.end_of_file { " at the end of the file" } else { "" }
    );
    for line in &hunk.old {
        message.push_str(&format!("|{line}\n"));
    }
    let first = &hunk.old[..1];
    if let Some(at) = seek(lines, first, from, false).or_else(|| seek(lines, first, 0, false)) {
        message.push_str(&format!(
            "(its first line matches line {} of the file, where the lines after it differ)",
            at + 1
        ));
    } else {
        message.push_str("(not even its first line is in the file)");
    }
    HunkError {
        hunk: number,
        message,
    }
}

/// Where `pattern` occurs as consecutive lines of `lines`, at `from` or later (at the
/// end first when `eof`), under the strictest of the four comparisons that finds it.
pub fn seek(lines: &[&str], pattern: &[String], from: usize, eof: bool) -> Option<usize> {
    if pattern.is_empty() {
        return Some(from);
    }
    if pattern.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - pattern.len();
    let comparisons: [fn(&str, &str) -> bool; 4] = [
        |a, b| a == b,
        |a, b| a.trim_end() == b.trim_end(),
        |a, b| a.trim() == b.trim(),
        |a, b| normalized(a) == normalized(b),
    ];
    for same in comparisons {
        let matches_at = |at: usize| pattern.iter().zip(&lines[at..]).all(|(p, l)| same(l, p));
        if eof && last_start >= from && matches_at(last_start) {
            return Some(last_start);
        }
        if let Some(at) = (from..=last_start).find(|&at| matches_at(at)) {
            return Some(at);
        }
    }
    None
}

/// `text` trimmed, with typographic dashes, quotes and spaces as their ASCII forms.
fn normalized(text: &str) -> String {
    text.trim()
        .chars()
        .map(|c| match c {
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            '\u{2018}'..='\u{201B}' => '\'',
            '\u{201C}'..='\u{201F}' => '"',
            '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
            other => other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patch::{parse, Op};

    /// The hunks of a patch updating one file.
    fn hunks(body: &str) -> Vec<Hunk> {
        let patch = format!("*** Begin Patch\n*** Update File: f\n{body}\n*** End Patch");
        match parse(&patch).unwrap().remove(0) {
            Op::Update { hunks, .. } => hunks,
            other => panic!("{other:?}"),
        }
    }

    fn applied(text: &str, body: &str) -> Result<String, HunkError> {
        apply(text, &hunks(body))
    }

    #[test]
    fn a_hunk_replaces_its_lines() {
        assert_eq!(
            applied("foo\nbar\n", "@@\n foo\n-bar\n+baz").unwrap(),
            "foo\nbaz\n"
        );
    }

    #[test]
    fn hunks_apply_in_order_after_their_anchors() {
        let text = "fn a() {\n    x\n}\nfn b() {\n    x\n}\n";
        let out = applied(text, "@@ fn b() {\n-    x\n+    y").unwrap();
        assert_eq!(out, "fn a() {\n    x\n}\nfn b() {\n    y\n}\n");
        let both = applied(text, "@@\n-    x\n+    1\n@@\n-    x\n+    2").unwrap();
        assert_eq!(both, "fn a() {\n    1\n}\nfn b() {\n    2\n}\n");
    }

    #[test]
    fn matching_is_lenient_about_whitespace_and_typography() {
        // Trailing whitespace in the file.
        assert_eq!(applied("a  \nb\t\n", "@@\n-a\n b\n+c").unwrap(), "b\t\nc\n");
        // Indentation differs: ignored, and the new line is written as given.
        assert_eq!(
            applied("    a\n    b\n", "@@\n-a\n+  z\n b").unwrap(),
            "  z\n    b\n"
        );
        // A typographic dash and quotes in the file, ASCII in the patch.
        assert_eq!(
            applied(
                "say \u{201C}hi\u{201D} \u{2014} ok\n",
                "@@\n-say \"hi\" - ok\n+said"
            )
            .unwrap(),
            "said\n"
        );
        // The exact match wins over an earlier lenient one.
        assert_eq!(applied(" x\nx\n", "@@\n-x\n+y").unwrap(), " x\ny\n");
    }

    #[test]
    fn a_crlf_file_stays_crlf_and_no_final_newline_stays() {
        assert_eq!(
            applied("a\r\nb\r\nc\r\n", "@@\n a\n-b\n+B\n+B2").unwrap(),
            "a\r\nB\r\nB2\r\nc\r\n"
        );
        assert_eq!(applied("a\nb", "@@\n a\n-b\n+c").unwrap(), "a\nc");
        // Added at the end of a file without a final newline: the old last line gets one.
        assert_eq!(
            applied("a\nb", "@@\n+c\n*** End of File").unwrap(),
            "a\nb\nc"
        );
        assert_eq!(applied("", "@@\n+first").unwrap(), "first\n");
    }

    #[test]
    fn end_of_file_hunks_match_at_the_end_first() {
        let text = "x\ny\nx\n";
        assert_eq!(
            applied(text, "@@\n-x\n+z\n*** End of File").unwrap(),
            "x\ny\nz\n"
        );
        assert_eq!(applied(text, "@@\n-x\n+z").unwrap(), "z\ny\nx\n");
    }

    #[test]
    fn pure_additions_go_after_the_anchor_or_at_the_end() {
        let text = "class A:\n    pass\nclass B:\n    pass\n";
        assert_eq!(
            applied(text, "@@ class B:\n+    x = 1").unwrap(),
            "class A:\n    pass\nclass B:\n    x = 1\n    pass\n"
        );
        assert_eq!(applied("a\n", "@@\n+b").unwrap(), "a\nb\n");
    }

    #[test]
    fn trailing_blank_patch_lines_are_dropped_when_they_do_not_match() {
        assert_eq!(applied("a\nb\n", "@@\n-a\n+A\n b\n\n").unwrap(), "A\nb\n");
    }

    #[test]
    fn a_failing_hunk_names_itself_and_shows_the_expected_lines() {
        let text = "one\ntwo\nthree\nfour\n";
        let error = applied(text, "@@\n-one\n+1\n@@\n three\n-five\n+5").unwrap_err();
        assert_eq!(error.hunk, 2);
        assert!(
            error.message.contains("not found after line 1"),
            "{}",
            error.message
        );
        assert!(
            error.message.contains("|three\n|five\n"),
            "{}",
            error.message
        );
        assert!(
            error.message.contains("matches line 3"),
            "{}",
            error.message
        );

        let error = applied(text, "@@ fn missing()\n-one\n+1").unwrap_err();
        assert_eq!(error.hunk, 1);
        assert!(error.message.contains("`@@ fn missing()` was not found"));

        let out_of_order = applied(text, "@@ three\n-four\n+4\n@@ one\n-two\n+2").unwrap_err();
        assert_eq!(out_of_order.hunk, 2);
        assert!(
            out_of_order.message.contains("file order"),
            "{}",
            out_of_order.message
        );
    }

    #[test]
    fn seek_handles_short_files_and_empty_patterns() {
        let lines = ["a"];
        assert_eq!(seek(&lines, &["a".into(), "b".into()], 0, false), None);
        assert_eq!(seek(&lines, &[], 1, false), Some(1));
    }
}
