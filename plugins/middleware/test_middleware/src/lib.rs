//! `test_middleware`: a test middleware whose behaviour comes from its settings, so the
//! host tests can load the same component under several names with different
//! behaviour. The body is `body.rs`, shared with its twin `test_middleware_b`, which
//! differs only in the version `tag` writes ("a" here).
//!
//! Settings: `mode` is
//! - `pass` (the default): runs the rest once and returns its result unchanged;
//! - `retry`: runs the rest again while its result is an error, `attempts` runs in all
//!   at most (default 2), and returns the last result;
//! - `over_cap`: runs the rest `runs` times (default 100; past the host's
//!   `[limits] max_next_runs` the host stops it) and returns the last result;
//! - `deadline`: runs the rest once with a deadline of `deadline_ms` (default 500);
//! - `cache`: never runs the rest, answering itself with the text `answered by
//!   test_middleware without running the tool`;
//! - `tag`: runs the rest once and adds the text `middleware version a` after its
//!   content;
//! - `trap` (panics), `loop` (spins until its CPU budget stops it) or `oom` (allocates
//!   until its memory cap stops it).
//!
//! An unknown `mode` traps, naming it.

/// The version `tag` adds to a result.
const VERSION: &str = "a";

include!("body.rs");
