//! dsh's own line framing for MCP over stdio, in front of rmcp: it splits stdin into
//! lines, parses each once and hands rmcp the messages ([`StdioTransport`]), and answers
//! the lines that are no message, so that a client never waits on an id forever.
//!
//! - A line longer than `[serve] stdio_max_message_bytes` (its newline not counted) gets
//!   `-32600` (invalid request) naming the limit, with the request's id when it is in the
//!   part of the line read up to the limit (else `"id": null`); the rest of the line is
//!   discarded as it streams in, never buffered.
//! - A line that is not JSON (a syntax error, an unfinished value, or nesting deeper than
//!   serde_json's recursion limit of 128) gets `-32700` (parse error), with the id when a
//!   glance at the line's top-level members finds one (else `"id": null`).
//! - Valid JSON that is no JSON-RPC message (another shape, a known method's params that
//!   do not fit it) gets `-32600` (invalid request), with its id when one is seen.
//! - A line that is certainly a notification (a whole top-level object with a `method`
//!   and no `id`) or a response (`result` or `error`, no `method`) is logged, never
//!   answered, as JSON-RPC says. An empty line is skipped.
//!
//! The answers and rmcp's own messages are written by the one task that owns stdout
//! ([`write_output`]), a whole line at a time.

use std::future::Future;

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::RoleServer;

/// JSON-RPC's code for input that is not JSON.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's code for a message that is not a valid request (here: too long).
const INVALID_REQUEST: i64 = -32600;

/// How much is read from stdin at a time.
const CHUNK: usize = 64 << 10;

/// Where the framing puts each line that is a message, parsed.
pub trait PassOn: Send {
    /// Passes `message` on (`line` is its text, newline included); false once nobody
    /// reads what is passed.
    fn pass(
        &mut self,
        line: &[u8],
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = bool> + Send;
}

impl<P: PassOn> PassOn for &mut P {
    fn pass(
        &mut self,
        line: &[u8],
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = bool> + Send {
        (**self).pass(line, message)
    }
}

/// The messages go to rmcp, through [`StdioTransport`].
impl PassOn for mpsc::Sender<ClientJsonRpcMessage> {
    async fn pass(&mut self, _line: &[u8], message: ClientJsonRpcMessage) -> bool {
        self.send(message).await.is_ok()
    }
}

/// The lines themselves, as they came (the framing's tests look at them).
#[cfg(test)]
impl PassOn for Vec<u8> {
    async fn pass(&mut self, line: &[u8], _message: ClientJsonRpcMessage) -> bool {
        self.extend_from_slice(line);
        true
    }
}

/// Reads `input` line by line until its end (or a read error), passing each message to
/// `to_rmcp` and sending an answer line for each refused request to `answers`. A last
/// line without a newline is dropped, as a cut-off message. Ends early when rmcp stops
/// reading.
pub async fn frame_input<R, P>(
    mut input: R,
    mut to_rmcp: P,
    answers: mpsc::Sender<Vec<u8>>,
    max_message_bytes: usize,
) where
    R: AsyncRead + Unpin,
    P: PassOn,
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
/// binary).
pub async fn frame_input_until<R, P>(
    input: &mut R,
    to_rmcp: &mut P,
    answers: mpsc::Sender<Vec<u8>>,
    max_message_bytes: usize,
    stop: &tokio_util::sync::CancellationToken,
) -> Stopped
where
    R: AsyncRead + Unpin,
    P: PassOn,
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
                Checked::Pass(message) => {
                    if !to_rmcp.pass(&line, *message).await {
                        return Stopped::default();
                    }
                }
                Checked::Empty => {}
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
        tracing::warn!(
            bytes = line.len(),
            "MCP stdio: the input ended inside a line; the cut-off line was dropped"
        );
    }
    Stopped::default()
}

/// What becomes of one whole line.
enum Checked {
    /// A message, for rmcp.
    Pass(Box<ClientJsonRpcMessage>),
    /// Nothing but whitespace: skipped.
    Empty,
    /// Not given to rmcp; answered with this line, or (a notification) not answered.
    Refused(Option<Vec<u8>>),
}

