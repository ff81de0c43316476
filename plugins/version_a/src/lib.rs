//! Test plugin: the tool `version` answering "a".

const VERSION: &str = "a";

include!("../../fixtures/versioned.rs");
