//! The patch format GPT-family models (Codex) write for `apply_patch`, parsed into
//! operations on files. The grammar:
//!
//! ```text
//! *** Begin Patch
//! *** Add File: PATH          then lines each starting with `+`
//! *** Delete File: PATH
//! *** Update File: PATH
//! *** Move to: NEWPATH        (optional)
//! @@ [a line naming the place, e.g. `def f():`]
//!  context line               (a space first)
//! -removed line
//! +added line
//! *** End of File             (optional: the hunk ends at the end of the file)
//! *** End Patch
//! ```
//!
//! The parser is lenient where models are sloppy and the meaning is still clear: space
//! around the markers, a heredoc wrapper (`<<'EOF'` ... `EOF`), CRLF line endings, a first
//! hunk with no `@@`, unified-diff `@@ -1,3 +1,4 @@` headers, `\ No newline at end of
//! file` lines, blank lines between hunks and inside an added file, and a context line
//! that lost its leading space (it is still checked against the file). [`apply`] finds
//! and applies an update's hunks.

pub mod apply;

/// One operation of a patch.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Create (or replace) a file with these contents.
    Add { path: String, contents: String },
    /// Delete a file.
    Delete { path: String },
    /// Change a file by hunks, and maybe move it.
    Update {
        path: String,
        move_to: Option<String>,
        hunks: Vec<Hunk>,
    },
}

impl Op {
    /// The path the operation names first.
    pub fn path(&self) -> &str {
        match self {
            Op::Add { path, .. } | Op::Delete { path } | Op::Update { path, .. } => path,
        }
    }
}

/// One hunk of an update: lines to find (context and removed) and what replaces them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hunk {
    /// The line after `@@`: a line above the hunk to find first (a function, a class).
    pub anchor: Option<String>,
    /// The context and removed lines, in order: what must be found in the file.
    pub old: Vec<String>,
    /// The context and added lines, in order: what replaces `old`.
    pub new: Vec<String>,
    /// The context lines: (index in `old`, index in `new`). A context line keeps the
    /// file's own text when it matched leniently.
    pub context: Vec<(usize, usize)>,
    /// `*** End of File` followed it: `old` is at the end of the file.
    pub end_of_file: bool,
    /// How many of the last lines of both `old` and `new` were empty lines of the patch
    /// (likely blank separators, not context): dropped when the hunk does not match
    /// with them.
    pub trailing_blank: usize,
    /// The patch line the hunk starts on (1-based), for messages.
    pub line: usize,
}

/// Why a patch does not parse: the patch line and what is wrong.
#[derive(Debug, PartialEq)]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File:";
const DELETE: &str = "*** Delete File:";
const UPDATE: &str = "*** Update File:";
const MOVE: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";

