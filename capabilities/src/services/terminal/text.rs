//! Terminal output as text: the `plain` view resolves what a terminal would show in its
//! scrollback — escape sequences dropped, carriage-return overwrites applied, backspaces
//! honoured — without keeping a screen grid.
//!
//! [`PlainStream`] does it incrementally, chunk by chunk as the PTY delivers output (an
//! escape sequence or a UTF-8 character split between chunks is carried over), so a
//! pattern wait renders each byte once; [`plain`] renders a whole buffer with it. A run
//! of text without control bytes is validated and copied into the line whole; only
//! control characters, escape sequences and the characters around them go one by one.
//!
//! Why our own renderer rather than `vt100` or `vte`: `vt100` keeps a grid (lines wrap
//! at its width, and what scrolled off is gone), while the plain view is the scrollback
//! as lines of any length. `vte` (under `vt100`) is a parser generic over its callbacks,
//! so with our callbacks it would be compiled in this crate's profile (unoptimised in
//! tests and benches) and call back once per printable character, where the runs here
//! are copied whole; and its output differs from this view's in an edge case: it
//! executes a lone byte 0x80-0x9F as a C1 control where the lossy decode the plain view
//! promises gives U+FFFD. Not measured against this one.
//! The escape grammar kept here is small: CSI up to its final byte, OSC/DCS/APC/PM
//! strings up to BEL or ST, charset designators, and two-character escapes.

/// Renders raw terminal output as plain lines.
pub fn plain(raw: &[u8]) -> String {
    let mut stream = PlainStream::default();
    let mut out = String::with_capacity(raw.len());
    stream.feed(raw, |line| {
        out.push_str(line);
        out.push('\n');
    });
    stream.finish();
    out.push_str(stream.line());
    out
}

/// Where the renderer is within an escape sequence.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Escape {
    #[default]
    None,
    /// After ESC.
    Start,
    /// In a CSI: parameters and intermediates, up to a final byte in `@..~`.
    Csi,
    /// In an OSC, DCS, APC or PM string: up to BEL or ESC `\`.
    Str,
    /// After an ESC within such a string.
    StrEsc,
    /// After ESC and a character-set designator: one more character.
    Charset,
}

/// An incremental plain renderer: feed it raw output in chunks; it hands over each
/// completed line and keeps the line being written (which `\r` and backspace may still
/// change).
#[derive(Debug, Default)]
pub struct PlainStream {
    /// The bytes of a UTF-8 character cut at the end of the last chunk.
    partial: Vec<u8>,
    escape: Escape,
    /// The current line, and the cursor within it (a byte offset at a character
    /// boundary).
    line: String,
    cursor: usize,
    /// The lowest byte offset of `line` written since [`PlainStream::mark_seen`].
    dirty: usize,
}

impl PlainStream {
    /// Renders `raw`; `done` gets each line completed by it (without its newline).
    pub fn feed(&mut self, raw: &[u8], mut done: impl FnMut(&str)) {
        let joined;
        let mut bytes = raw;
        if !self.partial.is_empty() {
            let mut carried = std::mem::take(&mut self.partial);
            carried.extend_from_slice(raw);
            joined = carried;
            bytes = &joined;
        }
        let mut at = 0;
        while at < bytes.len() {
            if self.escape == Escape::None {
                // A run of text, validated and put whole: up to a C0 control other than
                // Tab, DEL, or 0xC2 (the first byte of the C1 controls, which are
                // dropped, and of other characters, which then go one by one). The test
                // is written out here, not called: this loop runs for every byte of
                // output, in the unoptimised profile too.
                let (len, mut end) = (bytes.len(), at);
                while end < len {
                    let byte = bytes[end];
                    if (byte < 0x20 && byte != b'\t') || byte == 0x7f || byte == 0xc2 {
                        break;
                    }
                    end += 1;
                }
                if end > at {
                    match std::str::from_utf8(&bytes[at..end]) {
                        Ok(text) => {
                            self.put_str(text);
                            at = end;
                            continue;
                        }
                        Err(error) if error.valid_up_to() > 0 => {
                            let valid = &bytes[at..at + error.valid_up_to()];
                            // Valid (from_utf8 said so): checked again, rarely (only
                            // before a byte that is not UTF-8).
                            self.put_str(std::str::from_utf8(valid).unwrap_or_default());
                            at += valid.len();
                        }
                        Err(_) => {}
                    }
                }
            }
            // One character (or one invalid sequence, or the start of a character cut
            // at the end of the chunk), one by one.
            let window = &bytes[at..bytes.len().min(at + 4)];
            match std::str::from_utf8(window) {
                Ok(text) => {
                    let c = text.chars().next().unwrap_or('\u{FFFD}');
                    self.char(c, &mut done);
                    at += c.len_utf8();
                }
                Err(error) if error.valid_up_to() > 0 => {
                    // Valid (from_utf8 said so), checked again: a few bytes.
                    let text =
                        std::str::from_utf8(&window[..error.valid_up_to()]).unwrap_or_default();
                    let c = text.chars().next().unwrap_or('\u{FFFD}');
                    self.char(c, &mut done);
                    at += c.len_utf8();
                }
                Err(error) => match error.error_len() {
                    Some(bad) => {
                        self.char('\u{FFFD}', &mut done);
                        at += bad;
                    }
                    None => {
                        self.partial = bytes[at..].to_vec();
                        return;
                    }
                },
            }
        }
    }

