//! Syntax checks for the two string formats the ConfigMap borrows from Go: Kubernetes
//! quantities (`10G`, `500Mi`) and Go durations (`5m`, `1h30m`). Only validity is decided here;
//! quantity arithmetic lives with the quantity type.

/// Whether `s` is a Kubernetes quantity (`<signedNumber><suffix>`) that is not negative.
pub(crate) fn is_non_negative_quantity(s: &str) -> bool {
    let s = s.trim();
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let Some((digits_end, any_nonzero)) = number_prefix(rest) else {
        return false;
    };
    let suffix = &rest[digits_end..];
    let suffix_ok = match suffix {
        "" | "m" | "k" | "M" | "G" | "T" | "P" | "E" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
        _ => {
            let exp = suffix.strip_prefix('e').or_else(|| suffix.strip_prefix('E'));
            exp.is_some_and(|e| {
                let e = e.strip_prefix(['+', '-']).unwrap_or(e);
                !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
            })
        }
    };
    suffix_ok && !(negative && any_nonzero)
}

/// Length of the leading `digits[.digits]` and whether any digit is non-zero.
fn number_prefix(s: &str) -> Option<(usize, bool)> {
    let mut end = 0;
    let mut digits = 0;
    let mut nonzero = false;
    let mut dot = false;
    for (i, c) in s.char_indices() {
        match c {
            '0'..='9' => {
                digits += 1;
                nonzero |= c != '0';
                end = i + 1;
            }
            '.' if !dot => {
                dot = true;
                end = i + 1;
            }
            _ => break,
        }
    }
    (digits > 0).then_some((end, nonzero))
}

/// Seconds of a Go duration (`time.ParseDuration`: `300ms`, `1.5h`, `1h30m`); None if invalid.
pub(crate) fn go_duration_seconds(s: &str) -> Option<f64> {
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(0.0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let (len, _) = number_prefix(rest)?;
        let value: f64 = rest[..len].parse().ok()?;
        rest = &rest[len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Some(if negative { -total } else { total })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        for ok in [
            "0", "10G", "500Mi", "1.5", ".5", "5.", "1e3", "1E-2", "+3k", "100m", "-0", "50M",
        ] {
            assert!(is_non_negative_quantity(ok), "{ok}");
        }
        for bad in ["", "abc", "10Gb", "-1", "-1Gi", "1e", "1.2.3", "Gi", "10 G"] {
            assert!(!is_non_negative_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(go_duration_seconds("5m"), Some(300.0));
        assert_eq!(go_duration_seconds("1h30m"), Some(5400.0));
        assert_eq!(go_duration_seconds("1.5s"), Some(1.5));
        assert_eq!(go_duration_seconds("300ms"), Some(0.3));
        assert_eq!(go_duration_seconds("0"), Some(0.0));
        assert_eq!(go_duration_seconds("-5m"), Some(-300.0));
        for bad in ["", "5", "5x", "m", "1h30", "five minutes"] {
            assert_eq!(go_duration_seconds(bad), None, "{bad}");
        }
    }
}
