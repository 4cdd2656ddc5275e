//! Stable hashes for seeded draws: the same on every machine, build and Rust release (std's
//! hasher promises none of that), and no hash map's order enters them. The core's one draw is
//! MultiKueue's race (`ClusterChoice::Race`); the simulator draws its failures, tenants and
//! urgent jobs with the same two.

/// FNV-1a over a string's bytes.
pub fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// SplitMix64's finaliser: a bijection on `u64` that spreads every bit of its input over the
/// output, so inputs that differ in one bit (a cluster's index) give unrelated outputs.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned: a change here would change every seeded report (the simulator's too).
    #[test]
    fn the_hashes_are_the_published_ones() {
        // FNV-1a's published test vectors (the offset basis for the empty string).
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a("foobar"), 0x8594_4171_f739_67e8);
        // SplitMix64 seeded with 1234567: its first output is `mix` of the seed plus the
        // golden gamma (the reference implementation's first value).
        assert_eq!(mix(1_234_567_u64.wrapping_add(0x9E37_79B9_7F4A_7C15)), 6_457_827_717_110_365_317);
    }
}
