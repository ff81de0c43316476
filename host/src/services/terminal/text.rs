//! Terminal output as text: the `plain` view resolves what a terminal would show in its
//! scrollback — escape sequences dropped, carriage-return overwrites applied, backspaces
//! honoured — without keeping a screen grid.
//!
//! [`PlainStream`] does it incrementally, chunk by chunk as the PTY delivers output (an
//! escape sequence or a UTF-8 character split between chunks is carried over), so a
//! pattern wait renders each byte once; [`plain`] renders a whole buffer with it.

/// Renders raw terminal output as plain lines.
pub fn plain(raw: &[u8]) -> String {
    let mut stream = PlainStream::default();
    let mut out = String::with_capacity(raw.len());
    stream.feed(raw, |line| {
        out.extend(line);
        out.push('\n');
    });
    stream.finish();
    out.extend(stream.line());
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
    /// The current line as characters, and the cursor within it.
    line: Vec<char>,
    cursor: usize,
    /// The lowest index of `line` written since [`PlainStream::mark_seen`].
    dirty: usize,
}

impl PlainStream {
    /// Renders `raw`; `done` gets each line completed by it (without its newline).
    pub fn feed(&mut self, raw: &[u8], mut done: impl FnMut(&[char])) {
        let joined;
        let mut bytes = raw;
        if !self.partial.is_empty() {
            let mut carried = std::mem::take(&mut self.partial);
            carried.extend_from_slice(raw);
            joined = carried;
            bytes = &joined;
        }
        loop {
            match std::str::from_utf8(bytes) {
                Ok(text) => {
                    self.chars(text, &mut done);
                    return;
                }
                Err(error) => {
                    let (valid, rest) = bytes.split_at(error.valid_up_to());
                    self.chars(std::str::from_utf8(valid).unwrap_or_default(), &mut done);
                    match error.error_len() {
                        Some(bad) => {
                            self.char('\u{FFFD}', &mut done);
                            bytes = &rest[bad..];
                        }
                        None => {
                            self.partial = rest.to_vec();
                            return;
                        }
                    }
                }
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
    pub fn line(&self) -> &[char] {
        &self.line
    }

    /// The lowest index of the current line written since the last
    /// [`PlainStream::mark_seen`] (the line's length when none was).
    pub fn dirty_from(&self) -> usize {
        self.dirty.min(self.line.len())
    }

    /// Records that the current line has been looked at as it is.
    pub fn mark_seen(&mut self) {
        self.dirty = self.line.len();
    }

    fn chars(&mut self, text: &str, done: &mut impl FnMut(&[char])) {
        for c in text.chars() {
            self.char(c, done);
        }
    }

    fn char(&mut self, c: char, done: &mut impl FnMut(&[char])) {
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
                    self.cursor = self.cursor.saturating_sub(1);
                    Escape::None
                }
                c if c.is_control() && c != '\t' => Escape::None,
                c => {
                    self.put(c);
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

    fn put(&mut self, c: char) {
        if self.cursor < self.line.len() {
            self.line[self.cursor] = c;
        } else {
            self.line.push(c);
        }
        self.dirty = self.dirty.min(self.cursor);
        self.cursor += 1;
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
                        out.extend(line);
                        out.push('\n');
                    });
                }
                stream.finish();
                out.extend(stream.line());
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
}
