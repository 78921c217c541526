//! Work in progress: see the crate README.

pub mod node;
