//! The `grep` tool's search, on ripgrep's crates: a matcher (a memmem searcher for a
//! pattern with no regex metacharacters, else ripgrep's regex matcher), the shared walk
//! narrowed by a glob and a file type, each regular file read whole into one reused
//! buffer (very large files streamed), files with a NUL byte in their first 8 KiB
//! skipped as binary, and results formatted as ripgrep prints them: `path:line:text`
//! with `path-line-text` context and `--` between groups, `path:count`, or paths newest
//! first. Results stop at a line/entry cap and at the output budget.

use std::io::{self, Read};
use std::path::Path;
use std::time::SystemTime;

use grep_matcher::{LineTerminator, Match, Matcher, NoCaptures, NoError};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::overrides::{Override, OverrideBuilder};
use ignore::types::{Types, TypesBuilder};

use crate::fsys::{Dir, Kind, Loaded, Special};
use crate::recent::Newest;
use crate::sniff::has_nul_head;
use crate::walk::{self, Filter, Flow};

/// What to report.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// Matching lines (and context).
    Content,
    /// The paths of matching files, newest first.
    Files,
    /// Matching lines per file.
    Count,
}

/// How to search and how much to report.
#[derive(Clone, Debug)]
pub struct Options {
    pub mode: Mode,
    /// Lines of context before and after each match (content mode).
    pub context: usize,
    pub multiline: bool,
    /// The most lines (content) or entries (files, count) reported.
    pub head_limit: usize,
    /// The most bytes of output.
    pub budget: usize,
}

/// Files larger than this are searched streaming instead of read whole.
const WHOLE_FILE_MAX: usize = 8 << 20;
/// The most a streamed search holds of one file (a line longer than this fails it).
const STREAM_HEAP_LIMIT: usize = 16 << 20;
/// Longer lines are shown as a window around their first match.
const MAX_LINE_CHARS: usize = 400;

/// A literal pattern searched with memchr's memmem.
pub struct Literal {
    finder: memchr::memmem::Finder<'static>,
    len: usize,
}

impl Matcher for Literal {
    type Captures = NoCaptures;
    type Error = NoError;

    fn find_at(&self, haystack: &[u8], at: usize) -> Result<Option<Match>, NoError> {
        Ok(self
            .finder
            .find(&haystack[at..])
            .map(|start| Match::new(at + start, at + start + self.len)))
    }

    fn new_captures(&self) -> Result<NoCaptures, NoError> {
        Ok(NoCaptures::new())
    }

    fn line_terminator(&self) -> Option<LineTerminator> {
        // A literal without a newline never matches across lines.
        Some(LineTerminator::byte(b'\n'))
    }
}

/// The matcher of a pattern: a literal or a regex.
pub enum AnyMatcher {
    Literal(Box<Literal>),
    Regex(RegexMatcher),
}

/// True when `pattern` has no regex metacharacter (nor a newline): it is a literal.
fn is_literal(pattern: &str) -> bool {
    !pattern.is_empty()
        && !pattern.contains([
            '\\', '.', '+', '*', '?', '(', ')', '|', '[', ']', '{', '}', '^', '$', '\n',
        ])
}

/// The matcher for `pattern` (Rust regex syntax).
pub fn matcher(
    pattern: &str,
    case_insensitive: bool,
    multiline: bool,
) -> Result<AnyMatcher, String> {
    let has_letters = pattern.chars().any(char::is_alphabetic);
    if is_literal(pattern) && !(case_insensitive && has_letters) {
        return Ok(AnyMatcher::Literal(Box::new(Literal {
            finder: memchr::memmem::Finder::new(pattern.as_bytes()).into_owned(),
            len: pattern.len(),
        })));
    }
    let mut builder = RegexMatcherBuilder::new();
    builder
        .case_insensitive(case_insensitive)
        .multi_line(true)
        .dot_matches_new_line(multiline);
    if !multiline {
        builder.line_terminator(Some(b'\n'));
    }
    builder
        .build(pattern)
        .map(AnyMatcher::Regex)
        .map_err(|e| e.to_string())
}

