//! Property tests of [`frame_input`], which reads a client's stdin: any byte stream, cut
//! into reads at any points and read under any line limit, is framed without a panic;
//! every line it passes to rmcp is one of the input's lines, unchanged and in order, and
//! no line is both passed and answered or answered twice. For a stream of known lines:
//! every JSON-RPC message under the limit passes unchanged and in order, every request
//! that is not JSON or is over the limit gets exactly one answer with its id, and a
//! notification that is not JSON gets none.
//!
//! Each property runs 256 cases by default (a stream is at most a few hundred KiB); set
//! `PROPTEST_CASES` for a longer local run, e.g.
//! `PROPTEST_CASES=20000 cargo test -p dsh --lib framing::proptests`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::*;
use proptest::prelude::*;
use proptest::test_runner::Config;
use tokio::io::ReadBuf;

/// `default` cases, or `PROPTEST_CASES` when it is set.
fn config(default: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default);
    Config {
        cases,
        // A failure is kept as a plain #[test], not in a file beside the source.
        failure_persistence: None,
        ..Config::default()
    }
}

/// A reader that returns its input in the pieces given (each read at most one piece).
struct Pieces(VecDeque<Vec<u8>>);

impl Pieces {
    /// `input` cut after each of `sizes` bytes in turn (cycled), the rest as one piece.
    fn new(input: &[u8], sizes: &[usize]) -> Self {
        let mut pieces = VecDeque::new();
        let mut rest = input;
        for size in sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (piece, after) = rest.split_at((*size).clamp(1, rest.len()));
            pieces.push_back(piece.to_vec());
            rest = after;
        }
        Pieces(pieces)
    }
}

impl AsyncRead for Pieces {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(mut piece) = self.0.pop_front() {
            let now = piece.len().min(buf.remaining());
            buf.put_slice(&piece[..now]);
            if now < piece.len() {
                self.0.push_front(piece.split_off(now));
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// What [`frame_input`] does with `input` read in `sizes` pieces: the bytes passed to
/// rmcp and the answers, each parsed.
fn frame(input: &[u8], sizes: &[usize], max: usize) -> (Vec<u8>, Vec<Value>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    // Room for an answer to every line: the framing never waits on the channel.
    let lines = input.iter().filter(|&&b| b == b'\n').count() + 1;
    let (answers, mut answered) = mpsc::channel(lines);
    let mut passed = Vec::new();
    runtime.block_on(frame_input(
        Pieces::new(input, sizes),
        &mut passed,
        answers,
        max,
    ));
    let mut out = Vec::new();
    while let Ok(answer) = answered.try_recv() {
        assert_eq!(answer.last(), Some(&b'\n'), "an answer is one line");
        out.push(serde_json::from_slice(&answer).expect("an answer is JSON"));
    }
    (passed, out)
}

/// Read sizes, cycled: single bytes up to more than one [`CHUNK`].
fn sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(
        prop_oneof![1usize..8, 1usize..600, 1usize..(2 * CHUNK)],
        1..16,
    )
}

/// Bytes that make and break JSON-RPC lines.
fn line_bytes(max_len: usize) -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        any::<u8>(),
        prop::sample::select(&b"{}[]\":,\\ \r\n0123456789idmethodresulterror"[..]),
    ];
    prop::collection::vec(byte, 0..max_len)
}

