//! The error codes' reference page, `docs/src/reference/errors.md`: rendered from the one
//! list ([`crate::for_each_error_code`], through [`ErrorCode::ALL`], its names, its WIT
//! column and its doc comments) and checked against the committed file, which
//! `DSH_UPDATE_DOCS=1` rewrites.

use std::path::Path;

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

#[test]
fn the_error_reference_page_matches_the_error_list() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the capabilities crate is inside the repository");
    crate::generated_page::check_or_write(
        root,
        PAGE,
        &render(),
        "the error list in capabilities/src/error.rs",
        REGENERATE,
    );
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