    /// Ends the input: a UTF-8 character left incomplete becomes U+FFFD.
    pub fn finish(&mut self) {
        if !std::mem::take(&mut self.partial).is_empty() {
            self.char('\u{FFFD}', &mut |_| {});
        }
    }

    /// The line being written.
    pub fn line(&self) -> &str {
        &self.line
    }

    /// The lowest byte offset of the current line written since the last
    /// [`PlainStream::mark_seen`] (the line's length when none was).
    pub fn dirty_from(&self) -> usize {
        self.dirty.min(self.line.len())
    }

    /// Records that the current line has been looked at as it is.
    pub fn mark_seen(&mut self) {
        self.dirty = self.line.len();
    }

    fn char(&mut self, c: char, done: &mut impl FnMut(&str)) {
        self.escape = match self.escape {
            Escape::None => match c {
                '\u{1b}' => Escape::Start,
                '\r' => {
                    self.cursor = 0;
                    Escape::None
                }
                '\n' => {
                    done(&self.line);
                    self.line.clear();
                    self.cursor = 0;
                    self.dirty = 0;
                    Escape::None
                }
                '\u{8}' => {
                    self.cursor = self.line[..self.cursor]
                        .chars()
                        .next_back()
                        .map_or(0, |c| self.cursor - c.len_utf8());
                    Escape::None
                }
                c if c.is_control() && c != '\t' => Escape::None,
                c => {
                    self.put_str(c.encode_utf8(&mut [0; 4]));
                    Escape::None
                }
            },
            Escape::Start => match c {
                '[' => Escape::Csi,
                ']' | 'P' | '_' | '^' => Escape::Str,
                '(' | ')' | '*' | '+' => Escape::Charset,
                // A two-character escape.
                _ => Escape::None,
            },
            Escape::Csi if ('@'..='~').contains(&c) => Escape::None,
            Escape::Csi => Escape::Csi,
            Escape::Str | Escape::StrEsc if c == '\u{7}' => Escape::None,
            Escape::Str | Escape::StrEsc if c == '\u{1b}' => Escape::StrEsc,
            Escape::StrEsc if c == '\\' => Escape::None,
            Escape::Str | Escape::StrEsc => Escape::Str,
            Escape::Charset => Escape::None,
        };
    }

    /// Writes `text` at the cursor: over the characters there (as many as `text` has),
    /// past the end of the line appended.
    fn put_str(&mut self, text: &str) {
        self.dirty = self.dirty.min(self.cursor);
        if self.cursor == self.line.len() {
            self.line.push_str(text);
        } else {
            let over = text.chars().count();
            let end = self.line[self.cursor..]
                .char_indices()
                .nth(over)
                .map_or(self.line.len(), |(at, _)| self.cursor + at);
            self.line.replace_range(self.cursor..end, text);
        }
        self.cursor += text.len();
    }
}

#[cfg(test)]
mod tests {
    use super::{plain, PlainStream};

    #[test]
    fn escapes_are_dropped() {
        assert_eq!(plain(b"\x1b[1;32mgreen\x1b[0m text"), "green text");
        assert_eq!(plain(b"\x1b]0;title\x07after"), "after");
        assert_eq!(plain(b"\x1b]0;ti\x1btle\x1b\\after"), "after");
        assert_eq!(plain(b"\x1b(Bcharset\x1b7two"), "charsettwo");
    }

    #[test]
    fn carriage_returns_overwrite() {
        assert_eq!(
            plain(b"progress 10%\rprogress 99%\r\ndone\r\n"),
            "progress 99%\ndone\n"
        );
        assert_eq!(plain(b"abcdef\rXY\n"), "XYcdef\n");
    }

    #[test]
    fn backspace_moves_back() {
        assert_eq!(plain(b"ab\x08c\n"), "ac\n");
    }

    #[test]
    fn invalid_utf8_is_replaced_like_a_lossy_decode() {
        let raw = b"a\xffb\xe2\x82c\xe2\x82";
        assert_eq!(plain(raw), String::from_utf8_lossy(raw));
    }

