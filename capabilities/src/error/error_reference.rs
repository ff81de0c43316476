//! The error codes' reference page, `docs/src/reference/errors.md`: rendered from the one
//! list ([`crate::for_each_error_code`], through [`ErrorCode::ALL`], its names, its WIT
//! column and its doc comments) and checked against the committed file, which
//! `DSH_UPDATE_DOCS=1` rewrites.

use std::path::PathBuf;

use super::ErrorCode;

/// The page, relative to the repository.
const PAGE: &str = "docs/src/reference/errors.md";

/// The command that regenerates the page.
const REGENERATE: &str = "DSH_UPDATE_DOCS=1 cargo test -p dsh-capabilities --lib error_reference";

/// The page as the list makes it.
fn render() -> String {
    let mut page = format!(
        "<!-- Generated from the error list in capabilities/src/error.rs: edit the list, \
         then run {REGENERATE} -->\n\n"
    );
    page.push_str(
        "# Error codes\n\n\
         Every call that fails reaches the model as a result marked `isError` with a \
         structured error: a stable `code` from this table and a `message` saying what \
         went wrong (as `structuredContent` `{\"code\", \"message\"}`, and as the text \
         `CODE: message`; a tool that declares an output schema gives the text alone). \
         Nothing a plugin or a process does reaches the model as a crash.\n\n\
         Tool plugins see the codes as the WIT contract's `error-code` enum (contract \
         0.2.0), by its kebab-case names (`invalid-arguments`), and may return the ones \
         it has. The codes it lacks are given by the host alone, or only by plugins built \
         against contract 0.1.0.\n\n",
    );
    page.push_str("| Code | Plugins can return it (WIT) | Meaning |\n");
    page.push_str("|---|---|---|\n");
    for code in ErrorCode::ALL {
        let wit = if code.in_contract() {
            format!("`{}`", code.as_str().to_lowercase().replace('_', "-"))
        } else {
            "no".to_string()
        };
        page.push_str(&format!(
            "| `{}` | {wit} | {} |\n",
            code.as_str(),
            code.meaning().replace('|', "\\|")
        ));
    }
    page
}

fn page_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the capabilities crate is inside the repository")
        .join(PAGE)
}

#[test]
fn the_error_reference_page_matches_the_error_list() {
    let rendered = render();
    let path = page_path();
    if std::env::var_os("DSH_UPDATE_DOCS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &rendered).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!("{PAGE} cannot be read ({error}); generate it with: {REGENERATE}")
    });
    if committed == rendered {
        return;
    }
    let mut committed_lines = committed.lines();
    let mut rendered_lines = rendered.lines();
    let mut number = 1;
    loop {
        let (old, new) = (committed_lines.next(), rendered_lines.next());
        if old != new {
            panic!(
                "{PAGE} differs from the error list in capabilities/src/error.rs at line \
                 {number}:\n  committed: {}\n  from the list: {}\nregenerate it with: {REGENERATE}",
                old.unwrap_or("(end of file)"),
                new.unwrap_or("(end of file)"),
            );
        }
        if old.is_none() {
            panic!("{PAGE} differs from the error list only in its line endings; regenerate it with: {REGENERATE}");
        }
        number += 1;
    }
}

#[test]
fn every_code_has_a_meaning_on_one_line() {
    for code in ErrorCode::ALL {
        let meaning = code.meaning();
        assert!(!meaning.is_empty(), "{code} has no doc comment in the list");
        assert!(
            !meaning.contains('\n') && !meaning.contains("  ") && meaning.trim() == meaning,
            "{code}: {meaning:?}"
        );
    }
    assert_eq!(
        ErrorCode::Timeout.meaning(),
        "The call ran out of time.",
        "one doc line is its meaning"
    );
    assert!(ErrorCode::Denied
        .meaning()
        .contains("refused what the operator's"));
}