/// `type` names ripgrep does not know under these spellings.
const TYPE_ALIASES: &[(&str, &str)] = &[
    ("rs", "rust"),
    ("python", "py"),
    ("javascript", "js"),
    ("jsx", "js"),
    ("tsx", "ts"),
    ("golang", "go"),
    ("c++", "cpp"),
    ("cxx", "cpp"),
    ("h", "c"),
    ("yml", "yaml"),
    ("rb", "ruby"),
    ("kt", "kotlin"),
    ("cs", "csharp"),
    ("bash", "sh"),
    ("shell", "sh"),
];

/// The file-type filter for `name` (ripgrep's `--type` names, a few aliases more).
pub fn types(name: &str) -> Result<Types, String> {
    let lower = name.trim().to_ascii_lowercase();
    let name = TYPE_ALIASES
        .iter()
        .find(|(alias, _)| *alias == lower)
        .map_or(lower.as_str(), |(_, real)| real);
    let mut builder = TypesBuilder::new();
    builder.add_defaults();
    if !builder.definitions().iter().any(|d| d.name() == name) {
        return Err(format!(
            "unknown file type `{name}`: use one like rust, py, js, ts, go, c, cpp, java, kotlin, ruby, sh, md, json, toml, yaml, html, css, sql (ripgrep's names), or a `glob` such as `*.ext`"
        ));
    }
    builder.select(name);
    builder.build().map_err(|e| e.to_string())
}

/// The glob filter (`*.rs`, `!*_test.go`, `src/**/*.{ts,tsx}`, as ripgrep's `--glob`:
/// a pattern without `/` matches a file name at any depth) for a walk of `root`.
pub fn glob_filter(root: &Path, glob: &str) -> Result<Override, String> {
    let mut builder = OverrideBuilder::new(root);
    builder
        .add(glob.trim())
        .map_err(|e| format!("`{glob}` is not a valid glob: {e}"))?;
    builder.build().map_err(|e| e.to_string())
}

/// What a search found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The results, one per line.
    pub text: String,
    /// Lines (content) or entries (files, count) in `text`.
    pub shown: usize,
    /// More results were left out: `Some(n)` when their number is known.
    pub more: Option<Option<usize>>,
    /// The output budget stopped the results (rather than the head limit).
    pub budget_hit: bool,
    /// Files searched, files skipped as binary, entries or files that could not be read.
    pub searched: usize,
    pub binary: usize,
    pub unreadable: usize,
    /// The search stopped at a file it had to read that is a FIFO, a socket or a device
    /// (the file searched, an ignore file): never opened, and no result stands.
    pub refused: Option<Special>,
}

/// The results being written: capped in lines and bytes.
struct Output {
    text: String,
    shown: usize,
    limit: usize,
    budget: usize,
    /// A result did not fit.
    full: bool,
    budget_hit: bool,
}

impl Output {
    /// Adds one line; false (and `full`) when it does not fit.
    fn push(&mut self, line: &str) -> bool {
        if self.full {
            return false;
        }
        if self.shown == self.limit {
            self.full = true;
            return false;
        }
        if self.text.len() + line.len() + 1 > self.budget {
            self.full = true;
            self.budget_hit = true;
            return false;
        }
        self.text.push_str(line);
        self.text.push('\n');
        self.shown += 1;
        true
    }
}

/// Searches `root` (a directory or one file) for `matcher`, narrowed by `glob` and
/// `types`; paths are shown relative to `display_root`.
pub fn search(
    root: &Path,
    display_root: &Path,
    matcher: &AnyMatcher,
    glob: Option<Override>,
    types: Option<Types>,
    options: &Options,
) -> Outcome {
    match matcher {
        AnyMatcher::Literal(m) => run(root, display_root, m.as_ref(), glob, types, options),
        AnyMatcher::Regex(m) => run(root, display_root, m, glob, types, options),
    }
}