/// Parses a whole patch.
pub fn parse(patch: &str) -> Result<Vec<Op>, ParseError> {
    let mut lines: Vec<&str> = patch
        .trim()
        .split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .collect();
    // The first patch line's number, after a heredoc's opening line.
    let mut first_number = 1;
    if lines.len() >= 4
        && is_heredoc_start(lines[0])
        && lines[lines.len() - 1].trim().ends_with("EOF")
    {
        lines = lines[1..lines.len() - 1].to_vec();
        first_number = 2;
    }
    let error = |index: usize, message: String| ParseError {
        line: index + first_number,
        message,
    };
    if lines.first().map(|l| l.trim()) != Some(BEGIN) {
        return Err(error(0, format!("a patch starts with the line `{BEGIN}`")));
    }
    if lines.len() < 2 || lines[lines.len() - 1].trim() != END {
        return Err(error(
            lines.len().saturating_sub(1),
            format!("a patch ends with the line `{END}` (was it cut off?)"),
        ));
    }
    let body = &lines[1..lines.len() - 1];
    let mut ops = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line = body[i].trim();
        if line.is_empty() {
            i += 1;
            continue;
        }
        // Index into `lines` of body[i].
        let at = |i: usize| i + 1;
        if let Some(path) = header_path(line, ADD) {
            let path = path_or_error(path, ADD, at(i), &error)?;
            let (contents, used) = added_lines(&body[i + 1..]);
            ops.push(Op::Add { path, contents });
            i += 1 + used;
        } else if let Some(path) = header_path(line, DELETE) {
            ops.push(Op::Delete {
                path: path_or_error(path, DELETE, at(i), &error)?,
            });
            i += 1;
        } else if let Some(path) = header_path(line, UPDATE) {
            let path = path_or_error(path, UPDATE, at(i), &error)?;
            i += 1;
            let mut move_to = None;
            if let Some(to) = body.get(i).and_then(|l| header_path(l.trim(), MOVE)) {
                move_to = Some(path_or_error(to, MOVE, at(i), &error)?);
                i += 1;
            }
            let mut hunks = Vec::new();
            while i < body.len() {
                let line = body[i];
                if line.trim().is_empty() {
                    i += 1;
                    continue;
                }
                if line.trim_start().starts_with("***") {
                    break;
                }
                let starts_hunk = line.starts_with("@@")
                    || (hunks.is_empty() && line.starts_with([' ', '+', '-']));
                if !starts_hunk {
                    return Err(error(
                        at(i),
                        format!("expected a hunk of {path} (a line `@@`, or `@@ ` and a line of the file to anchor it), got `{line}`"),
                    ));
                }
                let (hunk, used) = hunk(&body[i..], at(i) + first_number);
                if hunk.old.is_empty() && hunk.new.is_empty() {
                    return Err(error(at(i), format!("a hunk of {path} has no lines")));
                }
                hunks.push(hunk);
                i += used;
            }
            if hunks.is_empty() && move_to.is_none() {
                return Err(error(
                    at(i.saturating_sub(1)),
                    format!("`{UPDATE} {path}` has no hunks"),
                ));
            }
            ops.push(Op::Update {
                path,
                move_to,
                hunks,
            });
        } else {
            return Err(error(
                at(i),
                format!("expected `{ADD} PATH`, `{DELETE} PATH` or `{UPDATE} PATH`, got `{line}`"),
            ));
        }
    }
    Ok(ops)
}

/// A heredoc's first line: `<<EOF`, `<<'EOF'`, `<<"EOF"`, maybe after `apply_patch`.
fn is_heredoc_start(line: &str) -> bool {
    let line = line.trim();
    let rest = line
        .strip_prefix("apply_patch")
        .unwrap_or(line)
        .trim_start();
    matches!(rest, "<<EOF" | "<<'EOF'" | "<<\"EOF\"")
}

/// The path after a header `marker` (the space after the colon optional).
fn header_path<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.strip_prefix(marker).map(str::trim)
}

fn path_or_error(
    path: &str,
    marker: &str,
    index: usize,
    error: &impl Fn(usize, String) -> ParseError,
) -> Result<String, ParseError> {
    if path.is_empty() {
        Err(error(index, format!("`{marker}` names no path")))
    } else {
        Ok(path.to_string())
    }
}

/// An added file's contents from the `+` lines at the start of `lines`, and how many
/// lines they took. An empty line between `+` lines is an empty line of the file.
fn added_lines(lines: &[&str]) -> (String, usize) {
    let mut contents = String::new();
    let mut used = 0;
    while used < lines.len() {
        let line = lines[used];
        if let Some(text) = line.strip_prefix('+') {
            contents.push_str(text);
            contents.push('\n');
            used += 1;
        } else if line.trim().is_empty() {
            let next = lines[used..].iter().position(|l| !l.trim().is_empty());
            match next {
                Some(k) if lines[used + k].starts_with('+') => {
                    for _ in 0..k {
                        contents.push('\n');
                    }
                    used += k;
                }
                _ => break,
            }
        } else {
            break;
        }
    }
    (contents, used)
}

