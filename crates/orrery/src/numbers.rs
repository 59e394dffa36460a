//! Parsers for numeric flags: every float a user types is checked where it
//! enters (issue 21), so NaN, infinities and out-of-range values get a clear
//! error naming the flag (clap adds the flag) instead of a panic (e.g.
//! `Duration::from_secs_f64(NaN)`) or NaN in the output.

fn number(s: &str) -> Result<f64, String> {
    let x: f64 = s.trim().parse().map_err(|_| format!("expected a number, got {s:?}"))?;
    if x.is_finite() { Ok(x) } else { Err(format!("expected a finite number, got {s}")) }
}

/// A finite number above 0 (durations that divide or time out, rates, scales).
pub fn positive(s: &str) -> Result<f64, String> {
    let x = number(s)?;
    if x > 0.0 { Ok(x) } else { Err(format!("expected a number above 0, got {s}")) }
}

/// A finite number of at least 0.
pub fn non_negative(s: &str) -> Result<f64, String> {
    let x = number(s)?;
    if x >= 0.0 { Ok(x) } else { Err(format!("expected a number of at least 0, got {s}")) }
}

/// Seconds from 0 to a day: a run's length or a wait that becomes a
/// `Duration` (which panics on what it cannot hold).
pub fn seconds_up_to_a_day(s: &str) -> Result<f64, String> {
    let x = non_negative(s)?;
    if x <= 86_400.0 { Ok(x) } else { Err(format!("expected seconds from 0 to 86400 (a day), got {s}")) }
}

/// A share: a finite number from 0 to 1.
pub fn fraction(s: &str) -> Result<f64, String> {
    let x = number(s)?;
    if (0.0..=1.0).contains(&x) { Ok(x) } else { Err(format!("expected a number from 0 to 1, got {s}")) }
}

/// `90s`, `15m`, `12h`, `30d` (or plain seconds) as seconds.
pub fn duration_s(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (num, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c),
        _ => (t, 's'),
    };
    let scale = match unit {
        's' => 1.0,
        'm' => 60.0,
        'h' => 3_600.0,
        'd' => 86_400.0,
        _ => return Err(format!("expected a number with s, m, h or d (like 30d), found {text:?}")),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v * scale <= 3.2e9 => Ok(v * scale),
        _ => Err(format!("expected a positive duration like 90s, 12h or 30d (at most 100 years), found {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_infinity_and_out_of_range_are_refused() {
        for bad in ["NaN", "nan", "inf", "-inf", "1e400", "abc", ""] {
            assert!(positive(bad).is_err() && non_negative(bad).is_err() && fraction(bad).is_err(), "{bad:?}");
        }
        assert_eq!(positive("2.5"), Ok(2.5));
        assert!(positive("0").is_err());
        assert!(positive("-1").is_err());
        assert_eq!(non_negative("0"), Ok(0.0));
        assert!(non_negative("-0.5").is_err());
        assert_eq!(fraction("1"), Ok(1.0));
        assert!(fraction("1.01").is_err());
        assert_eq!(positive("-1"), Err("expected a number above 0, got -1".to_string()));
        assert_eq!(
            (duration_s("90s"), duration_s("1h"), duration_s("30d"), duration_s("2")),
            (Ok(90.0), Ok(3_600.0), Ok(2_592_000.0), Ok(2.0))
        );
        assert!(duration_s("1w").is_err() && duration_s("-1h").is_err() && duration_s("NaNh").is_err());
    }
}