fn run<M: Matcher>(
    root: &Path,
    display_root: &Path,
    matcher: &M,
    glob: Option<Override>,
    types: Option<Types>,
    options: &Options,
) -> Outcome {
    let context = if options.mode == Mode::Content {
        options.context
    } else {
        0
    };
    // Line numbers only where they are shown. A whole file has had its head checked
    // for NUL bytes already; a streamed one stops at its first NUL.
    let mut searcher = SearcherBuilder::new()
        .line_number(options.mode == Mode::Content)
        .multi_line(options.multiline)
        .before_context(context)
        .after_context(context)
        .binary_detection(BinaryDetection::none())
        .heap_limit(Some(STREAM_HEAP_LIMIT))
        .build();
    let mut outcome = Outcome::default();
    let mut out = Output {
        text: String::new(),
        shown: 0,
        limit: options.head_limit,
        budget: options.budget,
        full: false,
        budget_hit: false,
    };
    let mut newest = Newest::new(options.head_limit);
    let mut buffer = Vec::new();

    // One file: its directory, then it. The file searched by its path (`root`, not one
    // the walk came upon) is refused, naming it, if it is a FIFO, a socket or a device.
    let mut search_one = |dir: &Dir, path: &Path, name: &str, outcome: &mut Outcome| -> Flow {
        outcome.searched += 1;
        let read = match path == root {
            true => dir.read_named(name, path, &mut buffer, WHOLE_FILE_MAX),
            false => dir.read_file(name, &mut buffer, WHOLE_FILE_MAX),
        };
        let loaded = match read {
            Ok(loaded) => loaded,
            Err(error) => {
                match Special::of(&error) {
                    Some(special) => outcome.refused = Some(special.clone()),
                    None => outcome.unreadable += 1,
                }
                return Flow::Continue;
            }
        };
        let head = match &loaded {
            Loaded::Whole(len) | Loaded::Head(len, _) => &buffer[..*len],
        };
        if has_nul_head(head) {
            outcome.binary += 1;
            return Flow::Continue;
        }
        let shown = || walk::relative(display_root, path);
        let mut flow = Flow::Continue;
        let result = match options.mode {
            Mode::Files => {
                let mut sink = FirstMatch(false);
                let result = search_loaded(&mut searcher, matcher, &buffer, loaded, &mut sink);
                if sink.0 {
                    let modified = dir.modified(name).unwrap_or(SystemTime::UNIX_EPOCH);
                    newest.offer(modified, shown());
                }
                result
            }
            Mode::Count => {
                let mut sink = Counter(0);
                let result = search_loaded(&mut searcher, matcher, &buffer, loaded, &mut sink);
                if sink.0 > 0 && !out.push(&format!("{}:{}", shown(), sink.0)) {
                    outcome.more = Some(None);
                    flow = Flow::Stop;
                }
                result
            }
            Mode::Content => {
                let mut sink = Lines {
                    out: &mut out,
                    matcher,
                    path: None,
                    display: (display_root, path),
                    context: context > 0,
                };
                let result = search_loaded(&mut searcher, matcher, &buffer, loaded, &mut sink);
                if out.full {
                    outcome.more = Some(None);
                    flow = Flow::Stop;
                }
                result
            }
        };
        if result.is_err() {
            outcome.unreadable += 1;
        }
        flow
    };

    if Dir::open(root).is_ok() {
        let filter = Filter {
            overrides: glob,
            types,
            ..Filter::default()
        };
        let walked = walk::walk(root, display_root, &filter, |visit| {
            // Only regular files are opened: never a FIFO, device, socket or symlink.
            if visit.kind != Kind::File {
                return Flow::Continue;
            }
            search_one(visit.dir, visit.path, visit.name, &mut outcome)
        });
        match walked {
            Ok(stats) => outcome.unreadable += stats.unreadable,
            Err(error) => match Special::of(&error) {
                Some(special) => outcome.refused = Some(special.clone()),
                None => outcome.unreadable += 1,
            },
        }
    } else {
        // One file: read from its directory, and only if it is a regular file (a FIFO,
        // a socket or a device is refused, naming it).
        let parent = root.parent().unwrap_or(root);
        let name = root.file_name().map(|n| n.to_string_lossy().into_owned());
        match (Dir::open(parent), name) {
            (Ok(dir), Some(name)) if dir.kind_of(&name).is_ok_and(|k| k != Kind::Dir) => {
                search_one(&dir, root, &name, &mut outcome);
            }
            _ => outcome.unreadable += 1,
        }
    }

    if options.mode == Mode::Files {
        let total = newest.seen();
        for path in newest.into_sorted() {
            if !out.push(&path) {
                break;
            }
        }
        if total > out.shown {
            outcome.more = Some(Some(total - out.shown));
        }
    }
    outcome.text = out.text;
    outcome.shown = out.shown;
    outcome.budget_hit = out.budget_hit;
    outcome
}

