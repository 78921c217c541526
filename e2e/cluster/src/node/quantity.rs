//! Kubernetes resource quantities as exact integers.
//!
//! The scheduler and the workload convention compare quantities such as `500m`, `4k`, `3456Mi` or
//! `1e3`; floating point would make `0.1 + 0.2` CPUs unequal to `300m`, so everything is kept in
//! milli-units (`i128`), the finest unit a Kubernetes quantity is rounded to. The grammar is the
//! api's ([`koord_api::ExactQuantity`]), the one every component reads quantities with.

use koord_api::ExactQuantity;
pub use koord_api::QuantityError;

/// Parses a quantity into milli-units, rounding a finer fraction away from zero as Kubernetes
/// does (`1n` CPU is `1m`). Negative quantities are accepted (`-1`), as the API allows them.
pub fn parse_milli(text: &str) -> Result<i128, QuantityError> {
    let quantity = ExactQuantity::parse(text.trim())?;
    Ok(i128::from(quantity.milli_value()?))
}

/// Parses a quantity into whole units (bytes for memory), rounding away from zero.
pub fn parse_units(text: &str) -> Result<i128, QuantityError> {
    Ok(i128::from(ExactQuantity::parse(text.trim())?.value()))
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
