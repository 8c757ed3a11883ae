//! What the store's test files share: a store on either backend that
//! checks its own consistency (`verify`) when it is dropped.

use stow_store::{Store, StoreOptions};

/// A store plus whatever keeps it alive (the temporary directory of a
/// disk store).
pub struct Fixture {
    pub store: Store,
    /// Held for its lifetime; some tests also take it to reopen the store.
    #[allow(dead_code, reason = "not every test file reads it")]
    pub dir: Option<tempfile::TempDir>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let problems = self.store.verify().expect("verify runs");
        if !std::thread::panicking() {
            assert!(problems.is_empty(), "store inconsistent: {problems:?}");
        }
    }
}

/// A disk store in a fresh temporary directory.
pub fn disk(opts: StoreOptions) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    Fixture {
        store: Store::open(dir.path().join("data"), opts).unwrap(),
        dir: Some(dir),
    }
}

/// A memory store.
pub fn memory(opts: StoreOptions) -> Fixture {
    Fixture {
        store: Store::memory(opts).unwrap(),
        dir: None,
    }
}

/// Either backend's constructor, for tests run against both.
pub type Make = fn(StoreOptions) -> Fixture;

/// Runs each named test function (taking a [`Make`]) on both backends: a
/// module per function holding a `disk` and a `memory` test. The calling
/// file imports this module's items at its root (`use common::*`).
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn disk() {
                super::$name(super::disk);
            }
            #[test]
            fn memory() {
                super::$name(super::memory);
            }
        }
    )*};
}
#[allow(unused_imports, reason = "a macro is used by its callers' expansion")]
pub(crate) use on_both_backends;
