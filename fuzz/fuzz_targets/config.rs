//! Fuzz target `config`: arbitrary text (the fuzzer's bytes, decoded lossily) into the
//! `dsh.toml` parser ([`dsh::config::Config::parse`]). As its property test
//! (`engine/src/config/proptests.rs`) asserts: no panic, and the text is either a config
//! or an error with something to say.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Err(message) = dsh::config::Config::parse(&text) {
        assert!(!message.trim().is_empty(), "an empty error for {text:?}");
    }
});
