//! What a file's bytes are: an image the model can be shown (PNG, JPEG, GIF, WebP, by
//! their magic bytes), binary (a NUL byte in the first 8 KiB, or not UTF-8), or text;
//! and, for the message refusing a binary file, what kind of binary it looks like.

/// How far into a file a NUL byte makes it binary (what grep and ripgrep look at).
pub const SNIFF_BYTES: usize = 8192;

/// The MIME type of an image `bytes` starts like, if any.
pub fn image_mime(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// True when `bytes` has a NUL byte in its first [`SNIFF_BYTES`].
pub fn has_nul_head(bytes: &[u8]) -> bool {
    memchr::memchr(0, &bytes[..bytes.len().min(SNIFF_BYTES)]).is_some()
}

/// Why a file that is not an image counts as binary, from its first bytes `head` (at
/// least [`SNIFF_BYTES`] of them, or all) and the offset of its first byte that is not
/// UTF-8: `None` when it is text.
pub fn binary_reason(head: &[u8], invalid_utf8_at: Option<usize>) -> Option<String> {
    let kind = binary_kind(head)
        .map(|k| format!(" ({k})"))
        .unwrap_or_default();
    if has_nul_head(head) {
        return Some(format!("it holds NUL bytes{kind}"));
    }
    invalid_utf8_at.map(|at| format!("it is not UTF-8 text (invalid byte at offset {at}){kind}"))
}

/// A few common binary formats, for a clearer refusal.
fn binary_kind(bytes: &[u8]) -> Option<&'static str> {
    const KINDS: &[(&[u8], &str)] = &[
        (b"%PDF-", "a PDF document"),
        (b"PK\x03\x04", "a ZIP archive (also jar, docx, xlsx)"),
        (b"\x1f\x8b", "gzip-compressed data"),
        (b"\x7fELF", "an ELF executable or library"),
        (b"\0asm", "a WebAssembly module"),
        (b"SQLite format 3\0", "an SQLite database"),
        (b"\xfe\xff", "UTF-16 text (big-endian)"),
        (b"\xff\xfe", "UTF-16 text (little-endian)"),
    ];
    KINDS
        .iter()
        .find(|(magic, _)| bytes.starts_with(magic))
        .map(|(_, kind)| *kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_sniffed_from_their_magic_bytes() {
        assert_eq!(
            image_mime(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"),
            Some("image/png")
        );
        assert_eq!(
            image_mime(b"\xff\xd8\xff\xe0\0\x10JFIF"),
            Some("image/jpeg")
        );
        assert_eq!(image_mime(b"GIF89a\x01\0"), Some("image/gif"));
        assert_eq!(image_mime(b"GIF87a"), Some("image/gif"));
        assert_eq!(image_mime(b"RIFF\x24\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(image_mime(b"RIFF\x24\0\0\0WAVEfmt "), None);
        assert_eq!(image_mime(b"\x89PNG"), None);
        assert_eq!(image_mime(b"hello"), None);
    }

    #[test]
    fn text_nul_and_non_utf8_are_told_apart() {
        assert_eq!(binary_reason("héllo\n".as_bytes(), None), None);
        assert_eq!(binary_reason(b"", None), None);
        let why = binary_reason(b"\x7fELF\x02\x01\x01\0\0", None).unwrap();
        assert!(why.contains("NUL") && why.contains("ELF"), "{why}");
        let why = binary_reason(b"caf\xe9\n", Some(3)).unwrap();
        assert!(
            why.contains("not UTF-8") && why.contains("offset 3"),
            "{why}"
        );
    }

    #[test]
    fn a_nul_past_the_head_does_not_make_the_head_check_binary() {
        let mut bytes = vec![b'a'; SNIFF_BYTES];
        assert!(!has_nul_head(&bytes));
        bytes.push(0);
        assert!(!has_nul_head(&bytes));
        bytes[SNIFF_BYTES - 1] = 0;
        assert!(has_nul_head(&bytes));
    }
}
