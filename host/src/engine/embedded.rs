//! The default plugin set, built from `plugins/` for `wasm32-wasip2` by `build.rs` and
//! embedded in the binary so `dsh` works with no configuration.

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));