/// The message `line` (with its newline) holds, parsed once; when it holds none, the
/// answer to it.
fn check_line(line: &[u8]) -> Checked {
    // The line without its newline, a carriage return, a BOM (RFC 8259 allows one).
    let content = line.strip_suffix(b"\n").unwrap_or(line);
    let content = content.strip_suffix(b"\r").unwrap_or(content);
    let content = content
        .strip_prefix(b"\xEF\xBB\xBF".as_slice())
        .unwrap_or(content);
    if content.is_empty() {
        return Checked::Empty;
    }
    let error = match serde_json::from_slice::<ClientJsonRpcMessage>(content) {
        Ok(message) => return Checked::Pass(Box::new(message)),
        Err(error) => error,
    };
    let (code, message, what) = match error.classify() {
        serde_json::error::Category::Data | serde_json::error::Category::Io => (
            INVALID_REQUEST,
            format!("Invalid request: {error}"),
            "a line that is no JSON-RPC message",
        ),
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => (
            PARSE_ERROR,
            format!("Parse error: {error}"),
            "a line that is not JSON",
        ),
    };
    Checked::Refused(answer_for(
        &glance(content),
        code,
        message,
        json!(null),
        what,
    ))
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

/// rmcp's side of the stdio connection: the messages the framing parsed in, and rmcp's
/// messages out, each serialized into one line for [`write_output`].
pub struct StdioTransport {
    messages: mpsc::Receiver<ClientJsonRpcMessage>,
    /// None once rmcp has closed the transport.
    lines: Option<mpsc::Sender<Vec<u8>>>,
}

impl StdioTransport {
    pub fn new(
        messages: mpsc::Receiver<ClientJsonRpcMessage>,
        lines: mpsc::Sender<Vec<u8>>,
    ) -> Self {
        Self {
            messages,
            lines: Some(lines),
        }
    }
}

impl rmcp::transport::Transport<RoleServer> for StdioTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        message: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let line = serde_json::to_vec(&message).map(|mut line| {
            line.push(b'\n');
            line
        });
        let lines = self.lines.clone();
        async move {
            let closed =
                || std::io::Error::new(std::io::ErrorKind::NotConnected, "stdout is closed");
            let lines = lines.ok_or_else(closed)?;
            lines.send(line?).await.map_err(|_| closed())
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        self.messages.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.lines = None;
        Ok(())
    }
}

/// Owns stdout: writes rmcp's lines (`from_rmcp`) and the framing's answers to `out`, a
/// whole line at a time, flushing whenever nothing more is waiting. Ends when rmcp's
/// output ends (writing the answers already queued) or `out` fails.
pub async fn write_output<W>(
    from_rmcp: mpsc::Receiver<Vec<u8>>,
    answers: mpsc::Receiver<Vec<u8>>,
    mut out: W,
) where
    W: AsyncWrite + Unpin,
{
    write_output_skipping(from_rmcp, answers, &mut out, false).await;
}

