//! Settling: when a send is over. `Session::settle` wakes when its [`Watch`] (fed by
//! the reader as output arrives) says so, when the shell exits, and at the quiet or
//! timeout instant, and settles the send `exited` (the shell exited), `pattern` (its
//! wait pattern appeared), `quiet` (no pattern, and no output for `wait.quiet`),
//! `timeout` or `cancelled` (a background send killed).
//!
//! Pattern waits: when a send's `wait.pattern` has appeared in what the command printed.
//!
//! A terminal echoes what is typed (the kernel in canonical mode, readline and REPLs by
//! themselves), so the output of a send begins with its own input: a pattern that is
//! part of the command line (`sleep 1; echo done` waiting for `done`) must not match
//! there. [`Echo`] knows the lines the send typed and takes out of the search the first
//! line of output (in order) that ends with each of them — `$ sleep 1; echo done` is
//! the echo of `sleep 1; echo done`, the `done` printed a second later is not. Lines
//! that are not an echo always count, so a program that echoes nothing (a password
//! prompt; the terminal is then canonical without echo and nothing is taken out at
//! all; a full-screen program) still has all its output searched, and the echo of a
//! later line of a multi-line input, printed after the earlier lines' output, is still
//! recognised. A line can be echoed twice: input typed while the shell is still busy is
//! echoed by the kernel at once, then again by readline (after the prompt) when the
//! shell reads it; so after its first echo each printable typed line may still take out
//! one later line ending with it, in order. The line being written (no newline yet) is left out while it may be the
//! start of an expected echo (it ends with a beginning of the typed line). A typed line
//! with control characters (Tab completion, arrow keys, Ctrl-C) is echoed as something
//! else: the next line of output is taken as its echo.
//!
//! [`PatternWait`] searches incrementally: the output is rendered as plain text once,
//! chunk by chunk, and each look searches only what is new plus an overlap of
//! [`OVERLAP`] bytes before it (so a match cut between chunks, or spanning a line break
//! into the prompt, is found), keeping only a bounded tail of the text.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use regex::Regex;

use super::sessions::Session;
use super::text::PlainStream;
use super::SendWait;

/// How far before the output new to a look a match may begin.
pub const OVERLAP: usize = 4096;

/// The searchable text kept: its tail past this is dropped (in steps).
const KEEP: usize = 64 * 1024;

/// One line the send typed, and what its echo looks like.
#[derive(Debug, Clone)]
enum Typed {
    /// Printable text: its echo is a line ending with it.
    Text {
        text: String,
        /// The KMP prefix function of `text`'s bytes.
        prefix: Vec<usize>,
    },
    /// Text with control characters: the next line is its echo.
    Any,
}

impl Typed {
    fn new(line: &str) -> Typed {
        if line.chars().any(char::is_control) {
            return Typed::Any;
        }
        let bytes = line.as_bytes();
        let mut prefix = vec![0; bytes.len()];
        let mut k = 0;
        for i in 1..bytes.len() {
            while k > 0 && bytes[i] != bytes[k] {
                k = prefix[k - 1];
            }
            if bytes[i] == bytes[k] {
                k += 1;
            }
            prefix[i] = k;
        }
        Typed::Text {
            text: line.to_string(),
            prefix,
        }
    }

    /// Whether `line`, complete, is this line's echo.
    fn is_echo(&self, line: &str) -> bool {
        match self {
            Typed::Text { text, .. } => line.ends_with(text.as_str()),
            Typed::Any => true,
        }
    }

    /// Whether `line`, still being written, may be (the start of) this line's echo: it
    /// ends with a non-empty beginning of the typed line.
    fn may_be_echo(&self, line: &str) -> bool {
        let (typed, prefix) = match self {
            Typed::Any => return true,
            Typed::Text { text, prefix } => (text.as_bytes(), prefix),
        };
        if typed.is_empty() || line.is_empty() {
            return false;
        }
        // The longest suffix of `line` that is a prefix of the typed line (KMP over the
        // last `typed.len()` bytes of the line, where any such suffix begins). Bytes,
        // not characters: a match begins with the typed line's first byte, which starts
        // a character, so it begins at a character boundary of the line.
        let line = line.as_bytes();
        let mut k = 0;
        for &c in &line[line.len().saturating_sub(typed.len())..] {
            if k == typed.len() {
                k = prefix[k - 1];
            }
            while k > 0 && c != typed[k] {
                k = prefix[k - 1];
            }
            if c == typed[k] {
                k += 1;
            }
        }
        k > 0
    }
}

/// The echo a send's typed input is expected to produce.
#[derive(Debug, Clone, Default)]
pub struct Echo {
    pending: VecDeque<Typed>,
    /// Printable lines echoed once, whose second echo (readline showing a line the
    /// kernel echoed when it was typed ahead) may still come, in order.
    echoed_once: VecDeque<Typed>,
}

