#![no_main]
//! libFuzzer entry point; the body is [`agenthooks_fuzz::targets::manifest::run`].

libfuzzer_sys::fuzz_target!(|data: &[u8]| agenthooks_fuzz::targets::manifest::run(data));
