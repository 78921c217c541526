//! Kubernetes resource quantities as exact integers.
//!
//! The scheduler and the workload convention compare quantities such as `500m`, `4k`, `3456Mi` or
//! `1e3`; floating point would make `0.1 + 0.2` CPUs unequal to `300m`, so everything is kept in
//! milli-units (`i128`), the finest unit a Kubernetes quantity is rounded to.

use thiserror::Error;

/// Why a quantity string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuantityError {
    /// The string is empty or not `<number><suffix>`.
    #[error("invalid quantity {0:?}: expected <number><suffix>, e.g. 500m, 2, 4Gi, 1e3")]
    Syntax(String),
    /// The suffix is not one Kubernetes knows.
    #[error("invalid quantity {0:?}: unknown suffix {1:?}")]
    Suffix(String, String),
    /// The value does not fit in 128 bits of milli-units.
    #[error("quantity {0:?} is too large")]
    Overflow(String),
}

/// Parses a quantity into milli-units, rounding a finer fraction up as Kubernetes does
/// (`1n` CPU is `1m`). Negative quantities are accepted (`-1`), as the API allows them.
pub fn parse_milli(text: &str) -> Result<i128, QuantityError> {
    let syntax = || QuantityError::Syntax(text.to_string());
    let overflow = || QuantityError::Overflow(text.to_string());
    let trimmed = text.trim();
    let (negative, body) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        Some(_) => (false, trimmed),
        None => return Err(syntax()),
    };
    let number_len = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(number_len);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(syntax());
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let mut mantissa: i128 = 0;
    for digit in int_part.bytes().chain(frac_part.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(i128::from(digit - b'0')))
            .ok_or_else(overflow)?;
    }
    let frac_digits = i32::try_from(frac_part.len()).map_err(|_| overflow())?;
    // value = mantissa * 10^exp10 * binary
    let (exp10, binary): (i32, i128) = match suffix {
        "" => (0, 1),
        "n" => (-9, 1),
        "u" => (-6, 1),
        "m" => (-3, 1),
        "k" => (3, 1),
        "M" => (6, 1),
        "G" => (9, 1),
        "T" => (12, 1),
        "P" => (15, 1),
        "E" => (18, 1),
        "Ki" => (0, 1 << 10),
        "Mi" => (0, 1 << 20),
        "Gi" => (0, 1 << 30),
        "Ti" => (0, 1 << 40),
        "Pi" => (0, 1 << 50),
        "Ei" => (0, 1 << 60),
        s if s.starts_with(['e', 'E']) => {
            let exp: i32 = s[1..]
                .parse()
                .map_err(|_| QuantityError::Suffix(text.to_string(), s.to_string()))?;
            (exp, 1)
        }
        s => return Err(QuantityError::Suffix(text.to_string(), s.to_string())),
    };
    let scaled = mantissa.checked_mul(binary).ok_or_else(overflow)?;
    // milli-units: multiply by 10^(exp10 + 3 - frac_digits), rounding up when dividing.
    let shift = exp10 + 3 - frac_digits;
    let magnitude = if shift >= 0 {
        let factor = 10i128
            .checked_pow(u32::try_from(shift).map_err(|_| overflow())?)
            .ok_or_else(overflow)?;
        scaled.checked_mul(factor).ok_or_else(overflow)?
    } else {
        let divisor = 10i128.checked_pow(u32::try_from(-shift).map_err(|_| overflow())?);
        match divisor {
            Some(d) => (scaled + d - 1) / d,
            // A divisor beyond i128 leaves only the round-up of a non-zero value.
            None => i128::from(scaled > 0),
        }
    };
    Ok(if negative { -magnitude } else { magnitude })
}

/// Parses a quantity into whole units (bytes for memory), rounding up.
pub fn parse_units(text: &str) -> Result<i128, QuantityError> {
    let milli = parse_milli(text)?;
    Ok(if milli >= 0 {
        (milli + 999) / 1000
    } else {
        milli / 1000
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_suffixes_the_seeds_use() {
        assert_eq!(parse_milli("500m"), Ok(500));
        assert_eq!(parse_milli("2"), Ok(2000));
        assert_eq!(parse_milli("0.5"), Ok(500));
        assert_eq!(parse_milli("4k"), Ok(4_000_000));
        assert_eq!(parse_milli("1000"), Ok(1_000_000));
        assert_eq!(parse_units("3456Mi"), Ok(3456 * 1024 * 1024));
        assert_eq!(parse_units("4Gi"), Ok(4 << 30));
        assert_eq!(parse_units("10G"), Ok(10_000_000_000));
        assert_eq!(parse_units("1e3"), Ok(1000));
        assert_eq!(parse_units("1.5Ki"), Ok(1536));
        assert_eq!(parse_milli("1n"), Ok(1));
        assert_eq!(parse_milli("-1"), Ok(-1000));
        assert_eq!(parse_milli(" 7 "), Ok(7000));
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for bad in [
            "",
            "abc",
            "1.2.3",
            ".",
            "5Xi",
            "1e",
            "1ex",
            "-",
            "99999999999999999999999999999999999999999E",
        ] {
            assert!(parse_milli(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
