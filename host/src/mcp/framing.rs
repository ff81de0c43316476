//! dsh's own line framing for MCP over stdio, in front of rmcp: it splits stdin into
//! lines, passes every line rmcp can read on to it unchanged, and answers the lines rmcp
//! would drop without a word, so that a client never waits on an id forever.
//!
//! - A line longer than `[serve] stdio_max_message_bytes` (its newline not counted) gets
//!   `-32600` (invalid request) naming the limit, with the request's id when it is in the
//!   part of the line read up to the limit (else `"id": null`); the rest of the line is
//!   discarded as it streams in, never buffered.
//! - A line that is not JSON (a syntax error, an unfinished value, or nesting deeper than
//!   serde_json's recursion limit of 128) gets `-32700` (parse error), with the id when a
//!   glance at the line's top-level members finds one (else `"id": null`).
//! - A line that is certainly a notification (a whole top-level object with a `method`
//!   and no `id`) or a response (`result` or `error`, no `method`) is logged, never
//!   answered, as JSON-RPC says.
//!
//! Valid JSON that is not a JSON-RPC message goes on to rmcp, which answers it `-32600`.
//! The answers are written by the one task that owns stdout ([`write_output`]), which
//! copies rmcp's output through and puts an answer only between two of its lines.

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use rmcp::model::ClientJsonRpcMessage;

/// JSON-RPC's code for input that is not JSON.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's code for a message that is not a valid request (here: too long).
const INVALID_REQUEST: i64 = -32600;

/// How much is read from stdin at a time.
const CHUNK: usize = 64 << 10;

/// Reads `input` line by line until its end (or a read error), writing the lines rmcp
/// can read to `to_rmcp` unchanged and sending an answer line for each refused request
/// to `answers`. A last line without a newline is passed on as it is. Ends early when
/// rmcp stops reading.
pub async fn frame_input<R, W>(
    mut input: R,
    mut to_rmcp: W,
    answers: mpsc::Sender<Vec<u8>>,
    max_message_bytes: usize,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let never = tokio_util::sync::CancellationToken::new();
    frame_input_until(&mut input, &mut to_rmcp, answers, max_message_bytes, &never).await;
}

/// What [`frame_input_until`] stopped with.
#[derive(Debug, Default)]
pub struct Stopped {
    /// Set when it stopped because it was told to (not at the input's end).
    pub told: bool,
    /// The input read and not yet a whole line.
    pub pending: Vec<u8>,
}

/// [`frame_input`], which also stops when `stop` is cancelled, between two reads of
/// `input`: every whole line read by then has gone on, and the rest of the input is
/// either still unread or in [`Stopped::pending`] (an upgrade hands both to the next
/// binary). `to_rmcp` is shut down only when the input ended.
pub async fn frame_input_until<R, W>(
    input: &mut R,
    to_rmcp: &mut W,
    answers: mpsc::Sender<Vec<u8>>,
    max_message_bytes: usize,
    stop: &tokio_util::sync::CancellationToken,
) -> Stopped
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut line: Vec<u8> = Vec::new();
    let mut discarding = false;
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let read = tokio::select! {
            biased;
            _ = stop.cancelled() => {
                return Stopped {
                    told: true,
                    pending: if discarding { Vec::new() } else { line },
                };
            }
            read = input.read(&mut chunk) => read,
        };
        let read = match read {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        let mut rest = &chunk[..read];
        while !rest.is_empty() {
            let newline = rest.iter().position(|&b| b == b'\n');
            let (piece, ends) = match newline {
                Some(at) => (&rest[..=at], true),
                None => (rest, false),
            };
            rest = &rest[piece.len()..];
            if discarding {
                discarding = !ends;
                continue;
            }
            let content = line.len() + piece.len() - usize::from(ends);
            if content > max_message_bytes {
                // What was read of the line (at most the limit and one chunk) is looked
                // at for an id; the rest is dropped as it comes.
                line.extend_from_slice(piece);
                let answer = refuse_oversized(&line, max_message_bytes);
                line.clear();
                line.shrink_to(CHUNK);
                discarding = !ends;
                if let Some(answer) = answer {
                    if answers.send(answer).await.is_err() {
                        return Stopped::default();
                    }
                }
                continue;
            }
            line.extend_from_slice(piece);
            if !ends {
                continue;
            }
            match check_line(&line) {
                Checked::Pass => {
                    if to_rmcp.write_all(&line).await.is_err() {
                        return Stopped::default();
                    }
                }
                Checked::Refused(Some(answer)) => {
                    if answers.send(answer).await.is_err() {
                        return Stopped::default();
                    }
                }
                Checked::Refused(None) => {}
            }
            line.clear();
            if line.capacity() > 4 * CHUNK {
                line.shrink_to(CHUNK);
            }
        }
    }
    if !line.is_empty() && !discarding {
        // rmcp drops an unterminated last line; it is its to drop, as before.
        let _ = to_rmcp.write_all(&line).await;
    }
    let _ = to_rmcp.shutdown().await;
    Stopped::default()
}

