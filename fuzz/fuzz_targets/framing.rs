//! Fuzz target `framing`: arbitrary bytes, cut into reads at arbitrary points and read
//! under an arbitrary line limit, through the stdio framing decoder
//! ([`dsh::mcp::framing::frame_input`]). As its property test
//! (`host/src/mcp/framing/proptests.rs`) asserts: no panic; every line passed to rmcp is
//! one of the input's lines, unchanged and in order; no more lines are passed and
//! answered than the input has; every answer is one line of JSON-RPC error JSON.

#![no_main]

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

/// A reader that returns its input in the pieces given (each read at most one piece).
struct Pieces(VecDeque<Vec<u8>>);

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

/// The limit, the read sizes (cycled) and the stream, all from the fuzzer's bytes.
fn case(data: &[u8]) -> Result<(usize, Vec<usize>, Vec<u8>)> {
    let mut u = Unstructured::new(data);
    // Small limits (every line over it) as often as realistic ones.
    let max = if u.arbitrary::<bool>()? {
        u.int_in_range(1..=64)?
    } else {
        u.int_in_range(1..=20_000)?
    };
    let count = u.int_in_range(1..=16)?;
    let mut sizes = Vec::with_capacity(count);
    for _ in 0..count {
        // Single bytes up to more than the framing's 64 KiB read buffer.
        sizes.push(u.int_in_range(1..=(128 << 10))?);
    }
    Ok((max, sizes, u.take_rest().to_vec()))
}

fuzz_target!(|data: &[u8]| {
    let Ok((max, sizes, input)) = case(data) else {
        return;
    };
    let mut pieces = VecDeque::new();
    let mut rest = &input[..];
    for size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (piece, after) = rest.split_at((*size).clamp(1, rest.len()));
        pieces.push_back(piece.to_vec());
        rest = after;
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    // Room for an answer to every line: the framing never waits on the channel.
    let lines: Vec<&[u8]> = input.split_inclusive(|&b| b == b'\n').collect();
    let (answers, mut answered) = mpsc::channel(lines.len() + 1);
    let mut passed = Vec::new();
    runtime.block_on(dsh::mcp::framing::frame_input(
        Pieces(pieces),
        &mut passed,
        answers,
        max,
    ));

    let mut at = 0;
    let mut passed_lines = 0;
    for line in passed.split_inclusive(|&b| b == b'\n') {
        passed_lines += 1;
        match lines[at..].iter().position(|&input| input == line) {
            Some(found) => at += found + 1,
            None => panic!("{line:?} is no input line in order"),
        }
    }
    let mut answer_count = 0;
    while let Ok(answer) = answered.try_recv() {
        answer_count += 1;
        assert_eq!(answer.last(), Some(&b'\n'), "an answer is one line");
        assert_eq!(
            answer.iter().filter(|&&b| b == b'\n').count(),
            1,
            "an answer is one line"
        );
        let answer: Value = serde_json::from_slice(&answer).expect("an answer is JSON");
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert!(answer["error"]["code"].is_i64(), "{answer}");
        assert!(answer["error"]["message"].is_string(), "{answer}");
    }
    assert!(passed_lines + answer_count <= lines.len());
});
