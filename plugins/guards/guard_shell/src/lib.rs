//! `guard_shell`: what the command-reading guards (`deny_destructive`, `ask_git_push`,
//! `workspace_only`) share: every string in a call's arguments, and the simple commands
//! a shell text would run.
//!
//! [`commands`] is a scan, not a shell. It knows quotes, backslashes, comments, the
//! separators `;` `&` `&&` `|` `||` and newlines, subshells, `$(...)` and backticks (also
//! inside double quotes), and redirections. It drops the prefixes that only run the rest
//! of a command (`sudo`, `env`, `nohup`, `timeout 5`, `VAR=value`, `{`, `then`, ...) and
//! also scans the script of `bash -c SCRIPT` (any shell, and `su -c`) and the words of
//! `eval`. Expansions (`$VAR`, `~`, globs, aliases) stay as written, and here-document
//! bodies are scanned as commands: a guard errs towards seeing too much.

use serde_json::Value;

/// One simple command as the shell would run it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Command {
    /// The words with quotes removed, prefixes such as `sudo` dropped, and the program
    /// first as its base name (`/bin/rm` is `rm`).
    pub words: Vec<String>,
    /// The files the command's output redirections (`>`, `>>`, `&>`, `<>`, `>|`) write.
    pub writes: Vec<String>,
}

impl Command {
    /// The program the command runs, if it runs one (`> file` alone does not).
    pub fn program(&self) -> Option<&str> {
        self.words.first().map(String::as_str)
    }

    /// The words after the program.
    pub fn args(&self) -> &[String] {
        self.words.get(1..).unwrap_or_default()
    }
}

/// Every string value in `value`, at any depth (object keys excluded).
pub fn strings(value: &Value) -> Vec<&str> {
    let mut found = Vec::new();
    collect_strings(value, &mut found);
    found
}

fn collect_strings<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
    match value {
        Value::String(text) => found.push(text),
        Value::Array(items) => items.iter().for_each(|item| collect_strings(item, found)),
        Value::Object(fields) => fields
            .values()
            .for_each(|field| collect_strings(field, found)),
        _ => {}
    }
}

/// The simple commands in `text`, each before the commands nested in it (a
/// `bash -c` script, `eval`'s words). Commands in `$(...)` and subshells come in the
/// order they end.
pub fn commands(text: &str) -> Vec<Command> {
    let mut found = Vec::new();
    scan(text, 0, &mut found);
    found
}

/// How deep `bash -c "bash -c '...'"` nesting is followed.
const MAX_NESTING: usize = 8;

fn scan(text: &str, depth: usize, found: &mut Vec<Command>) {
    for command in lex(text) {
        let nested = nested_script(&command).filter(|_| depth < MAX_NESTING);
        found.push(command);
        if let Some(script) = nested {
            scan(&script, depth + 1, found);
        }
    }
}

/// Shells (and `su`) whose `-c` option takes a script to run.
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "su",
];

/// The script `command` runs in turn: the argument after `-c` (alone or in a cluster
/// such as `-lc`) for a shell, all the words for `eval`.
fn nested_script(command: &Command) -> Option<String> {
    let program = command.program()?;
    let args = command.args();
    if program == "eval" {
        return Some(args.join(" "));
    }
    if !SHELLS.contains(&program) {
        return None;
    }
    let option = args
        .iter()
        .position(|arg| arg.starts_with('-') && !arg.starts_with("--") && arg.contains('c'))?;
    args.get(option + 1).cloned()
}

/// Words that may open a command and are followed by the command itself.
const KEYWORDS: &[&str] = &[
    "!", "{", "}", "if", "then", "elif", "else", "do", "while", "until", "time",
];

