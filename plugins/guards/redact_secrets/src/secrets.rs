//! The credential shapes `redact_secrets` masks, and the masking.
//!
//! Prefixed tokens must start a word (so `skip` or `task-` never match) and have their
//! exact length or more; labelled AWS secret keys and bearer tokens are found by their
//! label. A PEM private key is masked from its BEGIN line through its END line, or to
//! the end of the text when the END line was cut off.

/// A credential found in a text: its byte range and kind.
struct Span {
    start: usize,
    end: usize,
    kind: &'static str,
}

/// A token recognised by its prefix.
struct Token {
    prefixes: &'static [&'static str],
    kind: &'static str,
    /// The bytes the rest of the token is made of.
    body: fn(u8) -> bool,
    /// The shortest and longest rest.
    len: (usize, usize),
    /// The rest must mix digits, upper and lower case (for short, common prefixes).
    mixed: bool,
}

const ANY: usize = usize::MAX;

/// The prefixed tokens; on the same start, the one listed first wins.
const TOKENS: &[Token] = &[
    Token {
        prefixes: &["AKIA", "ASIA"],
        kind: "aws-access-key-id",
        body: upper_alnum,
        len: (16, 16),
        mixed: false,
    },
    Token {
        prefixes: &["ghp_", "gho_", "ghs_", "ghu_", "ghr_"],
        kind: "github-token",
        body: alnum,
        len: (30, ANY),
        mixed: false,
    },
    Token {
        prefixes: &["github_pat_"],
        kind: "github-token",
        body: word,
        len: (22, ANY),
        mixed: false,
    },
    Token {
        prefixes: &["xoxb-", "xoxa-", "xoxp-", "xoxr-", "xoxs-"],
        kind: "slack-token",
        body: alnum_dash,
        len: (10, ANY),
        mixed: false,
    },
    Token {
        prefixes: &["sk-ant-"],
        kind: "anthropic-api-key",
        body: url_safe,
        len: (32, ANY),
        mixed: false,
    },
    Token {
        prefixes: &["sk-"],
        kind: "openai-api-key",
        body: url_safe,
        len: (32, ANY),
        mixed: true,
    },
    Token {
        prefixes: &["AIza"],
        kind: "google-api-key",
        body: url_safe,
        len: (35, 35),
        mixed: false,
    },
];

/// Labels of an AWS secret access key, matched in any case.
const AWS_SECRET_LABELS: &[&str] = &[
    "aws_secret_access_key",
    "aws-secret-access-key",
    "secretaccesskey",
];

/// `text` with every credential replaced by `[REDACTED:<kind>]`, or `None` when it holds
/// none.
pub fn redact(text: &str) -> Option<String> {
    let mut spans = Vec::new();
    private_keys(text, &mut spans);
    aws_secret_keys(text, &mut spans);
    bearer_tokens(text, &mut spans);
    for token in TOKENS {
        prefixed(text, token, &mut spans);
    }
    if spans.is_empty() {
        return None;
    }
    spans.sort_by_key(|span| span.start);
    let mut redacted = String::with_capacity(text.len());
    let mut at = 0;
    for span in &spans {
        // A span inside one already masked (a key in a private key block) goes with it.
        if span.start < at {
            continue;
        }
        redacted.push_str(&text[at..span.start]);
        redacted.push_str(&format!("[REDACTED:{}]", span.kind));
        at = span.end;
    }
    redacted.push_str(&text[at..]);
    Some(redacted)
}

fn upper_alnum(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}

fn alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

fn word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn alnum_dash(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}

fn url_safe(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn base64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'+' || b == b'/'
}

/// Bytes of a bearer token (RFC 6750 `b64token`).
fn token68(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b)
}

/// Where the run of `allowed` bytes starting at `from` ends.
fn run_end(text: &str, from: usize, allowed: fn(u8) -> bool) -> usize {
    from + text.as_bytes()[from..]
        .iter()
        .take_while(|&&b| allowed(b))
        .count()
}

