//! Go duration strings (`metav1.Duration`, e.g. `15s`, `1m30s`, `1.5h`), as
//! Go's `time.ParseDuration` reads them: an optional sign, then one or more
//! decimal numbers (with an optional fraction) each followed by a unit
//! (`ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`, `h`); `0` alone needs no unit.
//!
//! No maintained crate reads exactly this grammar (`humantime` accepts a
//! different one: spaces, `sec`, `days`; no fractions), so it is here, small
//! and tested against Go's documented examples.

const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),  // U+00B5 micro sign
    ("\u{3bc}s", 1_000), // U+03BC Greek small letter mu
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses `s` into nanoseconds (negative allowed, as in Go).
///
/// # Errors
/// Go's messages: `time: invalid duration "…"`, `time: missing unit in
/// duration "…"`, `time: unknown unit "…" in duration "…"`.
pub(crate) fn parse_go_duration(s: &str) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration {s:?}");
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    // |result| may reach 1 << 63 only when negative.
    let limit: u128 = if neg { 1 << 63 } else { (1 << 63) - 1 };
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &after_dot[..frac_len];
            rest = &after_dot[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(invalid());
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        let unit_text = &rest[..unit_len];
        rest = &rest[unit_len..];
        if unit_text.is_empty() {
            return Err(format!("time: missing unit in duration {s:?}"));
        }
        let Some(&(_, unit)) = UNITS.iter().find(|(u, _)| *u == unit_text) else {
            return Err(format!(
                "time: unknown unit {unit_text:?} in duration {s:?}"
            ));
        };
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| invalid())?
        };
        let mut value = int.checked_mul(unit).ok_or_else(invalid)?;
        if !frac_part.is_empty() {
            // Go keeps the fraction's digits while they fit and scales once.
            let digits: String = frac_part.chars().take(18).collect();
            let frac: u128 = digits.parse().map_err(|_| invalid())?;
            let scale = 10u128.pow(u32::try_from(digits.len()).map_err(|_| invalid())?);
            value += frac * unit / scale;
        }
        total = total.checked_add(value).ok_or_else(invalid)?;
        if total > limit {
            return Err(invalid());
        }
    }
    let total = i128::try_from(total).map_err(|_| invalid())?;
    i64::try_from(if neg { -total } else { total }).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: i64 = 1_000_000_000;

    #[test]
    fn reads_go_examples() {
        for (text, nanos) in [
            ("0", 0),
            ("15s", 15 * SEC),
            ("-2s", -2 * SEC),
            ("+5s", 5 * SEC),
            ("1.5h", 5400 * SEC),
            ("2h45m", (2 * 3600 + 45 * 60) * SEC),
            ("1m30s", 90 * SEC),
            ("300ms", 300_000_000),
            ("1us", 1_000),
            ("1\u{b5}s", 1_000),
            ("1\u{3bc}s", 1_000),
            ("10ns", 10),
            (".5s", SEC / 2),
            ("1.s", SEC),
            ("1h1m1s1ms1us1ns", 3_661_001_001_001),
            ("9223372036854775807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
        ] {
            assert_eq!(parse_go_duration(text), Ok(nanos), "{text}");
        }
    }

    #[test]
    fn rejects_what_go_rejects_with_its_messages() {
        for (text, msg) in [
            ("", r#"time: invalid duration """#),
            ("-", r#"time: invalid duration "-""#),
            (".s", r#"time: invalid duration ".s""#),
            ("s", r#"time: invalid duration "s""#),
            ("15", r#"time: missing unit in duration "15""#),
            ("1h5", r#"time: missing unit in duration "1h5""#),
            ("15 s", r#"time: unknown unit " s" in duration "15 s""#),
            ("3d", r#"time: unknown unit "d" in duration "3d""#),
            (
                "9223372036854775808ns",
                r#"time: invalid duration "9223372036854775808ns""#,
            ),
            ("3000000h", r#"time: invalid duration "3000000h""#),
        ] {
            assert_eq!(parse_go_duration(text), Err(msg.to_owned()), "{text}");
        }
    }
}
