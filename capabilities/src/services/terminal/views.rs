//! Views of a session's output: `screen` (the `vt100` grid as it is now, readable even
//! for full-screen programs), `plain` (the scrollback as text: escape sequences dropped,
//! overwrites resolved, see [`text`](super::text); at most `[terminal] scrollback_lines`
//! lines) and `raw` (the bytes as the program wrote them), each from a cursor on and cut
//! to a byte budget from the front.

use crate::error::ToolError;

use super::{text, TerminalService};

/// Views of a session's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Screen,
    Plain,
    Raw,
}

/// A read of a session.
#[derive(Debug, Clone)]
pub struct ReadOutcome {
    pub text: String,
    pub next_cursor: u64,
    pub omitted_bytes: u64,
    /// The shell's exit code once it has exited.
    pub exit_code: Option<i32>,
}

impl TerminalService {
    /// Reads a session's output in one of its views.
    pub fn read(
        &self,
        owner: &str,
        id: &str,
        view: View,
        since: u64,
        max_bytes: usize,
    ) -> Result<ReadOutcome, ToolError> {
        let session = self.get(owner, id)?;
        if view == View::Screen {
            let mut output = session.output.lock().unwrap();
            let contents = output.screen().contents();
            let text = contents.trim_end_matches('\n').to_string();
            return Ok(ReadOutcome {
                text,
                next_cursor: output.total,
                omitted_bytes: 0,
                exit_code: output.exit_code.filter(|_| output.exited),
            });
        }
        let (bytes, mut omitted, total) = session.raw_since(since);
        let mut text = match view {
            View::Raw => String::from_utf8_lossy(&bytes).into_owned(),
            _ => text::plain(&bytes),
        };
        if view == View::Plain {
            let lines: Vec<&str> = text.split_inclusive('\n').collect();
            if lines.len() > self.config.scrollback_lines {
                let cut = lines.len() - self.config.scrollback_lines;
                omitted += lines[..cut].iter().map(|l| l.len() as u64).sum::<u64>();
                text = lines[cut..].concat();
            }
        }
        if text.len() > max_bytes {
            let mut start = text.len() - max_bytes;
            while !text.is_char_boundary(start) {
                start += 1;
            }
            omitted += start as u64;
            text = text[start..].to_string();
        }
        Ok(ReadOutcome {
            text,
            next_cursor: total,
            omitted_bytes: omitted,
            exit_code: session.exit_code().filter(|_| !session.alive()),
        })
    }
}
