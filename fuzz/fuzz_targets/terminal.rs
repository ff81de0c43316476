//! Fuzz target `terminal`: arbitrary terminal output through the `plain` text renderer
//! ([`dsh::services::terminal::text`]) and a send's pattern search
//! ([`dsh::services::terminal::waiting::PatternWait`]). Asserts what the renderer's unit
//! tests do (`capabilities/src/services/terminal/text.rs`): output cut into chunks at any points
//! renders as the whole does, and the renderer (which copies runs of text whole) renders
//! as the character-by-character reference kept here does. Of the search: no panic for
//! any typed input and any pattern; and with echo off, a literal pattern (at most
//! `OVERLAP` bytes) that the output rendered so far contains has been found by then,
//! however the output was cut.

#![no_main]

use std::sync::Arc;

use dsh::services::terminal::text::{plain, PlainStream};
use dsh::services::terminal::waiting::{Echo, PatternWait, OVERLAP};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use regex::Regex;

/// The renderer as it was before runs were copied whole: character by character, over
/// a lossy decode (a copy of the unit tests' `plain_by_character`).
fn plain_by_character(raw: &[u8]) -> String {
    #[derive(Clone, Copy)]
    enum Escape {
        None,
        Start,
        Csi,
        Str,
        StrEsc,
        Charset,
    }
    use Escape::*;
    let (mut out, mut line, mut cursor) = (String::new(), Vec::<char>::new(), 0);
    let mut escape = None;
    for c in String::from_utf8_lossy(raw).chars() {
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

/// The searchable text kept by a pattern wait (`waiting::KEEP`): past it the literal
/// property is not checked.
const KEEP: usize = 64 * 1024;

fn run(u: &mut Unstructured) -> Result<()> {
    let mode = u.choose_index(3)?;
    let needle: String = u.arbitrary()?;
    let typed: String = u.arbitrary()?;
    let cuts = u.int_in_range(0..=8)?;
    let mut sizes = Vec::with_capacity(cuts);
    for _ in 0..cuts {
        sizes.push(u.int_in_range(0..=512usize)?);
    }
    let raw = u.bytes(u.len())?;
    let mut chunks = Vec::new();
    let mut rest = raw;
    for size in sizes {
        let (chunk, after) = rest.split_at(size.min(rest.len()));
        chunks.push(chunk);
        rest = after;
    }
    chunks.push(rest);

    // The renderer: the whole, in chunks, and character by character.
    let whole = plain(raw);
    let mut stream = PlainStream::default();
    let mut lines = String::new();
    let mut states = Vec::with_capacity(chunks.len());
    for chunk in &chunks {
        stream.feed(chunk, |line| {
            lines.push_str(line);
            lines.push('\n');
        });
        // What has been rendered after this chunk (a character cut at its end pending).
        states.push(format!("{lines}{}", stream.line()));
    }
    stream.finish();
    lines.push_str(stream.line());
    assert_eq!(lines, whole, "cut into chunks");
    assert_eq!(whole, plain_by_character(raw), "character by character");

    match mode {
        // A literal pattern with echo off: found once the rendered output contains it.
        0 if !needle.is_empty() && needle.len() <= OVERLAP && raw.len() < KEEP => {
            let regex = Arc::new(Regex::new(&regex::escape(&needle)).expect("a literal"));
            let mut wait = PatternWait::new(regex, Echo::of(&typed, false));
            let mut found = false;
            for (chunk, state) in chunks.iter().zip(&states) {
                let now = wait.feed(chunk);
                assert!(!found || now, "a match is kept");
                found = now;
                if state.contains(&needle) {
                    assert!(found, "{needle:?} is in {state:?} but not found");
                }
            }
        }
        // Any pattern (the fuzzer's text when it compiles) and any typed input, echoed.
        _ => {
            let pattern = if mode == 1 {
                regex::escape(&needle)
            } else {
                needle
            };
            let Ok(regex) = regex::RegexBuilder::new(&pattern)
                .size_limit(1 << 20)
                .build()
            else {
                return Ok(());
            };
            let mut wait = PatternWait::new(Arc::new(regex), Echo::of(&typed, true));
            let mut found = false;
            for chunk in &chunks {
                let now = wait.feed(chunk);
                assert!(!found || now, "a match is kept");
                found = now;
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