/// [`write_output`] to `out` borrowed, and when `skip_first_line`, without rmcp's first
/// line (the answer to the `initialize` a resumed connection replays).
pub async fn write_output_skipping<W>(
    mut from_rmcp: mpsc::Receiver<Vec<u8>>,
    mut answers: mpsc::Receiver<Vec<u8>>,
    out: &mut W,
    mut skip_first_line: bool,
) where
    W: AsyncWrite + Unpin,
{
    let mut answers_open = true;
    loop {
        let line = tokio::select! {
            // An answer waiting goes out first: before rmcp's answers to later lines.
            biased;
            answer = answers.recv(), if answers_open => match answer {
                Some(answer) => answer,
                None => {
                    answers_open = false;
                    continue;
                }
            },
            line = from_rmcp.recv() => match line {
                Some(line) if std::mem::take(&mut skip_first_line) => {
                    drop(line);
                    continue;
                }
                Some(line) => line,
                None => break,
            },
        };
        if out.write_all(&line).await.is_err() {
            return;
        }
        if answers.is_empty() && from_rmcp.is_empty() && out.flush().await.is_err() {
            return;
        }
    }
    while let Ok(answer) = answers.try_recv() {
        if out.write_all(&answer).await.is_err() {
            return;
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
            Checked::Pass(_) | Checked::Empty => panic!("{line:?} was not refused"),
            Checked::Refused(answer) => answer.map(|a| serde_json::from_slice(&a).unwrap()),
        }
    }

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn messages_pass_on_to_rmcp_parsed_and_empty_lines_are_skipped() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":"a","result":{}}"#,
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\r",
        ] {
            let Checked::Pass(message) = check_line(format!("{line}\n").as_bytes()) else {
                panic!("{line:?} was not passed on");
            };
            let text = serde_json::to_value(&*message).unwrap();
            assert_eq!(text["jsonrpc"], "2.0", "{line:?}");
        }
        for line in ["", "\r"] {
            assert!(
                matches!(check_line(format!("{line}\n").as_bytes()), Checked::Empty),
                "{line:?}"
            );
        }
    }

    #[test]
    fn valid_json_that_is_no_message_gets_invalid_request_with_the_id_when_one_is_seen() {
        for line in [r#"{"not":"a message"}"#, "[1,2]", "7"] {
            let answer = answered(line).unwrap();
            assert_eq!(answer["id"], Value::Null, "{line}");
            assert_eq!(answer["error"]["code"], INVALID_REQUEST, "{line}");
        }
        // A request with no method rmcp reads: the client waits on this id.
        let answer = answered(r#"{"jsonrpc":"2.0","id":9,"method":5}"#).unwrap();
        assert_eq!(answer["id"], 9);
        assert_eq!(answer["error"]["code"], INVALID_REQUEST);
        // A notification that fits no message is dropped, never answered.
        assert_eq!(
            answered(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":7}"#),
            None
        );
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
        let (answers, mut answered) = mpsc::channel(4);
        let long = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"x\",\"params\":\"{}\"}}\n",
            "y".repeat(1000)
        );
        let ping = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
        let input = format!("{ping}{long}{ping}");
        let mut passed = Vec::new();
        frame_input(input.as_bytes(), &mut passed, answers, 200).await;
        assert_eq!(String::from_utf8(passed).unwrap(), format!("{ping}{ping}"));
        let answer: Value = serde_json::from_slice(&answered.recv().await.unwrap()).unwrap();
        assert_eq!(answer["id"], 42);
        assert_eq!(answer["error"]["code"], INVALID_REQUEST);
        assert_eq!(answer["error"]["data"]["max_message_bytes"], 200);
        assert!(answered.recv().await.is_none());
    }

    #[tokio::test]
    async fn rmcps_messages_and_the_answers_go_out_as_whole_lines() {
        use rmcp::transport::Transport;
        let (_framed, rmcp_in) = mpsc::channel(1);
        let (rmcp_out, from_rmcp) = mpsc::channel(4);
        let (answers, queued) = mpsc::channel(4);
        let mut transport = StdioTransport::new(rmcp_in, rmcp_out);
        let (out, mut written) = tokio::io::duplex(1 << 16);
        let writer = tokio::spawn(write_output(from_rmcp, queued, out));
        let pong = ServerJsonRpcMessage::response(
            rmcp::model::ServerResult::empty(()),
            rmcp::model::NumberOrString::Number(1),
        );
        transport.send(pong.clone()).await.unwrap();
        answers.send(b"{\"answer\":1}\n".to_vec()).await.unwrap();
        transport.send(pong).await.unwrap();
        transport.close().await.unwrap();
        drop(transport);
        writer.await.unwrap();
        let mut text = String::new();
        written.read_to_string(&mut text).await.unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(
            lines.iter().filter(|line| line["id"] == 1).count(),
            2,
            "{text}"
        );
        assert!(lines.contains(&json!({"answer": 1})), "{text}");
    }
}