/// One hunk from the start of `lines` (`@@ ...` or, for a first hunk, its first change
/// line), starting on patch line `number`, and how many lines it took.
fn hunk(lines: &[&str], number: usize) -> (Hunk, usize) {
    let mut hunk = Hunk {
        line: number,
        ..Hunk::default()
    };
    let mut used = 0;
    if let Some(rest) = lines[0].strip_prefix("@@") {
        hunk.anchor = anchor(rest);
        used = 1;
    }
    let mut blank_run = 0;
    while used < lines.len() {
        let line = lines[used];
        let trimmed = line.trim();
        if trimmed == END_OF_FILE {
            hunk.end_of_file = true;
            used += 1;
            break;
        }
        if line.starts_with("@@") || line.trim_start().starts_with("***") {
            break;
        }
        blank_run = if line.is_empty() { blank_run + 1 } else { 0 };
        if line.is_empty() {
            hunk.push_context("");
        } else if let Some(text) = line.strip_prefix(' ') {
            hunk.push_context(text);
        } else if let Some(text) = line.strip_prefix('-') {
            hunk.old.push(text.to_string());
        } else if let Some(text) = line.strip_prefix('+') {
            hunk.new.push(text.to_string());
        } else if line.starts_with('\\') {
            // `\ No newline at end of file`: the file's own ending is kept anyway.
        } else {
            // A context line that lost its leading space; matching checks it.
            hunk.push_context(line);
        }
        used += 1;
    }
    hunk.trailing_blank = blank_run;
    (hunk, used)
}

impl Hunk {
    fn push_context(&mut self, text: &str) {
        self.context.push((self.old.len(), self.new.len()));
        self.old.push(text.to_string());
        self.new.push(text.to_string());
    }
}

/// The anchor of a `@@` line from what follows the `@@`: none for a bare `@@` or a
/// unified-diff range (`@@ -3,7 +3,8 @@`), else the text (after a range, what follows it).
fn anchor(rest: &str) -> Option<String> {
    let mut text = rest.trim();
    if let Some(after) = unified_range(text) {
        text = after.trim();
    }
    let text = text.strip_suffix("@@").map(str::trim_end).unwrap_or(text);
    (!text.is_empty()).then(|| text.to_string())
}

