//! The marker the `redact_secrets` result filter puts in place of a secret the model is
//! not shown (`[REDACTED:<kind>]`, kind in lower case with dashes, e.g.
//! `[REDACTED:aws-secret-access-key]`): finding one in text the model wants written or
//! matched, since the file holds the secret, not the marker.

const PREFIX: &str = "[REDACTED:";

/// The first redaction marker in `text`, if any.
pub fn find_marker(text: &str) -> Option<&str> {
    let mut from = 0;
    while let Some(at) = text[from..].find(PREFIX) {
        let start = from + at;
        let kind_start = start + PREFIX.len();
        let kind_len = text[kind_start..]
            .bytes()
            .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
            .count();
        if kind_len > 0 && text[kind_start + kind_len..].starts_with(']') {
            return Some(&text[start..kind_start + kind_len + 1]);
        }
        from = kind_start;
    }
    None
}

/// The first marker in `text` that `file` does not hold literally (a file may, e.g. a
/// test of the filter itself).
pub fn new_marker<'a>(text: &'a str, file: &str) -> Option<&'a str> {
    let mut rest = text;
    while let Some(marker) = find_marker(rest) {
        if !file.contains(marker) {
            return Some(marker);
        }
        let at = rest.find(marker).unwrap_or(0) + marker.len();
        rest = &rest[at..];
    }
    None
}

/// Why text holding `marker` cannot be written: for an `invalid-arguments` message.
pub fn refuse_writing(marker: &str) -> String {
    format!(
        "the text to write contains `{marker}`, a marker the redact_secrets filter showed you in place of a secret; \
         the file holds (or should hold) the secret itself, which you never saw, and writing the marker would replace it. \
         Leave the lines holding secrets out of your change (edit around them), or, if the literal marker text is really meant, write it with bash"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_found_by_their_exact_shape() {
        assert_eq!(
            find_marker("key = [REDACTED:aws-access-key-id]\n"),
            Some("[REDACTED:aws-access-key-id]")
        );
        assert_eq!(
            find_marker("[REDACTED:] [REDACTED:Upper] [REDACTED:x"),
            None
        );
        assert_eq!(
            find_marker("[REDACTED:] then [REDACTED:private-key]"),
            Some("[REDACTED:private-key]")
        );
        assert_eq!(find_marker("nothing here"), None);
    }

    #[test]
    fn a_marker_the_file_holds_literally_is_not_new() {
        let file = "assert_eq!(redact(x), \"[REDACTED:github-token]\");";
        assert_eq!(new_marker("\"[REDACTED:github-token]\"", file), None);
        assert_eq!(
            new_marker("[REDACTED:github-token] [REDACTED:slack-token]", file),
            Some("[REDACTED:slack-token]")
        );
    }
}
