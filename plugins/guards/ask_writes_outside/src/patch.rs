//! The paths an `apply_patch` patch touches: the path of every `*** Add File:`,
//! `*** Update File:`, `*** Delete File:` and `*** Move to:` line, in patch order. A line
//! is read as the files plugin's parser reads it (`plugins/files/src/patch/`): split at
//! `\n`, whitespace (a `\r` included) trimmed from both ends of the line and of the path.
//! Every such line counts, even one the parser would refuse: naming more paths only
//! asks more, and a patch that does not parse changes nothing.

/// The header markers and what the operation does to its path, for a reason.
const HEADERS: &[(&str, &str)] = &[
    ("*** Add File:", "adds"),
    ("*** Update File:", "updates"),
    ("*** Delete File:", "deletes"),
    ("*** Move to:", "moves a file to"),
];

/// One path a patch names: what it does there and the path as written.
#[derive(Debug, PartialEq)]
pub struct Touched<'a> {
    pub verb: &'static str,
    pub path: &'a str,
}

/// Every path `patch` names, in order. A header with no path names none (the parser
/// refuses it).
pub fn touched(patch: &str) -> Vec<Touched<'_>> {
    patch
        .split('\n')
        .filter_map(|line| {
            let line = line.trim();
            HEADERS.iter().find_map(|(marker, verb)| {
                let path = line.strip_prefix(marker)?.trim();
                (!path.is_empty()).then_some(Touched { verb, path })
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(patch: &str) -> Vec<(&'static str, &str)> {
        touched(patch)
            .into_iter()
            .map(|t| (t.verb, t.path))
            .collect()
    }

    #[test]
    fn every_header_names_its_path_in_order() {
        let patch = "*** Begin Patch\n\
                     *** Add File: src/add.rs\n\
                     +fn main() {}\n\
                     *** Delete File: src/old.rs\n\
                     *** Update File: src/lib.rs\n\
                     *** Move to: docs/lib.md\n\
                     @@\n\
                     -a\n\
                     +b\n\
                     *** End Patch";
        assert_eq!(
            paths(patch),
            [
                ("adds", "src/add.rs"),
                ("deletes", "src/old.rs"),
                ("updates", "src/lib.rs"),
                ("moves a file to", "docs/lib.md"),
            ]
        );
    }

    #[test]
    fn space_and_line_endings_are_trimmed_as_the_parser_does() {
        let patch = "<<'EOF'\r\n  *** Begin Patch\r\n\t*** Add File:docs/a.md  \r\n+x\r\n   *** Update File:   src/b.rs\t\r\n *** Move to: \u{a0}docs/b.md\r\n@@\r\n-a\r\n+b\r\n*** End Patch\r\nEOF\r\n";
        assert_eq!(
            paths(patch),
            [
                ("adds", "docs/a.md"),
                ("updates", "src/b.rs"),
                ("moves a file to", "docs/b.md"),
            ]
        );
    }

    #[test]
    fn a_header_after_a_context_space_still_counts() {
        // The parser ends a hunk at a line whose trimmed start is `***` and reads it as
        // a header, so a context line ` *** Add File: x` adds x.
        let patch = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-a\n+b\n *** Add File: docs/x\n+y\n*** End Patch";
        assert_eq!(paths(patch), [("updates", "src/a.rs"), ("adds", "docs/x")]);
    }

    #[test]
    fn content_lines_and_empty_headers_name_nothing() {
        let patch = "*** Begin Patch\n*** Add File: src/a.md\n+*** Add File: docs/x\n+*** Move to: docs/y\n*** Delete File:\n*** Delete File:   \n** Add File: docs/z\n*** add file: docs/w\n*** End Patch";
        assert_eq!(paths(patch), [("adds", "src/a.md")]);
        assert_eq!(paths(""), []);
        assert_eq!(paths("not a patch"), []);
    }
}
