//! Syntax checks for the string formats the ConfigMap borrows from Go: Kubernetes quantities
//! (`10G`, `500Mi`). Only validity is decided here; quantity arithmetic lives with the quantity
//! type, durations with [`crate::duration`].

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
}
