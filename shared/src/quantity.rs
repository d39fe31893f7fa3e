//! Kubernetes resource quantities (`"100m"`, `"32Gi"`, `"1.5"`, `"2e3"`).
//!
//! `k8s-openapi`'s `Quantity` is only the string; the API server's parser
//! (`k8s.io/apimachinery/pkg/api/resource`) is what gives it a value. We mirror
//! its two readings used by the scheduler:
//! - [`milli_value`]: `Quantity.MilliValue()`, the value times 1000 rounded up
//!   (cpu in millicores);
//! - [`value`]: `Quantity.Value()`, the value rounded up to an integer
//!   (memory and ephemeral-storage in bytes, extended resources, pod counts).
//!
//! Accepted forms: an optional sign, decimal digits with an optional fraction,
//! then one suffix: binary SI (`Ki Mi Gi Ti Pi Ei`), decimal SI
//! (`n u m "" k M G T P E`) or a decimal exponent (`e3`, `E-2`).

use std::fmt;

/// Why a quantity string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The string is not in Kubernetes quantity syntax.
    #[error("invalid quantity {0:?}")]
    Syntax(String),
    /// The value does not fit in a signed 64-bit integer in the requested unit.
    #[error("quantity {0:?} is out of range")]
    Overflow(String),
    /// A negative amount where only non-negative ones make sense (requests,
    /// capacities).
    #[error("quantity {0:?} must not be negative")]
    Negative(String),
    /// A total of quantities that are each in range does not fit in a
    /// signed 64-bit integer (names the total).
    #[error("{0} is out of range (the sum exceeds 2^63-1 in its unit)")]
    SumOverflow(String),
}

/// A parsed quantity: `mantissa * 10^exp10 * 2^exp2`, exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Parsed {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

fn parse(s: &str) -> Result<Parsed, QuantityError> {
    let err = || QuantityError::Syntax(s.to_owned());
    let bytes = s.trim().as_bytes();
    if bytes.is_empty() {
        return Err(err());
    }
    let mut i = 0;
    let mut negative = false;
    if bytes[0] == b'+' || bytes[0] == b'-' {
        negative = bytes[0] == b'-';
        i = 1;
    }
    let mut mantissa: u128 = 0;
    let mut exp10: i32 = 0;
    let mut digits = 0usize;
    let mut seen_dot = false;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_digit() {
            digits += 1;
            // Keep at most 30 significant digits; further digits only round up.
            if mantissa < 10u128.pow(30) {
                mantissa = mantissa * 10 + u128::from(b - b'0');
                if seen_dot {
                    exp10 -= 1;
                }
            } else if !seen_dot {
                exp10 += 1;
            } else if b != b'0' {
                // A dropped non-zero fraction digit: bump so rounding up stays correct.
                mantissa += 1;
            }
        } else if b == b'.' && !seen_dot {
            seen_dot = true;
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return Err(err());
    }
    let suffix = &s.trim()[i..];
    let (e10, e2) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        other if other.starts_with(['e', 'E']) && other.len() > 1 => {
            let e: i32 = other[1..].parse().map_err(|_| err())?;
            if !(-100..=100).contains(&e) {
                return Err(err());
            }
            (e, 0)
        }
        _ => return Err(err()),
    };
    Ok(Parsed {
        negative,
        mantissa,
        exp10: exp10 + e10,
        exp2: e2,
    })
}

/// `ceil(parsed * 10^scale)` as i64 (rounding away from zero like apimachinery).
fn scaled(s: &str, scale: i32) -> Result<i64, QuantityError> {
    let p = parse(s)?;
    let overflow = || QuantityError::Overflow(s.to_owned());
    if p.mantissa == 0 {
        return Ok(0);
    }
    let mut num: u128 = p.mantissa;
    let mut den: u128 = 1;
    let e10 = p.exp10 + scale;
    if e10 >= 0 {
        num = num
            .checked_mul(
                10u128
                    .checked_pow(e10.unsigned_abs())
                    .ok_or_else(overflow)?,
            )
            .ok_or_else(overflow)?;
    } else {
        den = 10u128
            .checked_pow(e10.unsigned_abs())
            .ok_or_else(overflow)?;
    }
    num = num.checked_mul(1u128 << p.exp2).ok_or_else(overflow)?;
    let v = num.div_ceil(den);
    let v = i64::try_from(v).map_err(|_| overflow())?;
    Ok(if p.negative { -v } else { v })
}

/// The quantity times 1000, rounded up: cpu in millicores (`"1.5"` → 1500,
/// `"100m"` → 100, `"1u"` → 1).
///
/// # Errors
/// [`QuantityError`] on bad syntax or a value beyond `i64`.
pub fn milli_value(s: &str) -> Result<i64, QuantityError> {
    scaled(s, 3)
}

/// The quantity rounded up to an integer: bytes for memory (`"500Mi"` →
/// 524288000), counts for `pods` and extended resources.
///
/// # Errors
/// [`QuantityError`] on bad syntax or a value beyond `i64`.
pub fn value(s: &str) -> Result<i64, QuantityError> {
    scaled(s, 0)
}

/// Formats bytes the way people read them (`"1.5 GiB"`), for reports.
pub struct HumanBytes(pub i64);

impl fmt::Display for HumanBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
        #[allow(clippy::cast_precision_loss)]
        let mut v = self.0 as f64;
        let mut u = 0;
        while v.abs() >= 1024.0 && u + 1 < UNITS.len() {
            v /= 1024.0;
            u += 1;
        }
        write!(f, "{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_quantities_become_millicores_rounded_up() {
        assert_eq!(milli_value("100m").unwrap(), 100);
        assert_eq!(milli_value("1").unwrap(), 1000);
        assert_eq!(milli_value("1.5").unwrap(), 1500);
        assert_eq!(milli_value("0.0001").unwrap(), 1);
        assert_eq!(milli_value("1u").unwrap(), 1);
        assert_eq!(milli_value("2e3").unwrap(), 2_000_000);
        assert_eq!(milli_value("12000m").unwrap(), 12_000);
        assert_eq!(milli_value("-1").unwrap(), -1000);
    }

    #[test]
    fn memory_quantities_become_bytes() {
        assert_eq!(value("500Mi").unwrap(), 500 * 1024 * 1024);
        assert_eq!(value("32Gi").unwrap(), 32 * 1024 * 1024 * 1024);
        assert_eq!(value("1k").unwrap(), 1000);
        assert_eq!(value("1.5Ki").unwrap(), 1536);
        assert_eq!(value("129M").unwrap(), 129_000_000);
        assert_eq!(value("1E").unwrap(), 1_000_000_000_000_000_000);
        assert_eq!(value("0.5").unwrap(), 1, "Value() rounds up");
        assert_eq!(value("110").unwrap(), 110);
    }

    #[test]
    fn bad_quantities_are_errors_not_panics() {
        for bad in ["", "abc", "1x", "Mi", "1.2.3", "1e", "--1", "1 Gi"] {
            assert!(
                matches!(value(bad), Err(QuantityError::Syntax(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(value("16Ei"), Err(QuantityError::Overflow(_))));
        assert!(matches!(
            milli_value("10E"),
            Err(QuantityError::Overflow(_))
        ));
    }

    #[test]
    fn human_bytes_reads_well() {
        assert_eq!(HumanBytes(1536).to_string(), "1.5 KiB");
        assert_eq!(HumanBytes(10).to_string(), "10.0 B");
    }
}
