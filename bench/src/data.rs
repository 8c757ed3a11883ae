//! Deterministic inputs: one pool of seeded pseudo-random bytes, from which
//! every object body is a window (bodies longer than the pool wrap around).
//! Nothing is generated inside a timed region.

use std::io::{self, Read};

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

/// The seed of every generated input.
pub const SEED: u64 = 0x5704_b3e4_c4a1_2026;

/// A pool of deterministic bytes.
pub struct Pool {
    bytes: Vec<u8>,
}

impl Pool {
    /// `len` bytes from the seeded generator.
    pub fn new(seed: u64, len: usize) -> Pool {
        let mut bytes = vec![0u8; len.max(1)];
        StdRng::seed_from_u64(seed).fill_bytes(&mut bytes);
        Pool { bytes }
    }

    /// A reader of the `len`-byte body of object number `id`: a window of
    /// the pool starting at an offset derived from `id`, wrapping around.
    pub fn body(&self, id: u64, len: u64) -> Body<'_> {
        Body {
            pool: &self.bytes,
            pos: (mix(id) % self.bytes.len() as u64) as usize,
            remaining: len,
        }
    }
}

/// SplitMix64 finalizer: spreads object numbers over the pool.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Streams one object body out of a [`Pool`].
pub struct Body<'a> {
    pool: &'a [u8],
    pos: usize,
    remaining: u64,
}

impl Read for Body<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut n = 0;
        while n < buf.len() && self.remaining > 0 {
            if self.pos == self.pool.len() {
                self.pos = 0;
            }
            let take = (buf.len() - n)
                .min(self.pool.len() - self.pos)
                .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
            buf[n..n + take].copy_from_slice(&self.pool[self.pos..self.pos + take]);
            self.pos += take;
            self.remaining -= take as u64;
            n += take;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_deterministic_and_sized() {
        let a = Pool::new(SEED, 1000);
        let b = Pool::new(SEED, 1000);
        let mut x = Vec::new();
        let mut y = Vec::new();
        a.body(7, 2500).read_to_end(&mut x).unwrap();
        b.body(7, 2500).read_to_end(&mut y).unwrap();
        assert_eq!(x.len(), 2500);
        assert_eq!(x, y);
        let mut z = Vec::new();
        a.body(8, 2500).read_to_end(&mut z).unwrap();
        assert_ne!(x, z);
    }
}
