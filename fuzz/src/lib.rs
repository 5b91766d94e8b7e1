//! The bodies of agenthooks' fuzz targets, one function per target.
//!
//! The `fuzz_targets/*.rs` binaries (nightly, libFuzzer) call these, and so does the
//! stable replay test `dispatcher/tests/fuzz_corpus.rs`, which includes
//! `src/targets/mod.rs` by path and runs every file of `corpus/<target>/` through the
//! same function. A target body panics when a property breaks; anything else it
//! returns from is a pass.

pub mod targets;