/// Searches a file as [`Dir::read_file`] left it in `buffer`.
fn search_loaded<M: Matcher, S: Sink<Error = io::Error>>(
    searcher: &mut Searcher,
    matcher: &M,
    buffer: &[u8],
    loaded: Loaded,
    sink: S,
) -> io::Result<()> {
    match loaded {
        Loaded::Whole(len) => searcher.search_slice(matcher, &buffer[..len], sink),
        Loaded::Head(len, rest) => {
            searcher.set_binary_detection(BinaryDetection::quit(0));
            let result =
                searcher.search_reader(matcher, io::Cursor::new(&buffer[..len]).chain(rest), sink);
            searcher.set_binary_detection(BinaryDetection::none());
            result
        }
    }
}

/// Stops at the first match.
struct FirstMatch(bool);

impl Sink for FirstMatch {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, _: &SinkMatch<'_>) -> io::Result<bool> {
        self.0 = true;
        Ok(false)
    }
}

/// Counts matching lines.
struct Counter(u64);

impl Sink for Counter {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, found: &SinkMatch<'_>) -> io::Result<bool> {
        self.0 += found.lines().count().max(1) as u64;
        Ok(true)
    }
}

/// Writes matching and context lines of one file.
struct Lines<'o, 'p, M> {
    out: &'o mut Output,
    matcher: &'o M,
    /// The path as shown, made at the first line written.
    path: Option<String>,
    /// The root paths are shown relative to, and the file's path.
    display: (&'p Path, &'p Path),
    /// Context is shown: files are apart by `--`.
    context: bool,
}

impl<M: Matcher> Lines<'_, '_, M> {
    fn line(&mut self, separator: char, number: u64, bytes: &[u8], is_match: bool) -> bool {
        if self.path.is_none() {
            self.path = Some(walk::relative(self.display.0, self.display.1));
            if self.context && self.out.shown > 0 && !self.out.push("--") {
                return false;
            }
        }
        let bytes = strip_terminator(bytes);
        let focus = if is_match {
            self.matcher.find(bytes).ok().flatten().map(|m| m.start())
        } else {
            None
        };
        let text = String::from_utf8_lossy(bytes);
        let path = self.path.as_deref().unwrap_or_default();
        let line = format!("{path}{separator}{number}{separator}{}", clip(&text, focus));
        self.out.push(&line)
    }
}

impl<M: Matcher> Sink for Lines<'_, '_, M> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, found: &SinkMatch<'_>) -> io::Result<bool> {
        let first = found.line_number().unwrap_or(0);
        for (k, line) in found.lines().enumerate() {
            if !self.line(':', first + k as u64, line, true) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, context: &SinkContext<'_>) -> io::Result<bool> {
        let number = context.line_number().unwrap_or(0);
        Ok(self.line('-', number, context.bytes(), false))
    }

    fn context_break(&mut self, _: &Searcher) -> io::Result<bool> {
        Ok(self.out.push("--"))
    }
}

fn strip_terminator(bytes: &[u8]) -> &[u8] {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    bytes.strip_suffix(b"\r").unwrap_or(bytes)
}