/// True when `at` starts a word: the byte before it is not a letter, digit or `_`.
fn starts_word(text: &str, at: usize) -> bool {
    at == 0 || !word(text.as_bytes()[at - 1])
}

fn prefixed(text: &str, token: &Token, spans: &mut Vec<Span>) {
    for prefix in token.prefixes {
        for (start, _) in text.match_indices(prefix) {
            let rest = start + prefix.len();
            let end = run_end(text, rest, token.body);
            let (min, max) = token.len;
            let body = &text[rest..end];
            let mixed = body.bytes().any(|b| b.is_ascii_digit())
                && body.bytes().any(|b| b.is_ascii_uppercase())
                && body.bytes().any(|b| b.is_ascii_lowercase());
            if starts_word(text, start)
                && (min..=max).contains(&body.len())
                && (mixed || !token.mixed)
            {
                spans.push(Span {
                    start,
                    end,
                    kind: token.kind,
                });
            }
        }
    }
}

/// A 40-byte base64 value after an AWS secret key label and `=`, `:`, quotes or blanks.
fn aws_secret_keys(text: &str, spans: &mut Vec<Span>) {
    let lower = text.to_ascii_lowercase();
    for label in AWS_SECRET_LABELS {
        for (at, _) in lower.match_indices(label) {
            let after = at + label.len();
            let start = after
                + text.as_bytes()[after..]
                    .iter()
                    .take_while(|b| b" \t\"':=".contains(b))
                    .count();
            let end = run_end(text, start, base64);
            if start > after && end - start == 40 {
                spans.push(Span {
                    start,
                    end,
                    kind: "aws-secret-access-key",
                });
            }
        }
    }
}

/// The token after the word `Bearer` (any case) and blanks, when it looks random: 16
/// bytes or more with a digit or an upper-case letter after its first byte.
fn bearer_tokens(text: &str, spans: &mut Vec<Span>) {
    let lower = text.to_ascii_lowercase();
    for (at, word) in lower.match_indices("bearer") {
        let after = at + word.len();
        let start = after
            + text.as_bytes()[after..]
                .iter()
                .take_while(|b| matches!(b, b' ' | b'\t'))
                .count();
        let end = run_end(text, start, token68);
        let token = &text.as_bytes()[start..end];
        let random = token.iter().any(u8::is_ascii_digit)
            || token.iter().skip(1).any(u8::is_ascii_uppercase);
        if starts_word(text, at) && start > after && token.len() >= 16 && random {
            spans.push(Span {
                start,
                end,
                kind: "bearer-token",
            });
        }
    }
}

