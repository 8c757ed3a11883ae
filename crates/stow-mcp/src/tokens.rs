//! Observation tokens: opaque names for the store's live save conditions.
//!
//! The server keeps the store's [`SaveCondition`] itself and hands out only
//! a random token bound to the exact key; the condition is never serialised.
//! Tokens live in memory (gone after a restart), expire after a fixed TTL
//! (reaped on access), are bounded in number and never evicted: a full pool
//! refuses new observations.

use std::collections::HashMap;
use std::time::{Duration, Instant};
use stow_store::hex;

use stow_store::SaveCondition;

/// How long an observation stays live.
pub const OBSERVATION_TTL: Duration = Duration::from_secs(15 * 60);

/// A source of the current time, replaceable in tests.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The real monotonic clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

struct Entry {
    key: String,
    condition: SaveCondition,
    expires: Instant,
}

/// Why no token could be minted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MintError {
    /// The pool holds its maximum of live tokens.
    Full,
    /// Random tokens kept colliding (never expected).
    Exhausted,
}

/// What a save's token names.
#[derive(Debug)]
pub enum Lookup {
    /// A live observation of this key.
    Live(SaveCondition),
    /// The token existed but its TTL has passed (it is now removed).
    Expired,
    /// Unknown, released, or issued for another key.
    Invalid,
}

/// The live observations of one server.
pub struct Pool {
    entries: HashMap<String, Entry>,
    max: usize,
    ttl: Duration,
}

impl Pool {
    /// An empty pool of at most `max` tokens that live for `ttl`.
    pub fn new(max: usize, ttl: Duration) -> Pool {
        Pool {
            entries: HashMap::new(),
            max,
            ttl,
        }
    }

    /// Drops every expired token.
    pub fn reap(&mut self, now: Instant) {
        self.entries.retain(|_, e| now < e.expires);
    }

    /// Whether no further token can be minted (after reaping).
    pub fn is_full(&mut self, now: Instant) -> bool {
        self.reap(now);
        self.entries.len() >= self.max
    }

    /// Number of tokens held (expired ones included until reaped).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the pool holds no token.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Mints a token for an observation of `key`.
    pub fn mint(
        &mut self,
        key: &str,
        condition: SaveCondition,
        now: Instant,
    ) -> Result<String, MintError> {
        if self.is_full(now) {
            return Err(MintError::Full);
        }
        for _ in 0..5 {
            let token = hex(&rand::random::<[u8; 16]>());
            if self.entries.contains_key(&token) {
                continue;
            }
            self.entries.insert(
                token.clone(),
                Entry {
                    key: key.to_string(),
                    condition,
                    expires: now + self.ttl,
                },
            );
            return Ok(token);
        }
        Err(MintError::Exhausted)
    }

    /// Looks a token up for a save of `key`. An expired token is reported
    /// once as [`Lookup::Expired`] and removed; other expired tokens are
    /// reaped afterwards.
    pub fn lookup(&mut self, token: &str, key: &str, now: Instant) -> Lookup {
        let found = match self.entries.get(token) {
            None => Lookup::Invalid,
            Some(e) if now >= e.expires => {
                self.entries.remove(token);
                Lookup::Expired
            }
            Some(e) if e.key != key => Lookup::Invalid,
            Some(e) => Lookup::Live(e.condition.clone()),
        };
        self.reap(now);
        found
    }

    /// Forgets a token; unknown tokens are fine (release is idempotent).
    pub fn release(&mut self, token: &str, now: Instant) {
        self.entries.remove(token);
        self.reap(now);
    }

    /// Forgets every token (server close).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stow_store::{Store, StoreOptions};

    fn condition(store: &Store, key: &str) -> SaveCondition {
        store.read_for_save("bkt", key, 1024).unwrap().condition
    }

    fn store() -> Store {
        let s = Store::memory(StoreOptions::default()).unwrap();
        s.create_bucket("bkt").unwrap();
        s
    }

    #[test]
    fn tokens_are_opaque_hex_bound_to_their_key() {
        let s = store();
        let mut pool = Pool::new(4, OBSERVATION_TTL);
        let t0 = Instant::now();
        let tok = pool.mint("a", condition(&s, "a"), t0).unwrap();
        assert_eq!(tok.len(), 32);
        assert!(tok.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(matches!(pool.lookup(&tok, "a", t0), Lookup::Live(_)));
        assert!(matches!(pool.lookup(&tok, "b", t0), Lookup::Invalid));
        assert!(matches!(pool.lookup("feed", "a", t0), Lookup::Invalid));
    }

    #[test]
    fn full_pool_refuses_and_never_evicts() {
        let s = store();
        let mut pool = Pool::new(1, OBSERVATION_TTL);
        let t0 = Instant::now();
        let first = pool.mint("a", condition(&s, "a"), t0).unwrap();
        assert_eq!(pool.mint("b", condition(&s, "b"), t0), Err(MintError::Full));
        assert!(matches!(pool.lookup(&first, "a", t0), Lookup::Live(_)));
        pool.release(&first, t0);
        pool.release(&first, t0);
        assert!(pool.is_empty());
        assert!(matches!(pool.lookup(&first, "a", t0), Lookup::Invalid));
        assert!(pool.mint("b", condition(&s, "b"), t0).is_ok());
    }

    #[test]
    fn expiry_is_reported_once_then_the_slot_frees() {
        let s = store();
        let mut pool = Pool::new(1, OBSERVATION_TTL);
        let t0 = Instant::now();
        let tok = pool.mint("a", condition(&s, "a"), t0).unwrap();
        let later = t0 + OBSERVATION_TTL;
        assert!(matches!(pool.lookup(&tok, "a", later), Lookup::Expired));
        assert!(matches!(pool.lookup(&tok, "a", later), Lookup::Invalid));
        assert!(pool.mint("a", condition(&s, "a"), later).is_ok());
    }

    #[test]
    fn reaping_frees_expired_slots() {
        let s = store();
        let mut pool = Pool::new(1, Duration::from_secs(1));
        let t0 = Instant::now();
        pool.mint("a", condition(&s, "a"), t0).unwrap();
        assert!(pool.is_full(t0));
        assert!(!pool.is_full(t0 + Duration::from_secs(1)));
        assert_eq!(pool.len(), 0);
    }
}