/// `line`, or when it is longer than [`MAX_LINE_CHARS`] a window of it around byte
/// `focus` (the match) with markers for what was left out.
fn clip(line: &str, focus: Option<usize>) -> std::borrow::Cow<'_, str> {
    if line.len() <= MAX_LINE_CHARS {
        return line.into();
    }
    let chars = line.chars().count();
    if chars <= MAX_LINE_CHARS {
        return line.into();
    }
    let focus_char = focus
        .map(|f| line[..f.min(line.len())].chars().count())
        .unwrap_or(0);
    let start = focus_char
        .saturating_sub(MAX_LINE_CHARS / 4)
        .min(chars - MAX_LINE_CHARS);
    let end = start + MAX_LINE_CHARS;
    let window: String = line.chars().skip(start).take(MAX_LINE_CHARS).collect();
    let mut out = String::new();
    if start > 0 {
        out.push_str(&format!("[… {start} characters] "));
    }
    out.push_str(&window);
    if end < chars {
        out.push_str(&format!(" [… {} more characters]", chars - end));
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walk::testdir::TestDir;

    fn options(mode: Mode) -> Options {
        Options {
            mode,
            context: 0,
            multiline: false,
            head_limit: 250,
            budget: 100_000,
        }
    }

    fn grep(dir: &TestDir, pattern: &str, options: &Options) -> Outcome {
        let matcher = matcher(pattern, false, options.multiline).unwrap();
        search(dir.path(), dir.path(), &matcher, None, None, options)
    }

    fn tree() -> TestDir {
        let dir = TestDir::new("grep");
        dir.write(".gitignore", "target/\n");
        dir.write(
            "src/main.rs",
            "fn main() {\n    let x = 1;\n    println!(\"{x}\");\n}\n",
        );
        dir.write("src/lib.rs", "pub fn lib() {}\n// TODO: more\n");
        dir.write("notes.md", "# Notes\nTODO: write\n");
        dir.write("target/out.rs", "fn main() {}\n");
        dir.write("bin.dat", b"fn main\0\x01\x02");
        dir.touch("src/main.rs", 3000);
        dir.touch("src/lib.rs", 2000);
        dir.touch("notes.md", 1000);
        dir
    }

    #[test]
    fn literal_and_regex_patterns_get_the_right_matcher() {
        assert!(matches!(
            matcher("fn main", false, false),
            Ok(AnyMatcher::Literal(_))
        ));
        assert!(matches!(
            matcher("TODO-item", false, false),
            Ok(AnyMatcher::Literal(_))
        ));
        assert!(matches!(
            matcher("fn\\s+main", false, false),
            Ok(AnyMatcher::Regex(_))
        ));
        assert!(matches!(
            matcher("a.b", false, false),
            Ok(AnyMatcher::Regex(_))
        ));
        assert!(matches!(
            matcher("main", true, false),
            Ok(AnyMatcher::Regex(_))
        ));
        assert!(matches!(
            matcher("123", true, false),
            Ok(AnyMatcher::Literal(_))
        ));
        let error = matcher("fn (", false, false).err().unwrap();
        assert!(error.contains("unclosed group"), "{error}");
    }

    #[test]
    fn files_with_matches_are_newest_first_and_skip_ignored_and_binary_files() {
        let dir = tree();
        let outcome = grep(&dir, "fn main", &options(Mode::Files));
        assert_eq!(outcome.text, "src/main.rs\n");
        assert_eq!(outcome.binary, 1);
        let todo = grep(&dir, "TODO", &options(Mode::Files));
        assert_eq!(todo.text, "src/lib.rs\nnotes.md\n");
        assert_eq!(todo.more, None);
    }

    #[test]
    fn content_mode_prints_path_line_text_with_context_like_rg() {
        let dir = tree();
        let plain = grep(&dir, "let x", &options(Mode::Content));
        assert_eq!(plain.text, "src/main.rs:2:    let x = 1;\n");
        let with_context = grep(
            &dir,
            r"TODO",
            &Options {
                context: 1,
                ..options(Mode::Content)
            },
        );
        assert_eq!(
            with_context.text,
            "notes.md-1-# Notes\nnotes.md:2:TODO: write\n--\nsrc/lib.rs-1-pub fn lib() {}\nsrc/lib.rs:2:// TODO: more\n"
        );
    }

    #[test]
    fn count_mode_counts_lines_per_file() {
        let dir = TestDir::new("grep-count");
        dir.write("a.txt", "x\nx y\nz\n");
        dir.write("b.txt", "no\n");
        dir.write("c.txt", "x\n");
        let outcome = grep(&dir, "x", &options(Mode::Count));
        assert_eq!(outcome.text, "a.txt:2\nc.txt:1\n");
    }

    #[test]
    fn multiline_matches_span_lines() {
        let dir = TestDir::new("grep-multi");
        dir.write("a.rs", "struct A {\n    x: u8,\n}\n");
        let outcome = grep(
            &dir,
            r"struct A \{.*?\}",
            &Options {
                multiline: true,
                ..options(Mode::Content)
            },
        );
        assert_eq!(
            outcome.text,
            "a.rs:1:struct A {\na.rs:2:    x: u8,\na.rs:3:}\n"
        );
    }

    #[test]
    fn the_head_limit_stops_the_search_and_says_there_is_more() {
        let dir = TestDir::new("grep-cap");
        for i in 0..30 {
            dir.write(&format!("f{i:02}.txt"), "hit\nhit\n");
        }
        let limited = Options {
            head_limit: 5,
            ..options(Mode::Content)
        };
        let outcome = grep(&dir, "hit", &limited);
        assert_eq!(outcome.shown, 5);
        assert_eq!(outcome.more, Some(None));
        assert!(outcome.searched < 30, "searched {}", outcome.searched);
        let files = grep(
            &dir,
            "hit",
            &Options {
                head_limit: 5,
                ..options(Mode::Files)
            },
        );
        assert_eq!((files.shown, files.more), (5, Some(Some(25))));
        let budget = grep(
            &dir,
            "hit",
            &Options {
                budget: 40,
                ..options(Mode::Content)
            },
        );
        assert!(budget.budget_hit && budget.text.len() <= 40);
    }

    #[test]
    fn types_and_globs_narrow_the_search() {
        let dir = tree();
        let rust = types("rs").unwrap();
        let matcher = matcher("TODO", false, false).unwrap();
        let outcome = search(
            dir.path(),
            dir.path(),
            &matcher,
            None,
            Some(rust),
            &options(Mode::Files),
        );
        assert_eq!(outcome.text, "src/lib.rs\n");
        let md = glob_filter(dir.path(), "*.md").unwrap();
        let outcome = search(
            dir.path(),
            dir.path(),
            &matcher,
            Some(md),
            None,
            &options(Mode::Files),
        );
        assert_eq!(outcome.text, "notes.md\n");
        let not_md = glob_filter(dir.path(), "!*.md").unwrap();
        let outcome = search(
            dir.path(),
            dir.path(),
            &matcher,
            Some(not_md),
            None,
            &options(Mode::Files),
        );
        assert_eq!(outcome.text, "src/lib.rs\n");
        assert!(types("klingon").unwrap_err().contains("unknown file type"));
        assert!(types("Python").is_ok() && types("yml").is_ok() && types("md").is_ok());
    }

    #[test]
    fn one_file_can_be_searched_and_paths_show_relative_to_the_display_root() {
        let dir = tree();
        let matcher = matcher("println", false, false).unwrap();
        let file = dir.path().join("src/main.rs");
        let outcome = search(
            &file,
            dir.path(),
            &matcher,
            None,
            None,
            &options(Mode::Content),
        );
        assert_eq!(outcome.text, "src/main.rs:3:    println!(\"{x}\");\n");
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_in_the_tree_is_never_opened() {
        let dir = TestDir::new("grep-fifo");
        dir.write("a.txt", "hit\n");
        let fifo = dir.path().join("pipe");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !status.is_ok_and(|s| s.success()) {
            return;
        }
        // Opening the FIFO for reading would block this test forever.
        let outcome = grep(&dir, "hit", &options(Mode::Files));
        assert_eq!(outcome.text, "a.txt\n");
        assert_eq!(outcome.searched, 1);
    }

    #[test]
    fn large_files_stream_and_long_lines_show_a_window_around_the_match() {
        let dir = TestDir::new("grep-large");
        let mut big = "filler line\n".repeat(WHOLE_FILE_MAX / 12 + 10);
        big.push_str("needle at the end\n");
        dir.write("big.txt", &big);
        let outcome = grep(&dir, "needle", &options(Mode::Content));
        let expected_line = big.lines().count();
        assert_eq!(
            outcome.text,
            format!("big.txt:{expected_line}:needle at the end\n")
        );

        let long = format!("{}NEEDLE{}", "a".repeat(5000), "b".repeat(5000));
        let clipped = clip(&long, long.find("NEEDLE"));
        assert!(
            clipped.starts_with("[… 4900 characters] "),
            "{}",
            &clipped[..40]
        );
        assert!(clipped.contains("NEEDLE"));
        assert!(clipped.ends_with(" more characters]"));
        assert_eq!(clip("short", None), "short");
    }
}