/// PEM private key blocks: `-----BEGIN <label>-----` with `PRIVATE KEY` in the label,
/// through `-----END <label>-----`.
fn private_keys(text: &str, spans: &mut Vec<Span>) {
    const BEGIN: &str = "-----BEGIN ";
    let mut from = 0;
    while let Some(found) = text[from..].find(BEGIN) {
        let start = from + found;
        let label_start = start + BEGIN.len();
        let Some(label_len) = text[label_start..].find("-----") else {
            break;
        };
        let label = &text[label_start..label_start + label_len];
        let header_end = label_start + label_len + "-----".len();
        if !label.contains("PRIVATE KEY") || label.contains('\n') {
            from = label_start;
            continue;
        }
        let end_line = format!("-----END {label}-----");
        let end = text[header_end..]
            .find(&end_line)
            .map_or(text.len(), |i| header_end + i + end_line.len());
        spans.push(Span {
            start,
            end,
            kind: "private-key",
        });
        from = end;
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[track_caller]
    fn masks(text: &str, expected: &str) {
        assert_eq!(redact(text).as_deref(), Some(expected), "{text:?}");
    }

    #[test]
    fn aws_keys() {
        masks(
            "key AKIAIOSFODNN7EXAMPLE here",
            "key [REDACTED:aws-access-key-id] here",
        );
        masks(
            "\"AccessKeyId\": \"ASIAIOSFODNN7EXAMPLE\",",
            "\"AccessKeyId\": \"[REDACTED:aws-access-key-id]\",",
        );
        masks(
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
            "aws_secret_access_key = [REDACTED:aws-secret-access-key]\n",
        );
        masks(
            "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "export AWS_SECRET_ACCESS_KEY=[REDACTED:aws-secret-access-key]",
        );
        masks(
            "\"SecretAccessKey\": \"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\"",
            "\"SecretAccessKey\": \"[REDACTED:aws-secret-access-key]\"",
        );
    }

    #[test]
    fn private_key_blocks() {
        let text = "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nabc+/==\n-----END RSA PRIVATE KEY-----\nafter";
        masks(text, "before\n[REDACTED:private-key]\nafter");
        masks(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
            "[REDACTED:private-key]",
        );
        masks(
            "x -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg… 4000 bytes omitted …",
            "x [REDACTED:private-key]",
        );
        let two = "-----BEGIN EC PRIVATE KEY-----\na\n-----END EC PRIVATE KEY-----\nmid\n-----BEGIN PRIVATE KEY-----\nb\n-----END PRIVATE KEY-----";
        masks(two, "[REDACTED:private-key]\nmid\n[REDACTED:private-key]");
        let certificate = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----";
        assert_eq!(redact(certificate), None);
    }

    #[test]
    fn bearer_tokens() {
        masks(
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc-DEF_123",
            "Authorization: Bearer [REDACTED:bearer-token]",
        );
        masks(
            "curl -H 'authorization: bearer 0123456789abcdef0123'",
            "curl -H 'authorization: bearer [REDACTED:bearer-token]'",
        );
        for text in [
            "Authorization: Bearer <token>",
            "Authorization: Bearer $TOKEN",
            "the bearer of bad news",
            "Bearer responsibilities",
            "bearer",
        ] {
            assert_eq!(redact(text), None, "{text:?}");
        }
    }

    #[test]
    fn prefixed_tokens() {
        masks(
            "token=ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            "token=[REDACTED:github-token]",
        );
        masks(
            "gho_16C7e42F292c6912E7710c838347Ae178B4a ghs_16C7e42F292c6912E7710c838347Ae178B4a",
            "[REDACTED:github-token] [REDACTED:github-token]",
        );
        masks("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVW", "[REDACTED:github-token]");
        masks(
            "SLACK=xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
            "SLACK=[REDACTED:slack-token]",
        );
        masks(
            "OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLmNoPqRsTuVwXyZ012345",
            "OPENAI_API_KEY=[REDACTED:openai-api-key]",
        );
        masks(
            "key: sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789-ABCDEFGHIJ_klmnop",
            "key: [REDACTED:anthropic-api-key]",
        );
        masks(
            "url?key=AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI&x=1",
            "url?key=[REDACTED:google-api-key]&x=1",
        );
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        for text in [
            "",
            "skip the risk-free task-sk-list; ask-me",
            "AKIA alone, AKIAshort, AKIAIOSFODNN7EXAMPLEXX (too long), xAKIAIOSFODNN7EXAMPLE",
            "SGVsbG8gd29ybGQhIFRoaXMgaXMgYmFzZTY0IGJ1dCBub3QgYSBrZXku==",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY without a label",
            "sk-this-is-a-long-hyphenated-css-class-name-here",
            "ghp_short gho_ xoxo-hugs-and-kisses-everyone AIzaShort",
            "see github_pat_ docs; aws_secret_access_key = <your key>",
            "ünïcödé ✓ -----BEGIN nothing",
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        ] {
            assert_eq!(redact(text), None, "{text:?}");
        }
    }

    #[test]
    fn keys_in_a_private_key_block_are_masked_once() {
        masks(
            "-----BEGIN PRIVATE KEY-----\nAKIAIOSFODNN7EXAMPLE\n-----END PRIVATE KEY----- AKIAIOSFODNN7EXAMPLE",
            "[REDACTED:private-key] [REDACTED:aws-access-key-id]",
        );
    }
}