/// What becomes of one whole line.
enum Checked {
    /// rmcp reads it (or answers it itself).
    Pass,
    /// Not given to rmcp; answered with this line, or (a notification) not answered.
    Refused(Option<Vec<u8>>),
}

/// Whether rmcp can read `line` (with its newline); when not, the answer to it.
fn check_line(line: &[u8]) -> Checked {
    // What rmcp parses: the line without its newline, a carriage return, a BOM.
    let content = line.strip_suffix(b"\n").unwrap_or(line);
    let content = content.strip_suffix(b"\r").unwrap_or(content);
    let content = content
        .strip_prefix(b"\xEF\xBB\xBF".as_slice())
        .unwrap_or(content);
    if content.is_empty() {
        return Checked::Pass;
    }
    let error = match serde_json::from_slice::<ClientJsonRpcMessage>(content) {
        Ok(_) => return Checked::Pass,
        Err(error) => error,
    };
    match error.classify() {
        // Valid JSON that is no message: rmcp answers it (-32600).
        serde_json::error::Category::Data | serde_json::error::Category::Io => Checked::Pass,
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            let glance = glance(content);
            Checked::Refused(answer_for(
                &glance,
                PARSE_ERROR,
                format!("Parse error: {error}"),
                json!(null),
                "a line that is not JSON",
            ))
        }
    }
}

/// The answer to a line over the limit (`line` is what was read of it).
fn refuse_oversized(line: &[u8], max_message_bytes: usize) -> Option<Vec<u8>> {
    answer_for(
        &glance(line),
        INVALID_REQUEST,
        format!(
            "Message too long: more than {max_message_bytes} bytes, the limit on one line \
             (`[serve] stdio_max_message_bytes`); it was discarded"
        ),
        json!({ "max_message_bytes": max_message_bytes }),
        "a line over the length limit",
    )
}

/// The error line answering a refused line, or None (logged) when the line is a
/// notification or a response, which JSON-RPC never answers.
fn answer_for(
    glance: &Glance,
    code: i64,
    message: String,
    data: Value,
    what: &str,
) -> Option<Vec<u8>> {
    let notification = glance.complete && glance.method && glance.id.is_none();
    let response = glance.response && !glance.method;
    if notification || response {
        let kind = if notification {
            "notification"
        } else {
            "response"
        };
        tracing::warn!(code, %message, "MCP stdio: dropped {what} (a {kind}: not answered)");
        return None;
    }
    let id = glance.id.clone().unwrap_or(Value::Null);
    tracing::warn!(code, %id, %message, "MCP stdio: answered {what} with an error");
    let mut error = json!({ "code": code, "message": message });
    if !data.is_null() {
        error["data"] = data;
    }
    let mut line = serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": id, "error": error }))
        .expect("a JSON value serializes");
    line.push(b'\n');
    Some(line)
}

/// What the top level of a line shows, read without parsing it (no recursion: nesting
/// of any depth is skipped with a counter). It stops at the first thing it cannot read.
#[derive(Debug, Default, PartialEq)]
struct Glance {
    /// The top-level `id`, when it is a number or a string.
    id: Option<Value>,
    /// A top-level `method` member was seen.
    method: bool,
    /// A top-level `result` or `error` member was seen.
    response: bool,
    /// The top-level object was read to its closing brace (so `id` is not further on).
    complete: bool,
}

