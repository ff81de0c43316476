//! Terminal output as text: the `plain` view resolves what a terminal would show in its
//! scrollback — escape sequences dropped, carriage-return overwrites applied, backspaces
//! honoured — without keeping a screen grid.

/// Renders raw terminal output as plain lines.
pub fn plain(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let mut out = String::with_capacity(text.len());
    // The current line as characters, and the cursor within it.
    let mut line: Vec<char> = Vec::new();
    let mut cursor = 0usize;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => skip_escape(&mut chars),
            '\r' => cursor = 0,
            '\n' => {
                out.extend(line.drain(..));
                out.push('\n');
                cursor = 0;
            }
            '\u{8}' => cursor = cursor.saturating_sub(1),
            '\t' => put(&mut line, &mut cursor, '\t'),
            c if c.is_control() => {}
            c => put(&mut line, &mut cursor, c),
        }
    }
    out.extend(line);
    out
}

fn put(line: &mut Vec<char>, cursor: &mut usize, c: char) {
    if *cursor < line.len() {
        line[*cursor] = c;
    } else {
        line.push(c);
    }
    *cursor += 1;
}

/// Skips one escape sequence (CSI, OSC, or a two-character escape).
fn skip_escape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    match chars.next() {
        // CSI: parameters and intermediates, then a final byte in @..~
        Some('[') => {
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
        // OSC, DCS, APC, PM: up to BEL or ESC \
        Some(']') | Some('P') | Some('_') | Some('^') => {
            while let Some(c) = chars.next() {
                if c == '\u{7}' {
                    break;
                }
                if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                    chars.next();
                    break;
                }
            }
        }
        // Character set selection takes one more character.
        Some('(') | Some(')') | Some('*') | Some('+') => {
            chars.next();
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::plain;

    #[test]
    fn escapes_are_dropped() {
        assert_eq!(plain(b"\x1b[1;32mgreen\x1b[0m text"), "green text");
        assert_eq!(plain(b"\x1b]0;title\x07after"), "after");
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
}
