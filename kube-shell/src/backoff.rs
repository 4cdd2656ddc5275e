//! Exponential back-off after a failed controller round: doubles from [`MIN`] to [`MAX`], back
//! to zero after a success.

use std::time::Duration;

/// The first retry's delay.
pub const MIN: Duration = Duration::from_millis(100);
/// The longest delay: an API server that is back is noticed within this.
pub const MAX: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backoff {
    delay: Duration,
}

impl Backoff {
    /// After a failure: the delay before the next try.
    pub fn fail(&mut self) -> Duration {
        self.delay = (self.delay * 2).clamp(MIN, MAX);
        self.delay
    }

    /// After a success: the next failure starts again at [`MIN`].
    pub fn succeed(&mut self) {
        self.delay = Duration::ZERO;
    }

    /// Whether the last round failed.
    pub fn is_waiting(&self) -> bool {
        !self.delay.is_zero()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_bound_and_resets_on_success() {
        let mut b = Backoff::default();
        assert!(!b.is_waiting());
        let delays: Vec<_> = (0..9).map(|_| b.fail()).collect();
        assert_eq!(delays[0], MIN);
        assert_eq!(delays[1], MIN * 2);
        assert_eq!(*delays.last().unwrap_or(&Duration::ZERO), MAX);
        assert!(delays.windows(2).all(|w| w[0] <= w[1]));
        b.succeed();
        assert!(!b.is_waiting());
        assert_eq!(b.fail(), MIN);
    }
}
