//! Fault points for crash tests: the store's ([`stow_store::fault`]),
//! one mechanism and one variable for every crate.

pub use stow_store::fault::{point, skipped, VAR};