fn glance(line: &[u8]) -> Glance {
    let mut glance = Glance::default();
    let mut at = Cursor { bytes: line, i: 0 };
    at.whitespace();
    if !at.eat(b'{') {
        return glance;
    }
    loop {
        at.whitespace();
        if at.eat(b'}') {
            glance.complete = true;
            return glance;
        }
        let Some(key) = at.string() else {
            return glance;
        };
        at.whitespace();
        if !at.eat(b':') {
            return glance;
        }
        at.whitespace();
        let start = at.i;
        if !at.skip_value() {
            return glance;
        }
        let value = &line[start..at.i];
        match key {
            b"id" => {
                glance.id = serde_json::from_slice::<Value>(value)
                    .ok()
                    .filter(|id| id.is_number() || id.is_string());
            }
            b"method" => glance.method = true,
            b"result" | b"error" => glance.response = true,
            _ => {}
        }
        at.whitespace();
        if at.eat(b',') {
            continue;
        }
        glance.complete = at.eat(b'}');
        return glance;
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.i).copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let matched = self.peek() == Some(byte);
        self.i += usize::from(matched);
        matched
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.i += 1;
        }
    }

    /// A string's raw bytes (escapes left as they are), the cursor after its quote.
    fn string(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.i;
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(&self.bytes[start..self.i - 1]);
                }
                b'\\' => self.i += 2,
                _ => self.i += 1,
            }
        }
    }

    /// Skips one value of any nesting depth; false when the input ends first or the
    /// value cannot be told apart. Brackets are counted, not matched.
    fn skip_value(&mut self) -> bool {
        let mut depth = 0usize;
        loop {
            self.whitespace();
            match self.peek() {
                None => return false,
                Some(b'"') => {
                    if self.string().is_none() {
                        return false;
                    }
                }
                Some(b'[' | b'{') => {
                    self.i += 1;
                    depth += 1;
                    continue;
                }
                Some(b']' | b'}') => {
                    if depth == 0 {
                        return false;
                    }
                    self.i += 1;
                    depth -= 1;
                }
                Some(_) => {
                    let start = self.i;
                    while !matches!(
                        self.peek(),
                        None | Some(
                            b',' | b':' | b']' | b'}' | b'"' | b' ' | b'\t' | b'\r' | b'\n'
                        )
                    ) {
                        self.i += 1;
                    }
                    if self.i == start {
                        return false;
                    }
                }
            }
            if depth == 0 {
                return true;
            }
            self.whitespace();
            if matches!(self.peek(), Some(b',' | b':')) {
                self.i += 1;
            }
        }
    }
}

/// Owns stdout: copies rmcp's output (`from_rmcp`) to `out` as it comes and writes each
/// of the framing's answers whole, between two of rmcp's lines, never inside one. Ends
/// when rmcp's output ends (writing the answers already queued) or `out` fails.
pub async fn write_output<R, W>(from_rmcp: R, answers: mpsc::Receiver<Vec<u8>>, mut out: W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    write_output_skipping(from_rmcp, answers, &mut out, false).await;
}

