//! Go's `time.ParseDuration`, ported byte for byte, for `@every <duration>`.
//!
//! robfig/cron hands the text after `@every ` to the Go standard library, so
//! what Kubernetes accepts there is exactly Go's grammar: `[-+]` then one or
//! more `<number><unit>` groups, decimals allowed, units `ns us µs μs ms s m h`,
//! and a bare `0`. Overflow rules (including an unsigned wrap-around Go
//! tolerates) are reproduced so that acceptance matches Go on every input.

use thiserror::Error;

/// Why a duration was rejected; the messages follow Go's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    /// Not Go duration syntax, or too large for a 64-bit nanosecond count.
    #[error("invalid duration {0:?}")]
    Invalid(String),
    /// A number without a unit, such as `90`.
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    /// A unit Go does not know, such as `1d`.
    #[error("unknown unit {unit:?} in duration {text:?}")]
    UnknownUnit { unit: String, text: String },
}

const TOP: u64 = 1 << 63;

fn unit_nanos(unit: &[u8]) -> Option<u64> {
    Some(match unit {
        b"ns" => 1,
        // "µs" (U+00B5) and "μs" (U+03BC), as UTF-8.
        b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => 1_000,
        b"ms" => 1_000_000,
        b"s" => 1_000_000_000,
        b"m" => 60_000_000_000,
        b"h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parses `text` as Go's `time.ParseDuration` does, returning nanoseconds.
pub fn parse_go_duration(text: &str) -> Result<i64, DurationError> {
    let invalid = || DurationError::Invalid(text.to_owned());
    let mut s = text.as_bytes();
    let mut neg = false;
    if let Some(&c) = s.first()
        && (c == b'-' || c == b'+')
    {
        neg = c == b'-';
        s = &s[1..];
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(invalid());
        }
        let before = s.len();
        let (whole, rest) = leading_int(s).ok_or_else(invalid)?;
        s = rest;
        let pre = before != s.len();
        let (mut frac, mut scale, mut post) = (0u64, 1f64, false);
        if s.first() == Some(&b'.') {
            s = &s[1..];
            let before = s.len();
            let (f, sc, rest) = leading_fraction(s);
            (frac, scale, s) = (f, sc, rest);
            post = before != s.len();
        }
        if !pre && !post {
            return Err(invalid());
        }
        let unit_len = s
            .iter()
            .position(|&c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if unit_len == 0 {
            return Err(DurationError::MissingUnit(text.to_owned()));
        }
        let unit = &s[..unit_len];
        s = &s[unit_len..];
        let Some(unit) = unit_nanos(unit) else {
            return Err(DurationError::UnknownUnit {
                unit: String::from_utf8_lossy(unit).into_owned(),
                text: text.to_owned(),
            });
        };
        if whole > TOP / unit {
            return Err(invalid());
        }
        let mut v = whole * unit;
        if frac > 0 {
            // Go converts through float64 here; the same IEEE operations give the same result.
            v += (frac as f64 * (unit as f64 / scale)) as u64;
            if v > TOP {
                return Err(invalid());
            }
        }
        // Go's uint64 addition wraps silently; both terms are at most 2^63.
        total = total.wrapping_add(v);
        if total > TOP {
            return Err(invalid());
        }
    }
    if neg {
        return Ok((total as i64).wrapping_neg());
    }
    if total > TOP - 1 {
        return Err(invalid());
    }
    Ok(total as i64)
}

fn leading_int(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut x: u64 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if x > TOP / 10 {
            return None;
        }
        x = x * 10 + u64::from(s[i] - b'0');
        if x > TOP {
            return None;
        }
        i += 1;
    }
    Some((x, &s[i..]))
}

fn leading_fraction(s: &[u8]) -> (u64, f64, &[u8]) {
    let (mut x, mut scale, mut overflow) = (0u64, 1f64, false);
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        let c = s[i];
        i += 1;
        if overflow {
            continue;
        }
        if x > (TOP - 1) / 10 {
            overflow = true;
            continue;
        }
        let y = x * 10 + u64::from(c - b'0');
        if y > TOP {
            overflow = true;
            continue;
        }
        x = y;
        scale *= 10.0;
    }
    (x, scale, &s[i..])
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn accepts_go_syntax() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("+0", 0),
            ("-0", 0),
            ("5s", 5 * S),
            ("1h30m", 5400 * S),
            ("1.5h", 5400 * S),
            (".5s", S / 2),
            ("5.s", 5 * S),
            ("1500ms", 1500 * S / 1000),
            ("-1h", -3600 * S),
            ("1µs", 1000),
            ("1μs", 1000),
            ("1h1h", 7200 * S),
            ("0.000000001s", 1),
            ("9223372036854775807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("2562047h47m16.854775807s", i64::MAX),
        ];
        for &(text, want) in cases {
            assert_eq!(parse_go_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        for text in [
            "",
            "+",
            "-",
            "1",
            "1d",
            ".",
            ".s",
            "s",
            "1 h",
            " 1h",
            "1h ",
            "1.2.3s",
            "1e3s",
            "9223372036854775808ns",
            "2562048h",
            "1hh",
            "--1h",
            "0x10s",
        ] {
            assert!(
                parse_go_duration(text).is_err(),
                "{text:?} should be rejected"
            );
        }
    }

    #[test]
    fn names_the_problem() {
        assert_eq!(
            parse_go_duration("1d").unwrap_err().to_string(),
            r#"unknown unit "d" in duration "1d""#
        );
        assert_eq!(
            parse_go_duration("90").unwrap_err().to_string(),
            r#"missing unit in duration "90""#
        );
    }
}