/// Programs that run the rest of their words as a command: the name, the options that
/// take a separate value, and how many plain arguments come before the command.
const WRAPPERS: &[(&str, &[&str], usize)] = &[
    (
        "sudo",
        &["-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-T", "-U"],
        0,
    ),
    ("doas", &["-u", "-C"], 0),
    ("env", &["-u", "-C", "-S"], 0),
    ("nice", &["-n"], 0),
    ("ionice", &["-c", "-n", "-p"], 0),
    ("nohup", &[], 0),
    ("time", &["-f", "-o"], 0),
    ("command", &[], 0),
    ("builtin", &[], 0),
    ("exec", &["-a"], 0),
    ("stdbuf", &["-i", "-o", "-e"], 0),
    (
        "xargs",
        &["-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s"],
        0,
    ),
    ("timeout", &["-s", "-k"], 1),
    ("watch", &["-n", "-d"], 0),
];

/// Builds a command from its raw words: prefixes dropped, the program as its base name.
fn command(words: Vec<String>, writes: Vec<String>) -> Command {
    let start = prefix_len(&words);
    let mut words: Vec<String> = words.into_iter().skip(start).collect();
    if let Some(program) = words.first_mut() {
        if let Some(base) = program.rsplit('/').next().filter(|base| !base.is_empty()) {
            *program = base.to_owned();
        }
    }
    Command { words, writes }
}

/// How many leading words only set up the command that follows them.
fn prefix_len(words: &[String]) -> usize {
    let mut at = 0;
    while let Some(word) = words.get(at) {
        if KEYWORDS.contains(&word.as_str()) || is_assignment(word) {
            at += 1;
            continue;
        }
        let name = word.rsplit('/').next().unwrap_or(word);
        let Some(&(_, valued, plain)) = WRAPPERS.iter().find(|(wrapper, ..)| *wrapper == name)
        else {
            break;
        };
        at += 1;
        while let Some(option) = words.get(at).filter(|w| w.len() > 1 && w.starts_with('-')) {
            at += 1;
            if option == "--" {
                break;
            }
            if valued.contains(&option.as_str()) {
                at += 1;
            }
        }
        at += plain;
    }
    at.min(words.len())
}

/// `NAME=value`, a variable assignment before a command.
fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Quote {
    Unquoted,
    Single,
    Double,
}

/// What ends a frame: the end of the text, `)` or a backtick.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Closer {
    EndOfText,
    Paren,
    Backtick,
}

/// The command being read in one nesting level (the text, a subshell, a substitution).
struct Frame {
    closer: Closer,
    quote: Quote,
    words: Vec<String>,
    writes: Vec<String>,
    /// The word being read, if one has started (`""` starts an empty word).
    word: Option<String>,
    /// The next word is a redirection's target; `true` when the redirection writes.
    redirect: Option<bool>,
}

impl Frame {
    fn new(closer: Closer) -> Self {
        Frame {
            closer,
            quote: Quote::Unquoted,
            words: Vec::new(),
            writes: Vec::new(),
            word: None,
            redirect: None,
        }
    }

    fn push(&mut self, c: char) {
        self.word.get_or_insert_with(String::new).push(c);
    }

    fn open_quote(&mut self, quote: Quote) {
        self.word.get_or_insert_with(String::new);
        self.quote = quote;
    }

    fn end_word(&mut self) {
        let Some(word) = self.word.take() else { return };
        match self.redirect.take() {
            Some(true) => self.writes.push(word),
            Some(false) => {}
            None => self.words.push(word),
        }
    }

    fn end_command(&mut self, out: &mut Vec<Command>) {
        self.end_word();
        self.redirect = None;
        let command = command(
            std::mem::take(&mut self.words),
            std::mem::take(&mut self.writes),
        );
        if !command.words.is_empty() || !command.writes.is_empty() {
            out.push(command);
        }
    }

    /// Starts a redirection; a word of digits just before it (`2>`) is its descriptor.
    fn start_redirect(&mut self, writes: bool) {
        if self
            .word
            .as_deref()
            .is_some_and(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()))
        {
            self.word = None;
        } else {
            self.end_word();
        }
        self.redirect = Some(writes);
    }
}

/// Ends the innermost frame's command, and the frame itself when `closer` ends it. A
/// closer that matches no open frame only separates commands.
fn close(stack: &mut Vec<Frame>, out: &mut Vec<Command>, closer: Closer) {
    let frame = stack.last_mut().expect("the outermost frame stays open");
    frame.end_command(out);
    if frame.closer == closer && stack.len() > 1 {
        stack.pop();
    }
}

