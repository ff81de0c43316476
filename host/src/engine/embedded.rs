//! The default plugin set, built from `plugins/` for `wasm32-wasip2` by `build.rs` and
//! embedded in the binary so `dsh` works with no configuration.

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

/// Whether the embedded plugin `name` is loaded under `config`: every tool, and the
/// guards and result filters `[pipeline]` names.
pub fn wanted(name: &str, config: &crate::config::Config) -> bool {
    !STAGES.contains(&name)
        || config.pipeline.guards.iter().any(|g| g == name)
        || config.pipeline.filters.iter().any(|f| f == name)
}
