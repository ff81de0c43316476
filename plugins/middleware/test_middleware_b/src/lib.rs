//! `test_middleware_b`: `test_middleware` (its settings and behaviour, `body.rs`) with
//! version "b": `tag` adds `middleware version b`. The hot-reload tests swap the two
//! under one name to show which one a call ran.

/// The version `tag` adds to a result.
const VERSION: &str = "b";

include!("../../test_middleware/src/body.rs");
