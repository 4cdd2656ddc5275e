//! A tiny seeded generator (SplitMix64): the same seed gives the same failures on every
//! machine and every build, which `rand`'s StdRng does not promise across versions. Its hashes
//! are the core's (`scheduler_core::draw`), which MultiKueue's race draws with too.

pub use scheduler_core::draw::fnv1a;
use scheduler_core::draw::mix;

#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Exponentially distributed with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.next_f64()).ln()
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.next_f64(); // (0, 1]: ln is finite
        let v = self.next_f64();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// Log-normal with the given median and mean (mean > median > 0): σ² = 2 ln(mean / median),
    /// the fit published job-size summaries (a median and a mean) allow.
    pub fn log_normal(&mut self, median: f64, mean: f64) -> f64 {
        let sigma = (2.0 * (mean / median).ln()).max(0.0).sqrt();
        median * (sigma * self.normal()).exp()
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}
