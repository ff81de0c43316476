//! Text as `cat -n` shows it: each line as its number right-aligned in six columns, a
//! tab and the line (its `\r\n` or `\n` dropped), lines over [`MAX_LINE_CHARS`] cut with
//! a marker; and a page of a file from a 1-based line, bounded by a line count and a
//! byte budget, with the footer saying where the page ends and how to read on.

use std::fmt::Write as _;

/// Longer lines are cut to this many characters.
pub const MAX_LINE_CHARS: usize = 2000;
/// The most lines one page holds.
pub const MAX_PAGE_LINES: usize = 2000;

/// Appends line `number` in `cat -n` layout; returns true when it was cut.
pub fn push_numbered(out: &mut String, number: usize, line: &str) -> bool {
    push_numbered_within(out, number, line, MAX_LINE_CHARS)
}

/// [`push_numbered`] with the cut at `max_chars` characters.
fn push_numbered_within(out: &mut String, number: usize, line: &str, max_chars: usize) -> bool {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let line = line.strip_suffix('\r').unwrap_or(line);
    push_line_number(out, number);
    let cut = cut_line(line, max_chars);
    match cut {
        Some((head, rest)) => {
            out.push_str(head);
            let _ = write!(out, "… [line cut: {rest} more characters]");
        }
        None => out.push_str(line),
    }
    out.push('\n');
    cut.is_some()
}

/// Appends `number` right-aligned in six columns and a tab, as `write!(out,
/// "{number:>6}\t")` does, without the formatting machinery (a page writes 2000).
fn push_line_number(out: &mut String, number: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = number;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let digits = std::str::from_utf8(&digits[at..]).expect("ASCII digits");
    for _ in digits.len()..6 {
        out.push(' ');
    }
    out.push_str(digits);
    out.push('\t');
}

/// The lines of `text`, each with its line break (as `str::split_inclusive('\n')`,
/// but found with the vectorized `memchr`).
fn split_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let mut breaks = memchr::memchr_iter(b'\n', text.as_bytes());
    std::iter::from_fn(move || {
        let end = match breaks.next() {
            Some(at) => at + 1,
            None if start < text.len() => text.len(),
            None => return None,
        };
        let line = &text[start..end];
        start = end;
        Some(line)
    })
}

/// `line`'s first `max_chars` characters and how many more there are, when it is longer.
fn cut_line(line: &str, max_chars: usize) -> Option<(&str, usize)> {
    if line.len() <= max_chars {
        return None;
    }
    let (end, _) = line.char_indices().nth(max_chars)?;
    Some((&line[..end], line[end..].chars().count()))
}

/// The number of lines of `text`: a final line without a newline counts, the empty
/// string after a final newline does not.
pub fn count_lines(text: &str) -> usize {
    let newlines = memchr::memchr_iter(b'\n', text.as_bytes()).count();
    newlines + usize::from(!text.is_empty() && !text.ends_with('\n'))
}

/// Why a page ended where it did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// At the end of the file.
    End,
    /// At the line limit.
    Limit,
    /// The next line would not fit the byte budget.
    Budget,
}

/// One page of a file.
#[derive(Debug)]
pub struct Page {
    /// The numbered lines.
    pub text: String,
    /// The first and last line shown (1-based).
    pub first: usize,
    pub last: usize,
    /// The file's line count.
    pub total: usize,
    pub stop: Stop,
    /// True when some line was cut at [`MAX_LINE_CHARS`] (or to fit the budget).
    pub cut: bool,
}

/// Lines `offset..` of `text` (1-based), at most `limit` of them and at most `budget`
/// bytes (a first line too long for the budget is cut to fit). `Err(total)` when
/// `offset` is past the last line.
#[cfg(test)]
pub fn page(text: &str, offset: usize, limit: usize, budget: usize) -> Result<Page, usize> {
    let total = count_lines(text);
    let offset = offset.max(1);
    if offset > total {
        return Err(total);
    }
    let start = match offset - 1 {
        0 => 0,
        skip => memchr::memchr_iter(b'\n', text.as_bytes())
            .nth(skip - 1)
            .map_or(text.len(), |at| at + 1),
    };
    Ok(page_of(&text[start..], offset, total, limit, budget))
}

