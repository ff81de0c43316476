//! The book's pages generated from the code (`docs/src/reference/`): the one check their
//! tests make, that the committed page is what the code renders, or, with
//! `DSH_UPDATE_DOCS=1` in the environment, the page written anew. Public because the tests
//! of three crates use it (the errors here, the configuration in the engine, the tools in
//! the end-to-end tests); nothing else does.

use std::path::Path;

/// Checks the committed page `page` (a path from the repository's root `root`) against
/// `rendered`, what `source` (the code it comes from) makes of it, or writes it when
/// `DSH_UPDATE_DOCS=1`. A difference panics naming the first line that differs and the
/// command that regenerates the page, `regenerate`.
pub fn check_or_write(root: &Path, page: &str, rendered: &str, source: &str, regenerate: &str) {
    let path = root.join(page);
    if std::env::var("DSH_UPDATE_DOCS").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().expect("a page's folder"))
            .unwrap_or_else(|e| panic!("{page}: {e}"));
        std::fs::write(&path, rendered).unwrap_or_else(|e| panic!("{page}: {e}"));
        return;
    }
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{page} cannot be read ({e}); generate it with: {regenerate}"));
    if let Some((line, was, is)) = first_difference(&committed, rendered) {
        panic!(
            "{page} differs from {source} at line {line}:\n  committed: {was}\n  \
             from the code: {is}\nregenerate it with: {regenerate}"
        );
    }
}

/// The first line (from 1) where `a` and `b` differ, with each side's text there; `None`
/// when they are equal.
fn first_difference<'a>(a: &'a str, b: &'a str) -> Option<(usize, &'a str, &'a str)> {
    if a == b {
        return None;
    }
    let (mut a_lines, mut b_lines) = (a.split('\n'), b.split('\n'));
    for line in 1.. {
        match (a_lines.next(), b_lines.next()) {
            (None, None) => break,
            (was, is) if was != is => {
                return Some((
                    line,
                    was.unwrap_or("(the page ends)"),
                    is.unwrap_or("(the page ends)"),
                ))
            }
            _ => {}
        }
    }
    unreachable!("unequal texts differ in some line")
}

#[cfg(test)]
mod tests {
    use super::first_difference;

    #[test]
    fn the_first_differing_line_is_named() {
        assert_eq!(first_difference("a\nb\n", "a\nb\n"), None);
        assert_eq!(first_difference("a\nb\n", "a\nc\n"), Some((2, "b", "c")));
        assert_eq!(first_difference("a\n", "a\nb"), Some((2, "", "b")));
        assert_eq!(
            first_difference("a", "a\n"),
            Some((2, "(the page ends)", ""))
        );
    }
}
