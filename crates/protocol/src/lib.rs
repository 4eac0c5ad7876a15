#![forbid(unsafe_code)]
pub mod batch;