/// The page of a file of `total` lines that starts at line `offset` (1-based, at most
/// `total`), from `lines`: the file from that line on, or at least its next `limit`
/// lines. At most `limit` lines and at most `budget` bytes (a first line too long for
/// the budget is cut to fit).
pub fn page_of(lines: &str, offset: usize, total: usize, limit: usize, budget: usize) -> Page {
    let offset = offset.max(1);
    let limit = limit.clamp(1, MAX_PAGE_LINES);
    let mut out = String::with_capacity(lines.len().min(budget) + 8 * limit.min(4096));
    let mut number = offset;
    let mut cut = false;
    let mut stop = Stop::End;
    for line in split_lines(lines) {
        let before = out.len();
        let this_cut = push_numbered(&mut out, number, line);
        if out.len() > budget {
            out.truncate(before);
            if out.is_empty() {
                // Even one line does not fit: cut it to what does.
                let room = budget.saturating_sub(64).max(16);
                push_numbered_within(&mut out, number, line, room / 4);
                cut = true;
                number += 1;
                if number <= total {
                    stop = Stop::Budget;
                }
            } else {
                stop = Stop::Budget;
            }
            break;
        }
        cut |= this_cut;
        number += 1;
        if number - offset == limit {
            if number <= total {
                stop = Stop::Limit;
            }
            break;
        }
    }
    Page {
        text: out,
        first: offset,
        last: number - 1,
        total,
        stop,
        cut,
    }
}

