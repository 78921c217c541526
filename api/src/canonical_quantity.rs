//! The canonical text of a quantity, as a Kubernetes API server stores it.
//!
//! A real API server decodes every quantity of a built-in object (pod resources, node capacity)
//! into Go's `resource.Quantity` and encodes it back in canonical form: `1000` is stored as `1k`,
//! `1024Mi` as `1Gi`, `0.5` as `500m`. The rules, from Go's `CanonicalizeBytes`:
//!
//! - The format comes from the suffix: binary (`Ki`..`Ei`), decimal exponent (`e3`, `E-2`) or
//!   decimal SI (none, `n`..`E`).
//! - Binary values whose magnitude is at least 1024 and that are whole numbers keep a binary
//!   suffix: the largest power of 1024 that divides them (`1536Mi` stays, `1024Mi` is `1Gi`).
//!   Anything else is written as decimal SI (`1.5Ki` is `1536`, `0.5Ki` is `512`).
//! - Decimal values drop trailing zeros into an exponent that is a multiple of three (`2000` is
//!   `2k`, `1500` stays, `1000m` is `1`), spelled with an SI suffix, or `e<n>` for the
//!   decimal-exponent format.
//! - Zero is `0`; values finer than `1n` were already rounded up at parse time.

use crate::quantity::{ExactQuantity, QuantityError};

/// How Go's `resource.Quantity` remembers which notation a value was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

fn format_of(quantity: &str) -> Format {
    let number_len = quantity
        .bytes()
        .take_while(|b| b.is_ascii_digit() || matches!(b, b'.' | b'+' | b'-'))
        .count();
    let suffix = &quantity[number_len..];
    if suffix.ends_with('i') {
        Format::BinarySi
    } else if suffix.len() > 1 && suffix.starts_with(['e', 'E']) {
        Format::DecimalExponent
    } else {
        Format::DecimalSi
    }
}

/// The canonical form of a quantity string, or why it is not a quantity.
pub fn canonical_quantity(quantity: &str) -> Result<String, QuantityError> {
    let value = ExactQuantity::parse(quantity)?;
    if value.is_zero() {
        return Ok("0".to_owned());
    }
    let nanos = value.nanos();
    let format = format_of(quantity);
    const NANOS_PER_UNIT: i128 = 1_000_000_000;
    if format == Format::BinarySi
        && nanos.unsigned_abs() >= 1024 * NANOS_PER_UNIT as u128
        && nanos % NANOS_PER_UNIT == 0
    {
        let mut amount = nanos / NANOS_PER_UNIT;
        let mut power = 0;
        while amount % 1024 == 0 && power < 6 {
            amount /= 1024;
            power += 1;
        }
        let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
        return Ok(format!("{amount}{suffix}"));
    }
    // Decimal: nanos × 10^-9, trailing zeros moved into the exponent, which then steps down to
    // a multiple of three.
    let mut amount = nanos;
    let mut exponent: i32 = -9;
    while amount % 10 == 0 {
        amount /= 10;
        exponent += 1;
    }
    let excess = exponent.rem_euclid(3);
    amount *= 10i128.pow(excess.unsigned_abs());
    exponent -= excess;
    let suffix = match format {
        Format::DecimalExponent if exponent == 0 => String::new(),
        Format::DecimalExponent => format!("e{exponent}"),
        _ => match exponent {
            -9 => "n".to_owned(),
            -6 => "u".to_owned(),
            -3 => "m".to_owned(),
            0 => String::new(),
            3 => "k".to_owned(),
            6 => "M".to_owned(),
            9 => "G".to_owned(),
            12 => "T".to_owned(),
            15 => "P".to_owned(),
            18 => "E".to_owned(),
            other => format!("e{other}"),
        },
    };
    Ok(format!("{amount}{suffix}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms_match_a_real_api_server() {
        // (sent, stored by Kubernetes): decimal, binary, exponent and fractional forms.
        for (sent, stored) in [
            ("1000", "1k"),
            ("2000", "2k"),
            ("1500", "1500"),
            ("1000m", "1"),
            ("100m", "100m"),
            ("0.5", "500m"),
            ("1.5", "1500m"),
            ("0", "0"),
            ("0Mi", "0"),
            ("2000000", "2M"),
            ("1024", "1024"),
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("1.5Ki", "1536"),
            ("0.5Ki", "512"),
            ("100Ki", "100Ki"),
            ("-1Ki", "-1Ki"),
            ("-1000", "-1k"),
            ("1e3", "1e3"),
            ("1.5e3", "1500"),
            ("1E6", "1e6"),
            ("12e2", "1200"),
            ("1E", "1E"),
            ("0.1m", "100u"),
            ("1n", "1n"),
            ("0.0000000001", "1n"),
            ("+5", "5"),
        ] {
            assert_eq!(canonical_quantity(sent).as_deref(), Ok(stored), "{sent}");
        }
    }

    #[test]
    fn non_quantities_are_errors() {
        for bad in ["", "abc", "1x", "1.2.3", "Mi"] {
            assert!(canonical_quantity(bad).is_err(), "{bad}");
        }
    }
}