impl Echo {
    /// The echo of `typed` (the input, with the Enter a send adds): one line per line
    /// end typed (`\r` or `\n`), and the text after the last line end when there is
    /// some. `echoes` is false when the terminal will not echo the input (canonical mode
    /// with echo off: a password prompt).
    pub fn of(typed: &str, echoes: bool) -> Echo {
        if !echoes {
            return Echo::default();
        }
        let mut pending: VecDeque<Typed> = typed.split(['\r', '\n']).map(Typed::new).collect();
        if matches!(pending.back(), Some(Typed::Text { text, .. }) if text.is_empty()) {
            pending.pop_back();
        }
        Echo {
            pending,
            echoed_once: VecDeque::new(),
        }
    }

    /// Whether a completed `line` is the echo of the next typed line (then that line's
    /// echo has been seen).
    fn take(&mut self, line: &str) -> bool {
        if let Some(typed) = self.pending.front().filter(|typed| typed.is_echo(line)) {
            if matches!(typed, Typed::Text { .. }) {
                self.echoed_once.push_back(typed.clone());
            }
            self.pending.pop_front();
            return true;
        }
        // A second echo (see the module doc): `$ sleep 1; echo done` after the kernel's
        // `sleep 1; echo done`.
        if self
            .echoed_once
            .front()
            .is_some_and(|typed| typed.is_echo(line))
        {
            self.echoed_once.pop_front();
            return true;
        }
        false
    }

    /// Whether the line being written may be an echo still (a first or a second one).
    fn hides(&self, line: &str) -> bool {
        let may_be = |typed: Option<&Typed>| typed.is_some_and(|typed| typed.may_be_echo(line));
        may_be(self.pending.front()) || may_be(self.echoed_once.front())
    }
}

/// An incremental search for a send's wait pattern in the output after its echo.
#[derive(Debug)]
pub struct PatternWait {
    regex: Arc<Regex>,
    echo: Echo,
    stream: PlainStream,
    /// The completed lines that are not an echo, each with its newline; only a tail is
    /// kept.
    text: String,
    /// Bytes of `text` already searched.
    searched: usize,
    found: bool,
}

impl PatternWait {
    pub fn new(regex: Arc<Regex>, echo: Echo) -> PatternWait {
        PatternWait {
            regex,
            echo,
            stream: PlainStream::default(),
            text: String::new(),
            searched: 0,
            found: false,
        }
    }

    /// Renders more raw output and looks at what is new; true once the pattern matched.
    pub fn feed(&mut self, raw: &[u8]) -> bool {
        if self.found {
            return true;
        }
        let (echo, text) = (&mut self.echo, &mut self.text);
        self.stream.feed(raw, |line| {
            if !echo.take(line) {
                text.push_str(line);
                text.push('\n');
            }
        });
        self.found = self.look();
        self.found
    }

    fn look(&mut self) -> bool {
        let line = self.stream.line();
        let line_counts = !self.echo.hides(line);
        let dirty = self.stream.dirty_from();
        let text_new = self.text.len() > self.searched;
        let line_new = line_counts && dirty < line.len();
        if !text_new && !line_new {
            return false;
        }
        let mut haystack = String::new();
        let start;
        let mut line_from = dirty.saturating_sub(OVERLAP);
        while !line.is_char_boundary(line_from) {
            line_from -= 1;
        }
        if text_new || line_from == 0 {
            // The tail of the text (from the overlap before what is new), then the line.
            let mut from = if text_new {
                self.searched
            } else {
                self.text.len()
            }
            .saturating_sub(OVERLAP);
            while !self.text.is_char_boundary(from) {
                from -= 1;
            }
            // One character before `from` as context (for `\b` and `(?m)^`).
            let context = self.text[..from]
                .chars()
                .next_back()
                .map_or(0, char::len_utf8);
            haystack.push_str(&self.text[from - context..]);
            start = context;
            if line_counts {
                haystack.push_str(line);
            }
        } else {
            // Only the line changed, far into it: its tail from the overlap on, with one
            // character before it as context.
            let context = line[..line_from]
                .chars()
                .next_back()
                .map_or(0, char::len_utf8);
            haystack.push_str(&line[line_from - context..]);
            start = context;
        }
        let found = self.regex.is_match_at(&haystack, start);
        self.searched = self.text.len();
        if line_counts {
            self.stream.mark_seen();
        }
        if self.text.len() > 2 * KEEP {
            let mut cut = self.text.len() - KEEP;
            while !self.text.is_char_boundary(cut) {
                cut += 1;
            }
            self.text.drain(..cut);
            self.searched = self.text.len();
        }
        found
    }
}

