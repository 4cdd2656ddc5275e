//! Kubernetes quantities, enough to add up pod requests for a PodGroup's `minResources` and to
//! count GPUs: parsed exactly into milli-units, printed in a canonical form.

use std::fmt;

/// A quantity in thousandths of its unit (millicores for CPU, milli-bytes for memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Milli(pub i128);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a Kubernetes quantity (e.g. 500m, 2, 1.5Gi, 1e3)")]
pub struct BadQuantity(pub String);

const SUFFIXES: [(&str, i128, i128); 15] = [
    // (suffix, numerator, denominator) of the multiplier, binary before decimal so "Ki" wins over "k".
    ("Ki", 1 << 10, 1),
    ("Mi", 1 << 20, 1),
    ("Gi", 1 << 30, 1),
    ("Ti", 1 << 40, 1),
    ("Pi", 1 << 50, 1),
    ("Ei", 1 << 60, 1),
    ("n", 1, 1_000_000_000),
    ("u", 1, 1_000_000),
    ("m", 1, 1000),
    ("k", 1000, 1),
    ("M", 1_000_000, 1),
    ("G", 1_000_000_000, 1),
    ("T", 1_000_000_000_000, 1),
    ("P", 1_000_000_000_000_000, 1),
    ("E", 1_000_000_000_000_000_000, 1),
];

impl Milli {
    pub fn parse(s: &str) -> Result<Milli, BadQuantity> {
        let bad = || BadQuantity(s.to_string());
        let t = s.trim();
        // A suffix first: "1E" is one exa, "1Ei" one exbibyte; only then "1e3" is an exponent.
        let suffix = SUFFIXES.iter().find(|(suf, _, _)| t.ends_with(suf) && t.len() > suf.len());
        let (number, num, den) = if let Some(&(suf, n, d)) = suffix {
            (&t[..t.len() - suf.len()], n, d)
        } else if let Some(idx) = t.find(['e', 'E']) {
            let exp: i32 = t[idx + 1..].parse().map_err(|_| bad())?;
            if !(-18..=18).contains(&exp) {
                return Err(bad());
            }
            let p = 10i128.pow(exp.unsigned_abs());
            if exp >= 0 { (&t[..idx], p, 1) } else { (&t[..idx], 1, p) }
        } else {
            (t, 1, 1)
        };
        let (sign, digits) = match number.strip_prefix('-') {
            Some(rest) => (-1, rest),
            None => (1, number.strip_prefix('+').unwrap_or(number)),
        };
        let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
        if whole.is_empty() && frac.is_empty()
            || !whole.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())
            || frac.len() > 18
        {
            return Err(bad());
        }
        let scale = 10i128.pow(frac.len() as u32);
        let mantissa: i128 = format!("{whole}{frac}").parse().map_err(|_| bad())?;
        // value = mantissa / scale * num / den, in milli-units, rounded up as Kubernetes does.
        let numerator = mantissa.checked_mul(num).and_then(|v| v.checked_mul(1000)).ok_or_else(bad)?;
        let denominator = scale * den;
        let value = numerator.checked_add(denominator - 1).ok_or_else(bad)? / denominator;
        Ok(Milli(sign * value))
    }

    /// Whole units, rounded up (a CPU request of 1500m counts as 2 processes' worth).
    pub fn ceil_units(self) -> i128 {
        (self.0 + 999).div_euclid(1000)
    }
}

impl std::ops::Add for Milli {
    type Output = Milli;
    fn add(self, o: Milli) -> Milli {
        Milli(self.0 + o.0)
    }
}

impl std::ops::Mul<i128> for Milli {
    type Output = Milli;
    fn mul(self, k: i128) -> Milli {
        Milli(self.0 * k)
    }
}

impl fmt::Display for Milli {
    /// Canonical form: whole numbers with the largest exact binary suffix for values of 1Ki
    /// and more, milli-units (`1500m`) otherwise when fractional.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 % 1000 != 0 {
            return write!(f, "{}m", self.0);
        }
        let units = self.0 / 1000;
        for (suf, mult) in
            [("Ei", 1i128 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)]
        {
            if units != 0 && units % mult == 0 {
                return write!(f, "{}{suf}", units / mult);
            }
        }
        write!(f, "{units}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_kubernetes_accepts() {
        assert_eq!(Milli::parse("500m"), Ok(Milli(500)));
        assert_eq!(Milli::parse("2"), Ok(Milli(2000)));
        assert_eq!(Milli::parse("1.5"), Ok(Milli(1500)));
        assert_eq!(Milli::parse("1Gi"), Ok(Milli(1000 << 30)));
        assert_eq!(Milli::parse("1k"), Ok(Milli(1_000_000)));
        assert_eq!(Milli::parse("1e3"), Ok(Milli(1_000_000)));
        assert_eq!(Milli::parse("0.5Gi"), Ok(Milli(500 << 30)));
        assert_eq!(Milli::parse("1E"), Ok(Milli(1_000_000_000_000_000_000_000)));
        assert_eq!(Milli::parse("1Ei"), Ok(Milli(1000 << 60)));
        for bad in ["", "Gi", "1.2.3", "abc", "1x", "--1"] {
            assert!(Milli::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn prints_canonically() {
        assert_eq!(Milli::parse("16Gi").map(|m| m.to_string()), Ok("16Gi".into()));
        assert_eq!((Milli::parse("8Gi").expect("q") * 2).to_string(), "16Gi");
        assert_eq!(Milli::parse("1500m").map(|m| m.to_string()), Ok("1500m".into()));
        assert_eq!(Milli::parse("4").map(|m| m.to_string()), Ok("4".into()));
        assert_eq!(Milli::parse("1500m").map(Milli::ceil_units), Ok(2));
    }
}
