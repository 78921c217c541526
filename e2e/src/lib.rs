//! End-to-end support for koordinator-rs: start koord-manager, koord-webhook and one koordlet
//! per simulated node in-process against the embedded cluster of `koord-testcluster`, for the
//! scenario tests in `tests/`, the `koord-playground` binary, whose colocation story lives in
//! [`story`], and the `koord-soak` binary ([`soak`]). See `e2e/README.md`.

pub mod bench;
pub mod components;
pub mod setup;
pub mod soak;
pub mod story;
pub mod webhook_config;
