//! Randomness from the operating system, without a PRNG crate in the Lambda build.
//!
//! Owns: [`fill`] (AES-GCM IVs), [`below`] (a uniform choice among `n`, for the
//! restore suffix and the transient-error jitter). Nothing here needs to be
//! reproducible; chaos and the benches use their own seeded generators in `hk`.

/// Fill `buf` with random bytes from the operating system.
pub fn fill(buf: &mut [u8]) {
    getrandom::getrandom(buf).expect("the operating system's random source is available");
}

/// A uniform random number in `0..n` (`n > 0`), by rejection so no value is favoured.
pub fn below(n: u32) -> u32 {
    assert!(n > 0, "below(0)");
    let zone = u32::MAX - (u32::MAX % n);
    loop {
        let mut b = [0u8; 4];
        fill(&mut b);
        let v = u32::from_le_bytes(b);
        if v < zone {
            return v % n;
        }
    }
}