/// One line of a stream of known lines, without its newline.
#[derive(Debug, Clone)]
enum Line {
    /// A request, valid JSON-RPC: passed on unless over the limit, then answered.
    Request { id: u32, text: String },
    /// A notification or a response, valid and short: passed on.
    Valid(&'static str),
    /// A request that is not JSON (`#` where a value goes): answered with its id.
    Broken { id: u32, text: String },
    /// A notification that is not JSON, whole to its closing brace: not answered.
    BrokenNotification(&'static str),
    /// Anything short (under every limit): whatever [`check_line`] says of it.
    Bytes(Vec<u8>),
}

impl Line {
    fn bytes(&self) -> &[u8] {
        match self {
            Line::Request { text, .. } | Line::Broken { text, .. } => text.as_bytes(),
            Line::Valid(text) | Line::BrokenNotification(text) => text.as_bytes(),
            Line::Bytes(bytes) => bytes,
        }
    }
}

fn line() -> impl Strategy<Value = Line> {
    prop_oneof![
        (any::<u32>(), ".{0,40}", 0usize..3000).prop_map(|(id, name, padding)| {
            let message = json!({
                "jsonrpc": "2.0",
                "id": id,
                "method": "tools/call",
                "params": {"name": name, "arguments": {"pad": "p".repeat(padding)}},
            });
            Line::Request {
                id,
                text: message.to_string(),
            }
        }),
        prop::sample::select(
            &[
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                r#"{"jsonrpc":"2.0","id":"a","result":{}}"#,
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m"}}"#,
            ][..]
        )
        .prop_map(Line::Valid),
        (any::<u32>(), "[a-z0-9{}\\[\\]:, ]{0,40}", 0usize..3000).prop_map(
            |(id, garbage, padding)| Line::Broken {
                id,
                text: format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"x","params":#{garbage}{}"#,
                    "p".repeat(padding)
                ),
            }
        ),
        prop::sample::select(
            &[
                r#"{"jsonrpc":"2.0","method":"notifications/x","params":[1,2}}"#,
                r#"{"method":"notifications/x","params":{"a":[}}}"#,
            ][..]
        )
        .prop_map(Line::BrokenNotification),
        line_bytes(200)
            .prop_map(|bytes| Line::Bytes(bytes.into_iter().filter(|&b| b != b'\n').collect())),
    ]
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn any_stream_is_framed_into_its_own_lines(
        input in line_bytes(16 << 10),
        sizes in sizes(),
        max in prop_oneof![1usize..64, 1usize..20_000],
    ) {
        let (passed, answers) = frame(&input, &sizes, max);
        let lines: Vec<&[u8]> = input.split_inclusive(|&b| b == b'\n').collect();
        let mut at = 0;
        let mut passed_lines = 0;
        for line in passed.split_inclusive(|&b| b == b'\n') {
            passed_lines += 1;
            match lines[at..].iter().position(|&input| input == line) {
                Some(found) => at += found + 1,
                None => prop_assert!(false, "{:?} is no input line in order", line),
            }
        }
        prop_assert!(passed_lines + answers.len() <= lines.len());
        for answer in answers {
            prop_assert_eq!(&answer["jsonrpc"], "2.0");
            prop_assert!(answer["error"]["code"].is_i64(), "{}", answer);
            prop_assert!(answer["error"]["message"].is_string(), "{}", answer);
        }
    }

    #[test]
    fn messages_pass_in_order_and_each_refused_request_gets_one_answer(
        lines in prop::collection::vec(line(), 0..40),
        tail in line_bytes(200),
        sizes in sizes(),
        max in 256usize..4096,
    ) {
        let tail: Vec<u8> = tail.into_iter().filter(|&b| b != b'\n').collect();
        let mut input = Vec::new();
        let mut expect_passed = Vec::new();
        let mut expect_answers: Vec<(Value, i64)> = Vec::new();
        for line in &lines {
            let bytes = line.bytes();
            input.extend_from_slice(bytes);
            input.push(b'\n');
            let over = bytes.len() > max;
            let mut pass = || {
                expect_passed.extend_from_slice(bytes);
                expect_passed.push(b'\n');
            };
            match line {
                Line::Request { id, .. } if over => expect_answers.push((json!(id), INVALID_REQUEST)),
                Line::Request { .. } | Line::Valid(_) => pass(),
                Line::Broken { id, .. } => expect_answers
                    .push((json!(id), if over { INVALID_REQUEST } else { PARSE_ERROR })),
                Line::BrokenNotification(_) => {}
                Line::Bytes(bytes) => {
                    let mut whole = bytes.clone();
                    whole.push(b'\n');
                    match check_line(&whole) {
                        Checked::Pass(_) => pass(),
                        Checked::Empty => {}
                        Checked::Refused(Some(answer)) => {
                            let answer: Value = serde_json::from_slice(&answer).unwrap();
                            expect_answers.push((
                                answer["id"].clone(),
                                answer["error"]["code"].as_i64().unwrap(),
                            ));
                        }
                        Checked::Refused(None) => {}
                    }
                }
            }
        }
        // A last line without a newline is cut off: dropped.
        input.extend_from_slice(&tail);

        let (passed, answers) = frame(&input, &sizes, max);
        prop_assert!(passed == expect_passed, "passed {:?}", String::from_utf8_lossy(&passed));
        let answers: Vec<(Value, i64)> = answers
            .iter()
            .map(|answer| (answer["id"].clone(), answer["error"]["code"].as_i64().unwrap()))
            .collect();
        prop_assert_eq!(answers, expect_answers);
    }
}
