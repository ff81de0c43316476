//! The docs' own tidy rules, checked on every `cargo test`: every link of the README,
//! `ARCHITECTURE.md`, `tests/README.md` and the book (`docs/src/`) reaches a file that
//! exists, and its `#anchor` a heading of that file; a page of the book links only within
//! the book (mdBook copies nothing else); every page is in the book's `SUMMARY.md`; and the
//! README's table of tools names exactly the tools of the generated tool reference.
//! Links to other sites are not fetched (CI has no network to spare for them).

use std::path::{Path, PathBuf};

use crate::tidy::{markdown_files, promise_docs, relative, repository, BOOK_PAGES, PROMISE_TABLE};

/// The documents whose links are checked, as paths from the repository's root: those
/// whose promises are tagged, and the promises' map.
fn linked_docs() -> Vec<String> {
    let mut docs = promise_docs();
    docs.push(PROMISE_TABLE.to_string());
    docs
}

/// `doc` without its fenced code blocks and code spans, where `](` is not a link.
fn prose_of(doc: &str) -> String {
    let mut prose = String::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            prose.push('\n');
            continue;
        }
        if fenced {
            prose.push('\n');
            continue;
        }
        // Code spans: every other backtick-delimited run is code.
        for (at, part) in line.split('`').enumerate() {
            if at % 2 == 0 {
                prose.push_str(part);
            }
        }
        prose.push('\n');
    }
    prose
}

/// The targets of `doc`'s inline links and images (`[text](target)`, `![alt](target)`).
fn link_targets(doc: &str) -> Vec<String> {
    let pattern = regex::Regex::new(r#"\]\(([^)\s]+)(?:\s+"[^"]*")?\)"#).expect("a valid pattern");
    pattern
        .captures_iter(&prose_of(doc))
        .map(|captures| captures[1].to_string())
        .collect()
}

/// The anchors of `doc`'s headings, as mdBook and GitHub make them: lower case, spaces to
/// `-`, and every character but letters, digits, `-` and `_` dropped.
fn heading_anchors(doc: &str) -> Vec<String> {
    let mut anchors = Vec::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let anchor: String = title
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
                _ => None,
            })
            .collect();
        anchors.push(anchor);
    }
    anchors
}

/// What is wrong with the link `target` of the document at `doc` (a path from the
/// repository's root), given the repository's `root`.
fn broken_link(root: &Path, doc: &str, target: &str) -> Option<String> {
    if target.starts_with("http://")
        || target.starts_with("https://")
        || target.starts_with("mailto:")
    {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let from = root.join(doc);
    let file: PathBuf = if path.is_empty() {
        from.clone()
    } else {
        from.parent().expect("a document's folder").join(path)
    };
    let Ok(file) = file.canonicalize() else {
        return Some(format!("{doc}: `{target}` names no file"));
    };
    let book = root
        .join(BOOK_PAGES)
        .canonicalize()
        .expect("the book's pages");
    if doc.starts_with(BOOK_PAGES) && !file.starts_with(&book) {
        return Some(format!(
            "{doc}: `{target}` leads out of the book ({BOOK_PAGES}), which mdBook does not copy: \
             link a page of the book, or include the file with `{{{{#include …}}}}`"
        ));
    }
    let anchor = anchor?;
    let text = std::fs::read_to_string(&file).ok()?;
    if heading_anchors(&text).iter().any(|a| a == anchor) {
        None
    } else {
        Some(format!(
            "{doc}: `{target}`: {} has no heading whose anchor is `{anchor}`",
            relative(&file)
        ))
    }
}

#[test]
fn every_link_of_the_docs_reaches_its_target() {
    let root = repository();
    let docs = linked_docs();
    let mut links = 0;
    let mut broken = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(root.join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
        for target in link_targets(&text) {
            links += 1;
            broken.extend(broken_link(&root, doc, &target));
        }
    }
    assert!(links > 40, "found only {links} links in {docs:?}");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let root = repository();
    let summary_path = format!("{BOOK_PAGES}/SUMMARY.md");
    let summary = std::fs::read_to_string(root.join(&summary_path)).unwrap();
    let listed = link_targets(&summary);
    let mut pages = Vec::new();
    markdown_files(&root.join(BOOK_PAGES), &mut pages);
    let missing: Vec<String> = pages
        .iter()
        .map(|page| relative(page))
        .filter(|page| *page != summary_path)
        .filter(|page| {
            let in_book = page.strip_prefix(&format!("{BOOK_PAGES}/")).unwrap();
            !listed.iter().any(|target| target == in_book)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "pages of the book that {summary_path} does not list (no reader finds them): {missing:?}"
    );
}

#[test]
fn the_link_rules_catch_what_they_are_for() {
    let doc = "# A page\n\n## Two words, here\n\nSee [this](#two-words-here), [that](b.md#x) \
               and `[code](nowhere.md)`.\n\n```\n[fenced](nowhere.md)\n```\n![pic](c.png \"t\")\n";
    assert_eq!(link_targets(doc), ["#two-words-here", "b.md#x", "c.png"]);
    assert_eq!(heading_anchors(doc), ["a-page", "two-words-here"]);
    let root = repository();
    assert!(broken_link(&root, "README.md", "ARCHITECTURE.md#code-map").is_none());
    assert!(broken_link(&root, "README.md", "ARCHITECTURE.md#no-such-heading").is_some());
    assert!(broken_link(&root, "README.md", "no/such/file.md").is_some());
    assert!(broken_link(&root, "docs/src/running.md", "../../README.md").is_some());
    assert!(broken_link(&root, "docs/src/running.md", "https://example.com/x").is_none());
}

/// The tools a table's first column names (each tool a code span), in `doc`'s section
/// that starts with the heading `heading`.
fn tools_of_table(doc: &str, heading: &str) -> Vec<String> {
    let mut tools: Vec<String> = doc
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("no section `{heading}`"))
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .flat_map(|row| {
            let first = row.trim_matches('|').split('|').next().unwrap_or("");
            first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    tools.sort();
    tools
}

#[test]
fn the_readme_table_names_every_tool_of_the_reference() {
    let root = repository();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let reference_path = format!("{BOOK_PAGES}/reference/tools.md");
    let reference = std::fs::read_to_string(root.join(&reference_path)).unwrap();
    let mut documented: Vec<String> = reference
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .map(|name| name.trim().trim_matches('`').to_string())
        .collect();
    documented.sort();
    assert!(documented.len() > 10, "{reference_path}: {documented:?}");
    assert_eq!(
        tools_of_table(&readme, "## The tools"),
        documented,
        "README.md's table of tools against {reference_path} (generated from `dsh tools`)"
    );
}
