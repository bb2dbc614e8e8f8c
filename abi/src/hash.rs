//! FNV-1a, 64-bit (Fowler–Noll–Vo; offset basis `0xcbf29ce484222325`, prime `0x100000001b3`,
//! IETF draft-eastlake-fnv). One definition for every fingerprint in the project: the source
//! hash in the metadata (`source.hash`), kverify's tensor checksums and its per-gate seeds.
//! Not cryptographic: it detects accidents (a changed source, a mutated input), not attacks.

/// Offset basis of 64-bit FNV-1a.
const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// Prime of 64-bit FNV-1a.
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// An incremental FNV-1a hasher: feeding bytes in pieces gives the hash of their concatenation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(OFFSET)
    }
}

impl Fnv1a {
    /// A hasher over no bytes yet.
    pub fn new() -> Fnv1a {
        Fnv1a::default()
    }

    /// Feeds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) -> &mut Fnv1a {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(PRIME);
        }
        self
    }

    /// The hash of everything fed so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// FNV-1a 64 of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    Fnv1a::new().write(bytes).finish()
}

/// FNV-1a 64 of `bytes` as 16 lowercase hex digits (the metadata's `source.hash` format).
pub fn fnv1a64_hex(bytes: &[u8]) -> String {
    format!("{:016x}", fnv1a64(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // Test vectors of draft-eastlake-fnv (FNV-1a 64).
        assert_eq!(fnv1a64_hex(b""), "cbf29ce484222325");
        assert_eq!(fnv1a64_hex(b"a"), "af63dc4c8601ec8c");
        assert_eq!(fnv1a64_hex(b"foobar"), "85944171f73967e8");
    }

    #[test]
    fn incremental_equals_one_shot() {
        assert_eq!(Fnv1a::new().write(b"foo").write(b"bar").finish(), fnv1a64(b"foobar"));
    }
}