/// The active send's wait as the reader sees it: each chunk of output is fed to its
/// pattern wait as it arrives (under the output lock, so no chunk is missed or fed
/// twice), and the send is woken only when that matters: the pattern matched, or every
/// chunk for a background send (which forwards the output to its job). A quiet wait
/// wakes on its own timer; the shell's exit always wakes. An echo's intermediate chunks
/// (the typed line, the prompt's escapes) then cost no wake-up of the send.
#[derive(Debug)]
pub(super) struct Watch {
    pattern: Option<PatternWait>,
    every_output: bool,
    matched: bool,
}

impl Watch {
    pub(super) fn new(pattern: Option<PatternWait>, every_output: bool) -> Watch {
        Watch {
            pattern,
            every_output,
            matched: false,
        }
    }

    /// New output: whether the send is to be woken.
    pub(super) fn output(&mut self, bytes: &[u8]) -> bool {
        if let Some(pattern) = &mut self.pattern {
            if !self.matched && pattern.feed(bytes) {
                self.matched = true;
                return true;
            }
        }
        self.every_output
    }

    /// Whether the pattern has matched.
    pub(super) fn matched(&self) -> bool {
        self.matched
    }
}

impl Session {
    /// Waits until the send that began at `start` settles; its [`Watch`] is already in
    /// place (from before its input was written). `on_output` runs at each wake-up.
    pub(super) async fn settle(
        &self,
        start: Instant,
        wait: &SendWait,
        cancel: Option<&tokio_util::sync::CancellationToken>,
        mut on_output: impl FnMut(),
    ) -> &'static str {
        let deadline = start + wait.timeout;
        // One timer for the whole wait, moved only when the instant to wake at moves (a
        // pattern wait's never does): not a timer registered and dropped per wake-up.
        let mut wake_at = deadline;
        let sleep = tokio::time::sleep_until(wake_at.into());
        tokio::pin!(sleep);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (last_output, exited, matched) = {
                let output = self.output.lock().unwrap();
                let matched = output.watch.as_ref().is_some_and(Watch::matched);
                (output.last_output, output.exited, matched)
            };
            on_output();
            if exited {
                return "exited";
            }
            if matched {
                return "pattern";
            }
            let quiet_at = last_output.max(start) + wait.quiet;
            let now = Instant::now();
            if wait.pattern.is_none() && now >= quiet_at {
                return "quiet";
            }
            if now >= deadline {
                return "timeout";
            }
            let wake = if wait.pattern.is_none() {
                quiet_at.min(deadline)
            } else {
                deadline
            };
            if wake != wake_at {
                wake_at = wake;
                sleep.as_mut().reset(wake.into());
            }
            let cancelled = async {
                match cancel {
                    Some(token) => token.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = notified => {}
                _ = sleep.as_mut() => {}
                _ = cancelled => return "cancelled",
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(pattern: &str, typed: &str) -> PatternWait {
        PatternWait::new(
            Arc::new(Regex::new(pattern).unwrap()),
            Echo::of(typed, true),
        )
    }

    /// Feeds `chunks` in order; the index of the chunk after which it matched.
    fn matched_at(wait: &mut PatternWait, chunks: &[&str]) -> Option<usize> {
        chunks.iter().position(|chunk| wait.feed(chunk.as_bytes()))
    }

    #[test]
    fn the_echo_of_the_command_line_does_not_match_its_output_does() {
        // As bash with readline shows `sleep 1; echo finished-marker`.
        let mut wait = wait("finished-marker", "sleep 1; echo finished-marker\r");
        let chunks = [
            "sleep 1; echo fini",
            "shed-marker\r\n\x1b[?2004l\r",
            "finished-marker\r\n",
            "\x1b[?2004h$ ",
        ];
        assert_eq!(matched_at(&mut wait, &chunks), Some(2));
    }

    #[test]
    fn a_prompt_pattern_matches_the_prompt_after_the_output_across_the_line_break() {
        let mut wait = wait(r"42-ready\n\$ ", "echo $((20+22))-ready\r");
        let chunks = [
            "echo $((20+22))-ready\r\n\x1b[?2004l\r",
            "42-ready\r\n",
            "\x1b[?2004h$ ",
        ];
        assert_eq!(matched_at(&mut wait, &chunks), Some(2));
    }

    #[test]
    fn each_line_of_a_multi_line_input_has_its_echo_left_out() {
        // bash runs the first line before it echoes the second.
        let mut wait = wait("echo b|^b$", "echo a\necho b\r");
        let chunks = [
            "echo a\r\n\x1b[?2004l\r",
            "a\r\n\x1b[?2004h$ echo b\r\n\x1b[?2004l\r",
            "b\r\n",
        ];
        let mut wait_multiline = super::PatternWait::new(
            Arc::new(Regex::new("(?m)echo b|^b$").unwrap()),
            Echo::of("echo a\necho b\r", true),
        );
        assert_eq!(matched_at(&mut wait_multiline, &chunks), Some(2));
        // Without (?m) `^b$` cannot match: only the echo `echo b` could, and does not.
        assert_eq!(matched_at(&mut wait, &chunks), None);
    }

    #[test]
    fn input_typed_ahead_echoed_twice_has_both_echoes_left_out() {
        // Typed while bash was busy: the kernel echoes both lines at once, then readline
        // shows each again after its prompt as bash reads it.
        let mut wait = wait(
            "second-marker",
            "echo first-$((1+1))\nsleep 1; echo second-marker\r",
        );
        let chunks = [
            "echo first-$((1+1))\r\nsleep 1; echo second-marker\r\n",
            "\x1b[?2004h$ echo first-$((1+1))\r\n\x1b[?2004l\rfirst-2\r\n",
            "\x1b[?2004h$ sleep 1; echo second-mar",
            "ker\r\n\x1b[?2004l\r",
            "second-marker\r\n",
        ];
        assert_eq!(matched_at(&mut wait, &chunks), Some(4));
        // Echoed once, the command's own output of the typed text still counts.
        let mut wait = wait_for_once("sleep 1; echo x", "echo 'sleep 1; echo x'\r");
        let chunks = ["$ echo 'sleep 1; echo x'\r\n", "sleep 1; echo x\r\n"];
        assert_eq!(matched_at(&mut wait, &chunks), Some(1));
    }

    fn wait_for_once(pattern: &str, typed: &str) -> PatternWait {
        wait(&regex::escape(pattern), typed)
    }

    #[test]
    fn with_echo_off_every_line_counts() {
        // `read -s`: the typed secret is not echoed; the output repeats it.
        let mut wait = PatternWait::new(
            Arc::new(Regex::new("got-secret").unwrap()),
            Echo::of("secret\r", false),
        );
        assert!(wait.feed(b"got-secret\r\n$ "));
    }

    #[test]
    fn a_program_that_does_not_echo_still_has_its_output_and_prompt_searched() {
        // `q` and Enter to a full-screen program that echoes nothing.
        let mut wait = wait(r"\$ $", "q\r");
        assert!(wait.feed(b"\x1b[?1049l\r\x1b[?2004h$ "));
    }

    #[test]
    fn the_line_being_echoed_is_left_out_until_it_is_complete() {
        let mut wait = wait("echo", "echo hi\r");
        assert!(!wait.feed(b"ech"));
        assert!(!wait.feed(b"o hi"));
        assert!(!wait.feed(b"\r\n"));
        assert!(!wait.feed(b"hi\r\n$ "));
        assert!(wait.feed(b"echo\r\n"));
    }

    #[test]
    fn input_without_enter_has_its_echo_left_out() {
        let mut wait = wait("y", "y");
        assert!(!wait.feed(b"Continue? y"));
        assert!(!wait.feed(b"\r\n"));
        assert!(wait.feed(b"yes, continuing\r\n"));
    }

    #[test]
    fn a_match_cut_between_chunks_is_found() {
        let mut wait = wait("needle-[0-9]+-end", "run\r");
        assert!(!wait.feed(b"run\r\nhay hay nee"));
        assert!(!wait.feed(b"dle-12"));
        assert!(wait.feed(b"3-end and more"));
    }

    #[test]
    fn a_match_far_into_a_long_line_is_found_with_bounded_work() {
        let mut wait = wait("needle", "run\r");
        assert!(!wait.feed(b"run\r\n"));
        let hay = vec![b'x'; 100_000];
        assert!(!wait.feed(&hay));
        assert!(!wait.feed(b"nee"));
        assert!(wait.feed(b"dle"));
    }

    #[test]
    fn the_searchable_text_kept_stays_bounded() {
        let mut wait = wait("never-printed", "run\r");
        let line = "0123456789".repeat(10) + "\r\n";
        for _ in 0..10_000 {
            assert!(!wait.feed(line.as_bytes()));
        }
        assert!(wait.text.len() <= 2 * KEEP);
        assert!(wait.feed(b"never-printed\r\n"));
    }

    #[test]
    fn a_start_anchor_matches_only_at_the_start_of_the_output() {
        let mut wait = wait(r"\Aok", "run\r");
        assert!(!wait.feed(b"run\r\nnot ok\r\n"));
        let mut wait = super::PatternWait::new(
            Arc::new(Regex::new(r"\Aok").unwrap()),
            Echo::of("run\r", true),
        );
        assert!(wait.feed(b"run\r\nok\r\n"));
    }

    #[test]
    fn control_characters_make_the_next_line_the_echo() {
        // Tab completion: `ec<Tab> hi` shows as `echo hi`.
        let mut wait = wait("hi", "ec\t hi\r");
        assert!(!wait.feed(b"$ echo hi\r\n"));
        assert!(wait.feed(b"hi\r\n"));
    }
}