/// [`write_output`] to `out` borrowed, and when `skip_first_line`, without rmcp's first
/// line (the answer to the `initialize` a resumed connection replays).
pub async fn write_output_skipping<R, W>(
    mut from_rmcp: R,
    mut answers: mpsc::Receiver<Vec<u8>>,
    out: &mut W,
    skip_first_line: bool,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut chunk = vec![0u8; CHUNK];
    if skip_first_line {
        let mut byte = [0u8; 1];
        loop {
            match from_rmcp.read(&mut byte).await {
                Ok(1) if byte[0] == b'\n' => break,
                Ok(1) => {}
                _ => return,
            }
        }
    }
    // Whether rmcp's last write ended inside a line.
    let mut mid_line = false;
    let mut answers_open = true;
    loop {
        tokio::select! {
            // An answer waiting goes out first: before rmcp's answers to later lines.
            biased;
            answer = answers.recv(), if answers_open && !mid_line => match answer {
                Some(answer) => {
                    if out.write_all(&answer).await.is_err() || out.flush().await.is_err() {
                        return;
                    }
                }
                None => answers_open = false,
            },
            read = from_rmcp.read(&mut chunk) => {
                let read = match read {
                    Ok(0) | Err(_) => break,
                    Ok(read) => read,
                };
                if out.write_all(&chunk[..read]).await.is_err() || out.flush().await.is_err() {
                    return;
                }
                mid_line = chunk[read - 1] != b'\n';
            }
        }
    }
    if !mid_line {
        while let Ok(answer) = answers.try_recv() {
            if out.write_all(&answer).await.is_err() {
                return;
            }
        }
    }
    let _ = out.flush().await;
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(line: &str) -> Option<Value> {
        match check_line(format!("{line}\n").as_bytes()) {
            Checked::Pass => panic!("{line:?} was passed on"),
            Checked::Refused(answer) => answer.map(|a| serde_json::from_slice(&a).unwrap()),
        }
    }

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn valid_messages_and_valid_json_that_is_no_message_pass_on_to_rmcp() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":"a","result":{}}"#,
            r#"{"not":"a message"}"#,
            "[1,2]",
            "",
            "\r",
        ] {
            assert!(
                matches!(check_line(format!("{line}\n").as_bytes()), Checked::Pass),
                "{line:?}"
            );
        }
    }

    #[test]
    fn a_line_that_is_not_json_gets_a_parse_error_with_the_id_when_one_is_seen() {
        let garbage = answered("hello there").unwrap();
        assert_eq!(garbage["id"], Value::Null);
        assert_eq!(garbage["error"]["code"], PARSE_ERROR);
        let deep = format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"x","arguments":{{"a":{}}}}},"id":"late"}}"#,
            nested(100_000)
        );
        let answer = answered(&deep).unwrap();
        assert_eq!(answer["id"], "late");
        assert_eq!(answer["error"]["code"], PARSE_ERROR);
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("recursion limit"),
            "{answer}"
        );
        let cut = answered(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"#).unwrap();
        assert_eq!(cut["id"], 7);
    }

    #[test]
    fn a_notification_or_a_response_that_is_not_json_gets_no_answer() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/x","params":{{"a":{}}}}}"#,
            nested(1000)
        );
        assert_eq!(answered(&deep), None);
        let response = format!(r#"{{"jsonrpc":"2.0","id":3,"result":{}}}"#, nested(1000));
        assert_eq!(answered(&response), None);
        // Cut short before an id could come: answered, with id null.
        let cut = answered(r#"{"jsonrpc":"2.0","method":"tools/call","params":[}"#).unwrap();
        assert_eq!(cut["id"], Value::Null);
    }

    #[tokio::test]
    async fn an_over_long_line_is_answered_with_its_id_and_the_lines_around_it_pass() {
        let (to_rmcp, mut rmcp) = tokio::io::duplex(1 << 20);
        let (answers, mut answered) = mpsc::channel(4);
        let long = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"x\",\"params\":\"{}\"}}\n",
            "y".repeat(1000)
        );
        let ping = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
        let input = format!("{ping}{long}{ping}");
        frame_input(input.as_bytes(), to_rmcp, answers, 200).await;
        let mut passed = String::new();
        rmcp.read_to_string(&mut passed).await.unwrap();
        assert_eq!(passed, format!("{ping}{ping}"));
        let answer: Value = serde_json::from_slice(&answered.recv().await.unwrap()).unwrap();
        assert_eq!(answer["id"], 42);
        assert_eq!(answer["error"]["code"], INVALID_REQUEST);
        assert_eq!(answer["error"]["data"]["max_message_bytes"], 200);
        assert!(answered.recv().await.is_none());
    }

    #[tokio::test]
    async fn answers_go_between_rmcps_lines_never_inside_one() {
        let (mut rmcp, from_rmcp) = tokio::io::duplex(1 << 16);
        let (answers, queued) = mpsc::channel(4);
        let (out, mut written) = tokio::io::duplex(1 << 16);
        let writer = tokio::spawn(write_output(from_rmcp, queued, out));
        rmcp.write_all(b"{\"half").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        answers.send(b"ANSWER\n".to_vec()).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        rmcp.write_all(b"\":1}\n").await.unwrap();
        drop(rmcp);
        writer.await.unwrap();
        let mut text = String::new();
        written.read_to_string(&mut text).await.unwrap();
        assert_eq!(text, "{\"half\":1}\nANSWER\n");
    }
}