impl Page {
    /// The footer line: the lines shown, the total and how to read on, then `notes`.
    pub fn footer(&self, budget: usize, notes: &[&str]) -> String {
        let shown = if self.first == self.last {
            format!("line {} of {}", self.first, self.total)
        } else {
            format!("lines {}-{} of {}", self.first, self.last, self.total)
        };
        let next = self.last + 1;
        let mut footer = match self.stop {
            Stop::End if self.first == 1 => format!("[end of file: {} lines", self.total),
            Stop::End => format!("[{shown}; end of file"),
            Stop::Limit => format!("[{shown}; read on with offset={next}"),
            Stop::Budget => format!(
                "[{shown}; the page stopped at the output budget ({budget} bytes); read on with offset={next}"
            ),
        };
        if self.cut {
            footer.push_str(&format!(
                "; lines over {MAX_LINE_CHARS} characters were cut (see them whole with grep or bash)"
            ));
        }
        for note in notes {
            footer.push_str("; ");
            footer.push_str(note);
        }
        footer.push(']');
        footer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_like_cat_n() {
        let mut out = String::new();
        push_numbered(&mut out, 7, "fn main() {\r\n");
        push_numbered(&mut out, 123456, "x");
        push_numbered(&mut out, 1234567, "y\n");
        assert_eq!(out, "     7\tfn main() {\n123456\tx\n1234567\ty\n");
    }

    #[test]
    fn numbers_and_lines_are_found_as_the_standard_library_finds_them() {
        for number in [0, 1, 9, 10, 99_999, 100_000, 999_999, 1_000_000, usize::MAX] {
            let mut out = String::new();
            push_line_number(&mut out, number);
            assert_eq!(out, format!("{number:>6}\t"));
        }
        for text in ["", "a", "a\n", "a\nb", "\n\n", "a\r\nb\r\n", "é\nü"] {
            let ours: Vec<&str> = split_lines(text).collect();
            let std: Vec<&str> = text.split_inclusive('\n').collect();
            assert_eq!(ours, std, "{text:?}");
        }
    }

    #[test]
    fn line_counts_follow_the_newlines() {
        assert_eq!(count_lines(""), 0);
        assert_eq!(count_lines("a"), 1);
        assert_eq!(count_lines("a\n"), 1);
        assert_eq!(count_lines("a\nb"), 2);
        assert_eq!(count_lines("\n\n"), 2);
    }

    #[test]
    fn a_long_line_is_cut_with_a_marker_counting_characters() {
        let line = "é".repeat(MAX_LINE_CHARS + 5);
        let mut out = String::new();
        assert!(push_numbered(&mut out, 1, &line));
        let expected = format!(
            "     1\t{}… [line cut: 5 more characters]\n",
            "é".repeat(MAX_LINE_CHARS)
        );
        assert_eq!(out, expected);
        let mut exact = String::new();
        assert!(!push_numbered(&mut exact, 1, &"a".repeat(MAX_LINE_CHARS)));
    }

    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn a_100000_line_file_pages_by_2000_lines_and_says_how_to_read_on() {
        let text = numbered(100_000);
        let first = page(&text, 1, 2000, usize::MAX).unwrap();
        assert_eq!((first.first, first.last, first.total), (1, 2000, 100_000));
        assert_eq!(first.stop, Stop::Limit);
        assert!(first.text.starts_with("     1\tline 1\n"));
        assert!(first.text.ends_with("  2000\tline 2000\n"));
        assert_eq!(
            first.footer(0, &[]),
            "[lines 1-2000 of 100000; read on with offset=2001]"
        );

        let middle = page(&text, 50_001, 10, usize::MAX).unwrap();
        assert_eq!(middle.text.lines().count(), 10);
        assert!(middle.text.starts_with(" 50001\tline 50001\n"));

        let last = page(&text, 99_999, 2000, usize::MAX).unwrap();
        assert_eq!(
            (last.first, last.last, last.stop),
            (99_999, 100_000, Stop::End)
        );
        assert_eq!(
            last.footer(0, &[]),
            "[lines 99999-100000 of 100000; end of file]"
        );
        // A limit that ends exactly at the last line is the end of the file.
        let exact = page(&text, 99_991, 10, usize::MAX).unwrap();
        assert_eq!(exact.stop, Stop::End);

        assert_eq!(page(&text, 100_001, 10, usize::MAX).unwrap_err(), 100_000);
        // More than the maximum asked for: the maximum.
        assert_eq!(page(&text, 1, 5000, usize::MAX).unwrap().last, 2000);
    }

    #[test]
    fn the_budget_stops_the_page_before_it_is_exceeded() {
        let text = numbered(100_000);
        let page = page(&text, 1, 2000, 30_000).unwrap();
        assert!(page.text.len() <= 30_000);
        assert_eq!(page.stop, Stop::Budget);
        assert!(page.last > 1000 && page.last < 2000, "{}", page.last);
        // Whole lines only.
        assert!(page.text.ends_with(&format!("\tline {}\n", page.last)));
        let footer = page.footer(30_000, &[]);
        assert!(
            footer.contains("output budget (30000 bytes)")
                && footer.contains(&format!("offset={}", page.last + 1)),
            "{footer}"
        );
    }

    #[test]
    fn a_first_line_longer_than_the_budget_is_cut_to_fit() {
        let text = format!("{}\nsecond\n", "x".repeat(1500));
        let page = page(&text, 1, 10, 400).unwrap();
        assert!(page.text.len() <= 400, "{}", page.text.len());
        assert!(page.text.contains("[line cut:"));
        assert_eq!((page.last, page.stop), (1, Stop::Budget));
        assert!(page.cut);
    }

    #[test]
    fn whole_small_file_says_end_of_file_and_no_final_newline_counts() {
        let page = page("a\r\nb", 1, 2000, usize::MAX).unwrap();
        assert_eq!(page.text, "     1\ta\n     2\tb\n");
        assert_eq!(page.footer(0, &[]), "[end of file: 2 lines]");
    }
}
