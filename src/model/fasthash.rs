//! A fast, non-cryptographic hasher for URN-keyed maps: the decoder's
//! interner, the integrity verifier, the snapshot builder's ordering, the
//! migration core, the planner, the generator's and executor's indexes of
//! the operation's resources and the provider registry (a prior list can
//! hold 100,000 states; SipHash over every URN of it costs more than the
//! rest of the work). The keys come from the stack's own state and the
//! stack's own program, so hash flooding is not a concern here.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A hash map with [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
/// A hash set with [`FastHasher`].
pub(crate) type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;
/// A concurrent map with [`FastHasher`] (`FastDashMap::default()`).
pub(crate) type FastDashMap<K, V> = dashmap::DashMap<K, V, BuildHasherDefault<FastHasher>>;

/// The Fx hash (as in rustc): a multiply-rotate over 8-byte words.
#[derive(Clone, Copy, Default)]
pub(crate) struct FastHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // The product's low bits depend only on the inputs' low bits (the
        // first bytes of each word): keys that differ further in, as URNs
        // of one type do, would share their low bits, which pick the
        // bucket. The high bits mix every input bit; rotate them down (as
        // rustc-hash 2 does).
        self.0.rotate_left(26)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_work() {
        let mut m: FastMap<&str, usize> = FastMap::default();
        for (i, k) in ["a", "bbbbbbbbb", "bbbbbbbbc", ""].iter().enumerate() {
            m.insert(k, i);
        }
        assert_eq!(m.len(), 4);
        assert_eq!(m["bbbbbbbbc"], 2);
        let s: FastSet<usize> = (0..100).collect();
        assert!(s.contains(&99));
    }

    /// Keys that differ only past their first bytes, as the URNs of one
    /// type do, spread over the low bits a hash table indexes by: of
    /// 65,536 such keys, the low 16 bits take about as many distinct
    /// values as a random function gives (1 - 1/e, 63 %).
    #[test]
    fn urns_of_one_type_spread_over_the_low_bits() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<FastHasher>::default();
        for shape in [
            "urn:pulumi:dev::proj::sim:index:Bucket::b{}",
            "urn:pulumi:dev::proj::sim:index:Bucket::bucket-{}-x",
            "{}",
        ] {
            let low: FastSet<u64> = (0..1u64 << 16)
                .map(|i| build.hash_one(shape.replace("{}", &i.to_string())) & 0xffff)
                .collect();
            assert!(
                low.len() > 38_000,
                "{shape}: {} distinct low 16 bits of 65,536",
                low.len()
            );
        }
    }
}