    #[test]
    fn any_split_into_chunks_renders_as_the_whole() {
        let raw = "\x1b[?2004hé$ echo \x1b]0;tï\x07hi\r\n\x1b[1mhi\x1b[0m\r\nprogress 1%\rprogress 2%\r\n€nd"
            .as_bytes();
        let whole = plain(raw);
        for cut in 0..raw.len() {
            for second in cut..raw.len() {
                let mut stream = PlainStream::default();
                let mut out = String::new();
                for chunk in [&raw[..cut], &raw[cut..second], &raw[second..]] {
                    stream.feed(chunk, |line| {
                        out.push_str(line);
                        out.push('\n');
                    });
                }
                stream.finish();
                out.push_str(stream.line());
                assert_eq!(out, whole, "cut at {cut} and {second}");
            }
        }
    }

    #[test]
    fn the_dirty_mark_is_where_the_line_last_changed() {
        let mut stream = PlainStream::default();
        stream.feed(b"abcdef", |_| {});
        assert_eq!(stream.dirty_from(), 0);
        stream.mark_seen();
        assert_eq!(stream.dirty_from(), 6);
        stream.feed(b"gh", |_| {});
        assert_eq!(stream.dirty_from(), 6);
        stream.mark_seen();
        stream.feed(b"\rX", |_| {});
        assert_eq!(stream.dirty_from(), 0);
        stream.mark_seen();
        stream.feed(b"\r\n", |_| {});
        assert_eq!(stream.dirty_from(), 0);
    }

    /// The renderer as it was before runs were copied whole: character by character,
    /// over a lossy decode.
    fn plain_by_character(raw: &[u8]) -> String {
        let (mut out, mut line, mut cursor) = (String::new(), Vec::<char>::new(), 0);
        let mut escape = super::Escape::None;
        for c in String::from_utf8_lossy(raw).chars() {
            use super::Escape::*;
            escape = match escape {
                None => match c {
                    '\u{1b}' => Start,
                    '\r' => {
                        cursor = 0;
                        None
                    }
                    '\n' => {
                        out.extend(&line);
                        out.push('\n');
                        line.clear();
                        cursor = 0;
                        None
                    }
                    '\u{8}' => {
                        cursor = usize::saturating_sub(cursor, 1);
                        None
                    }
                    c if c.is_control() && c != '\t' => None,
                    c => {
                        if cursor < line.len() {
                            line[cursor] = c;
                        } else {
                            line.push(c);
                        }
                        cursor += 1;
                        None
                    }
                },
                Start => match c {
                    '[' => Csi,
                    ']' | 'P' | '_' | '^' => Str,
                    '(' | ')' | '*' | '+' => Charset,
                    _ => None,
                },
                Csi if ('@'..='~').contains(&c) => None,
                Csi => Csi,
                Str | StrEsc if c == '\u{7}' => None,
                Str | StrEsc if c == '\u{1b}' => StrEsc,
                StrEsc if c == '\\' => None,
                Str | StrEsc => Str,
                Charset => None,
            };
        }
        out.extend(&line);
        out
    }

    #[test]
    fn runs_copied_whole_render_as_character_by_character() {
        // Random mixes of text, multi-byte and invalid UTF-8, C0 and C1 controls,
        // escapes, overwrites and backspaces, each cut into random chunks.
        let pieces: &[&[u8]] = &[
            b"abc",
            b"hello world ",
            b"\t",
            b"\r",
            b"\n",
            b"\r\n",
            b"\x08",
            b"\x08\x08",
            b"\x1b[1;32m",
            b"\x1b[0m",
            b"\x1b]0;title\x07",
            b"\x1b]0;t\x1b\\",
            b"\x1b(B",
            b"\x1b7",
            b"\x1b",
            b"[",
            "\u{e9}".as_bytes(),
            "\u{20ac}".as_bytes(),
            "\u{1f600}".as_bytes(),
            "\u{a9}".as_bytes(),
            "\u{85}".as_bytes(),
            b"\xc2",
            b"\xff",
            b"\xe2\x82",
            b"\xf0\x9f",
            b"\x7f",
            b"\x00",
            b"\x07",
            b"xyz\rA",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |bound: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % bound as u64) as usize
        };
        for _ in 0..2000 {
            let mut raw = Vec::new();
            for _ in 0..next(30) {
                raw.extend_from_slice(pieces[next(pieces.len())]);
            }
            let expected = plain_by_character(&raw);
            assert_eq!(plain(&raw), expected, "{raw:?}");
            let mut stream = PlainStream::default();
            let mut out = String::new();
            let mut rest = &raw[..];
            while !rest.is_empty() {
                let (chunk, tail) = rest.split_at(1 + next(rest.len()));
                stream.feed(chunk, |line| {
                    out.push_str(line);
                    out.push('\n');
                });
                rest = tail;
            }
            stream.finish();
            out.push_str(stream.line());
            assert_eq!(out, expected, "{raw:?} in chunks");
        }
    }
}
