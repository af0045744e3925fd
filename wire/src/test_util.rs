//! Test inputs shared by this crate's unit tests and other crates' (feature `test-util`).

/// Random strings biased towards the characters that matter to escaping.
pub fn adversarial_strings(seed: u64, count: usize) -> Vec<String> {
    use rand::{Rng as _, SeedableRng as _};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let pool: Vec<char> = (0u32..0x80)
        .filter_map(char::from_u32)
        .chain([
            '\u{80}',
            '\u{85}',
            '\u{a0}',
            'é',
            '\u{2028}',
            '\u{2029}',
            '\u{d7ff}',
            '\u{e000}',
            '\u{fffd}',
            '\u{ffff}',
            '😀',
            '\u{10ffff}',
        ])
        .collect();
    (0..count)
        .map(|_| {
            let len = rng.gen_range(0..40);
            (0..len)
                .map(|_| {
                    if rng.gen_bool(0.1) {
                        char::from_u32(rng.gen_range(0..0x11_0000)).unwrap_or('x')
                    } else {
                        pool[rng.gen_range(0..pool.len())]
                    }
                })
                .collect()
        })
        .collect()
}