/// A backtick closes the innermost frame if a backtick opened it, else opens one.
fn backtick(stack: &mut Vec<Frame>, out: &mut Vec<Command>) {
    if stack
        .last()
        .is_some_and(|frame| frame.closer == Closer::Backtick)
    {
        close(stack, out, Closer::Backtick);
    } else {
        stack.push(Frame::new(Closer::Backtick));
    }
}

/// The simple commands of `text`, without following nested scripts.
fn lex(text: &str) -> Vec<Command> {
    let mut out = Vec::new();
    let mut stack = vec![Frame::new(Closer::EndOfText)];
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let frame = stack.last_mut().expect("the outermost frame stays open");
        match frame.quote {
            Quote::Single if c == '\'' => frame.quote = Quote::Unquoted,
            Quote::Single => frame.push(c),
            Quote::Double => match c {
                '"' => frame.quote = Quote::Unquoted,
                '\\' => {
                    if let Some(next) = chars.next() {
                        frame.push(next);
                    }
                }
                '$' if chars.peek() == Some(&'(') => {
                    chars.next();
                    stack.push(Frame::new(Closer::Paren));
                }
                '`' => backtick(&mut stack, &mut out),
                _ => frame.push(c),
            },
            Quote::Unquoted => match c {
                '\'' => frame.open_quote(Quote::Single),
                '"' => frame.open_quote(Quote::Double),
                '\\' => match chars.next() {
                    Some('\n') | None => {}
                    Some(next) => frame.push(next),
                },
                '#' if frame.word.is_none() => while chars.next_if(|&n| n != '\n').is_some() {},
                ' ' | '\t' | '\r' => frame.end_word(),
                '\n' | ';' | '|' => frame.end_command(&mut out),
                '&' if chars.peek() == Some(&'>') => {
                    chars.next();
                    while chars.next_if_eq(&'>').is_some() {}
                    frame.start_redirect(true);
                }
                '&' => frame.end_command(&mut out),
                '$' | '<' | '>' if chars.peek() == Some(&'(') => {
                    // `$(...)`, or the process substitutions `<(...)` and `>(...)`.
                    chars.next();
                    if c != '$' {
                        frame.end_word();
                    }
                    stack.push(Frame::new(Closer::Paren));
                }
                '<' | '>' => {
                    let mut writes = c == '>';
                    while let Some(n) = chars.next_if(|n| matches!(n, '<' | '>' | '&' | '|')) {
                        writes |= n == '>';
                    }
                    frame.start_redirect(writes);
                }
                '(' => {
                    frame.end_command(&mut out);
                    stack.push(Frame::new(Closer::Paren));
                }
                ')' => close(&mut stack, &mut out, Closer::Paren),
                '`' => backtick(&mut stack, &mut out),
                _ => frame.push(c),
            },
        }
    }
    while let Some(mut frame) = stack.pop() {
        frame.end_command(&mut out);
    }
    out
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    /// The words of each command in `text`.
    fn words(text: &str) -> Vec<Vec<String>> {
        commands(text).into_iter().map(|c| c.words).collect()
    }

    fn w(commands: &[&[&str]]) -> Vec<Vec<String>> {
        commands
            .iter()
            .map(|c| c.iter().map(|s| s.to_string()).collect())
            .collect()
    }

    #[test]
    fn separators_split_commands() {
        assert_eq!(
            words("a 1; b 2 && c || d | e & f\ng"),
            w(&[
                &["a", "1"],
                &["b", "2"],
                &["c"],
                &["d"],
                &["e"],
                &["f"],
                &["g"]
            ])
        );
    }

    #[test]
    fn quotes_and_escapes_make_one_word() {
        assert_eq!(
            words(r#"echo 'a; b' "c && d" e\ f ''"#),
            w(&[&["echo", "a; b", "c && d", "e f", ""]])
        );
        assert_eq!(words("r\\m -rf x"), w(&[&["rm", "-rf", "x"]]));
        assert_eq!(words("echo a \\\n b"), w(&[&["echo", "a", "b"]]));
    }

    #[test]
    fn comments_are_skipped() {
        assert_eq!(
            words("ls # rm -rf /\necho a#b"),
            w(&[&["ls"], &["echo", "a#b"]])
        );
    }

    #[test]
    fn substitutions_and_subshells_are_commands() {
        assert_eq!(
            words("echo $(rm -rf x) y"),
            w(&[&["rm", "-rf", "x"], &["echo", "y"]])
        );
        assert_eq!(
            words("echo \"$(date)\" && rm z"),
            w(&[&["date"], &["echo", ""], &["rm", "z"]])
        );
        assert_eq!(
            words("echo `whoami`; (cd /; ls)"),
            w(&[&["whoami"], &["echo"], &["cd", "/"], &["ls"]])
        );
        assert_eq!(
            words("diff <(ls a) <(ls b)"),
            w(&[&["ls", "a"], &["ls", "b"], &["diff"]])
        );
    }

    #[test]
    fn redirections_are_writes_not_words() {
        let found =
            commands("cat x > /dev/sda 2>/dev/null < in; echo 2>&1 hi &> log; exec 3<>/dev/sdb");
        assert_eq!(found[0].words, ["cat", "x"]);
        assert_eq!(found[0].writes, ["/dev/sda", "/dev/null"]);
        assert_eq!(found[1].words, ["echo", "hi"]);
        assert_eq!(found[1].writes, ["1", "log"]);
        assert_eq!(found[2].writes, ["/dev/sdb"]);
        let alone = commands(">/dev/sdc");
        assert_eq!(
            (alone[0].program(), alone[0].writes.as_slice()),
            (None, ["/dev/sdc".to_string()].as_slice())
        );
    }

    #[test]
    fn prefixes_are_dropped_and_the_program_is_a_base_name() {
        assert_eq!(
            words("sudo -u root /bin/rm -rf /"),
            w(&[&["rm", "-rf", "/"]])
        );
        assert_eq!(
            words("FOO=1 env -i BAR=2 nohup nice -n 5 timeout -s KILL 10 git push"),
            w(&[&["git", "push"]])
        );
        assert_eq!(
            words("if true; then rm x; fi"),
            w(&[&["true"], &["rm", "x"], &["fi"]])
        );
        assert_eq!(words("{ rm x; }"), w(&[&["rm", "x"]]));
        assert_eq!(words("x=$(ls)"), w(&[&["ls"]]));
    }

    #[test]
    fn shell_scripts_and_eval_are_scanned() {
        assert_eq!(
            words("bash -lc 'cd /tmp && rm -rf y'"),
            w(&[
                &["bash", "-lc", "cd /tmp && rm -rf y"],
                &["cd", "/tmp"],
                &["rm", "-rf", "y"]
            ])
        );
        assert_eq!(
            words("eval \"git push\""),
            w(&[&["eval", "git push"], &["git", "push"]])
        );
        assert_eq!(words("su root -c 'mkfs /dev/sda'")[1], ["mkfs", "/dev/sda"]);
    }

    #[test]
    fn nesting_is_followed_only_so_deep() {
        let mut script = "true".to_string();
        for _ in 0..12 {
            script = format!("sh -c {}", serde_json::to_string(&script).unwrap());
        }
        assert_eq!(commands(&script).len(), MAX_NESTING + 1);
    }

    #[test]
    fn unbalanced_text_does_not_panic() {
        for text in [
            "'",
            "\"",
            "$(",
            ")",
            "`",
            "(((",
            "echo \"$(`)",
            "\\",
            ">",
            "&>",
            "<(",
            "a)b(c",
        ] {
            let _ = commands(text);
        }
    }

    #[test]
    fn strings_are_found_at_any_depth() {
        let args = serde_json::json!({"command": "a", "list": ["b", 1, {"c": "d"}], "n": null});
        let mut found = strings(&args);
        found.sort();
        assert_eq!(found, ["a", "b", "d"]);
    }
}
