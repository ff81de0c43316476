//! Test plugin: the tool `version` answering "b".

const VERSION: &str = "b";

include!("../../fixtures/versioned.rs");