/// What follows a unified-diff range `-A[,B] +C[,D] @@` at the start of `text`.
fn unified_range(text: &str) -> Option<&str> {
    let number = |s: &str| {
        let digits = s
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b',')
            .count();
        (digits > 0).then_some(digits)
    };
    let rest = text.strip_prefix('-')?;
    let rest = &rest[number(rest)?..];
    let rest = rest.trim_start().strip_prefix('+')?;
    let rest = &rest[number(rest)?..];
    rest.trim_start().strip_prefix("@@")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn add_delete_update_and_move_parse() {
        let patch = "*** Begin Patch\n\
                     *** Add File: path/add.py\n\
                     +abc\n\
                     +def\n\
                     *** Delete File: path/delete.py\n\
                     *** Update File: path/update.py\n\
                     *** Move to: path/update2.py\n\
                     @@ def f():\n\
                     -    pass\n\
                     +    return 123\n\
                     *** End Patch";
        let ops = parse(patch).unwrap();
        assert_eq!(
            ops,
            vec![
                Op::Add {
                    path: "path/add.py".into(),
                    contents: "abc\ndef\n".into()
                },
                Op::Delete {
                    path: "path/delete.py".into()
                },
                Op::Update {
                    path: "path/update.py".into(),
                    move_to: Some("path/update2.py".into()),
                    hunks: vec![Hunk {
                        anchor: Some("def f():".into()),
                        old: strings(&["    pass"]),
                        new: strings(&["    return 123"]),
                        context: vec![],
                        end_of_file: false,
                        trailing_blank: 0,
                        line: 8,
                    }],
                },
            ]
        );
    }

    #[test]
    fn hunks_split_on_at_at_and_the_first_may_lack_one() {
        let patch = "*** Begin Patch\n*** Update File: a.txt\n foo\n-bar\n+baz\n@@\n qux\n+quux\n*** End of File\n*** End Patch\n";
        let ops = parse(patch).unwrap();
        let Op::Update { hunks, .. } = &ops[0] else {
            panic!("{ops:?}")
        };
        assert_eq!(hunks.len(), 2);
        assert_eq!(
            (hunks[0].old.clone(), hunks[0].new.clone()),
            (strings(&["foo", "bar"]), strings(&["foo", "baz"]))
        );
        assert_eq!(hunks[0].anchor, None);
        assert!(hunks[1].end_of_file && !hunks[0].end_of_file);
        assert_eq!(hunks[1].new, strings(&["qux", "quux"]));
        assert_eq!((hunks[0].line, hunks[1].line), (3, 6));
    }

    #[test]
    fn sloppy_patches_still_parse() {
        let patch = "<<'EOF'\r\n  *** Begin Patch  \r\n*** Update File:src/x.rs\r\n@@ -10,3 +10,3 @@ fn main() {\r\n a\r\n\r\n-b\r\n+c\r\n\\ No newline at end of file\r\nd\r\n\r\n*** Add File: n.txt\r\n+one\r\n\r\n+three\r\n\r\n*** End Patch\r\nEOF";
        let ops = parse(patch).unwrap();
        assert_eq!(
            ops[0],
            Op::Update {
                path: "src/x.rs".into(),
                move_to: None,
                hunks: vec![Hunk {
                    anchor: Some("fn main() {".into()),
                    old: strings(&["a", "", "b", "d", ""]),
                    new: strings(&["a", "", "c", "d", ""]),
                    context: vec![(0, 0), (1, 1), (3, 3), (4, 4)],
                    end_of_file: false,
                    trailing_blank: 1,
                    line: 4,
                }],
            }
        );
        assert_eq!(
            ops[1],
            Op::Add {
                path: "n.txt".into(),
                contents: "one\n\nthree\n".into()
            }
        );
    }

    #[test]
    fn unified_ranges_and_bare_at_at_have_no_anchor() {
        assert_eq!(anchor(""), None);
        assert_eq!(anchor(" -1,2 +1,3 @@"), None);
        assert_eq!(anchor(" -1 +1 @@ class A:"), Some("class A:".into()));
        assert_eq!(anchor(" class A: @@"), Some("class A:".into()));
        assert_eq!(anchor("   def f(x):"), Some("def f(x):".into()));
    }

    #[test]
    fn broken_patches_name_the_line_and_what_is_wrong() {
        let missing_begin = parse("*** Update File: a\n@@\n-a\n*** End Patch").unwrap_err();
        assert_eq!(missing_begin.line, 1);
        assert!(missing_begin.message.contains("*** Begin Patch"));

        let cut_off = parse("*** Begin Patch\n*** Add File: a\n+x\n").unwrap_err();
        assert!(
            cut_off.message.contains("*** End Patch"),
            "{}",
            cut_off.message
        );

        let bad_header = parse("*** Begin Patch\n*** Change File: a\n*** End Patch").unwrap_err();
        assert_eq!(bad_header.line, 2);
        assert!(bad_header.message.contains("*** Change File: a"));

        let no_hunks = parse("*** Begin Patch\n*** Update File: a.rs\n*** End Patch").unwrap_err();
        assert!(
            no_hunks.message.contains("has no hunks"),
            "{}",
            no_hunks.message
        );

        let stray =
            parse("*** Begin Patch\n*** Update File: a.rs\nhello\n*** End Patch").unwrap_err();
        assert_eq!(stray.line, 3);
        assert!(stray.message.contains("expected a hunk of a.rs"));

        let empty_hunk =
            parse("*** Begin Patch\n*** Update File: a.rs\n@@ fn a\n*** End Patch").unwrap_err();
        assert!(empty_hunk.message.contains("no lines"));

        let no_path = parse("*** Begin Patch\n*** Delete File:\n*** End Patch").unwrap_err();
        assert!(no_path.message.contains("names no path"));
    }

    #[test]
    fn a_move_without_hunks_is_a_rename_and_an_empty_patch_does_nothing() {
        let ops =
            parse("*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** End Patch").unwrap();
        assert_eq!(
            ops,
            vec![Op::Update {
                path: "a".into(),
                move_to: Some("b".into()),
                hunks: vec![]
            }]
        );
        assert_eq!(parse("*** Begin Patch\n*** End Patch").unwrap(), vec![]);
    }
}
