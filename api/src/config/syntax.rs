//! Syntax checks for the string formats the ConfigMap borrows from Go: Kubernetes quantities
//! (`10G`, `500Mi`), read with the quantity type's grammar; durations are [`crate::duration`]'s.

use crate::quantity::ExactQuantity;

/// Whether `s` is a Kubernetes quantity (`<signedNumber><suffix>`) that is not negative, read
/// with the one quantity grammar ([`ExactQuantity`]).
pub(crate) fn is_non_negative_quantity(s: &str) -> bool {
    ExactQuantity::parse(s.trim()).is_ok_and(|q| !q.is_negative())
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
