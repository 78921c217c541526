//! Exact Kubernetes quantity arithmetic, without floating point.
//!
//! Batch allocatable, suppress budgets and eviction thresholds are all differences of
//! quantities; a float rounding error there shows up as a node that flaps between two values.
//! [`ExactQuantity`] holds a quantity as a signed number of nano-units, which is exactly the
//! precision Go's `resource.Quantity` keeps: every form the API server accepts (`500m`, `4k`,
//! `3456Mi`, `1.5Gi`, `1e3`, `-2`, `0.1m`) parses to the same value Go computes.
//!
//! Differences from Go, on purpose: a magnitude above 2^63-1 units is an error, not silently
//! capped; more than 38 significant digits (20 with a binary suffix) is an error instead of
//! being carried in a big decimal that no component could use anyway.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Nano-units in one unit.
const NANOS_PER_UNIT: i128 = 1_000_000_000;
/// Nano-units in one milli-unit.
const NANOS_PER_MILLI: i128 = 1_000_000;
/// Largest magnitude a quantity may have, in nano-units: 2^63-1 whole units, as in Go.
const MAX_NANOS: i128 = i64::MAX as i128 * NANOS_PER_UNIT;
/// Largest power of ten that fits in a u128.
const MAX_POW10_U128: u32 = 38;

/// Why a quantity string or a resource amount was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The string was empty.
    #[error("empty quantity")]
    Empty,
    /// No digits where the number should be, or stray characters.
    #[error("quantity {0:?} is not a number followed by a suffix")]
    NotANumber(String),
    /// A suffix that is none of n u m k M G T P E Ki Mi Gi Ti Pi Ei e<int> E<int>.
    #[error("quantity {quantity:?} has an unknown suffix {suffix:?}")]
    UnknownSuffix {
        /// The whole quantity.
        quantity: String,
        /// The suffix found after the number.
        suffix: String,
    },
    /// More significant digits than can be held exactly.
    #[error("quantity {0:?} has too many significant digits")]
    TooPrecise(String),
    /// The magnitude is above 2^63-1 units (or the milli value above 2^63-1 milli-units).
    #[error("quantity {0:?} is out of range (magnitude above 2^63-1)")]
    Overflow(String),
}

/// A Kubernetes quantity held exactly, as a signed number of nano-units.
///
/// Values finer than a nano-unit are rounded away from zero at parse time, as Go does
/// ("if you want some resources, you should get some resources").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExactQuantity {
    nanos: i128,
}

/// The power a suffix multiplies the number by.
enum Scale {
    /// 10^n.
    Decimal(i64),
    /// 2^n.
    Binary(u32),
}

fn parse_suffix(quantity: &str, suffix: &str) -> Result<Scale, QuantityError> {
    let scale = match suffix {
        "" => Scale::Decimal(0),
        "n" => Scale::Decimal(-9),
        "u" => Scale::Decimal(-6),
        "m" => Scale::Decimal(-3),
        "k" => Scale::Decimal(3),
        "M" => Scale::Decimal(6),
        "G" => Scale::Decimal(9),
        "T" => Scale::Decimal(12),
        "P" => Scale::Decimal(15),
        "E" => Scale::Decimal(18),
        "Ki" => Scale::Binary(10),
        "Mi" => Scale::Binary(20),
        "Gi" => Scale::Binary(30),
        "Ti" => Scale::Binary(40),
        "Pi" => Scale::Binary(50),
        "Ei" => Scale::Binary(60),
        _ => {
            let unknown = || QuantityError::UnknownSuffix {
                quantity: quantity.to_owned(),
                suffix: suffix.to_owned(),
            };
            let exponent = suffix.strip_prefix(['e', 'E']).ok_or_else(unknown)?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(unknown());
            }
            // Go parses the exponent as an int32; anything larger is out of range.
            let value: i32 = exponent
                .parse()
                .map_err(|_| QuantityError::Overflow(quantity.to_owned()))?;
            Scale::Decimal(i64::from(value))
        }
    };
    Ok(scale)
}

impl ExactQuantity {
    /// Zero.
    pub const ZERO: ExactQuantity = ExactQuantity { nanos: 0 };

    /// Parses any quantity string Kubernetes accepts.
    pub fn parse(quantity: &str) -> Result<Self, QuantityError> {
        if quantity.is_empty() {
            return Err(QuantityError::Empty);
        }
        let (negative, unsigned) = match quantity.as_bytes()[0] {
            b'-' => (true, &quantity[1..]),
            b'+' => (false, &quantity[1..]),
            _ => (false, quantity),
        };
        let int_len = unsigned.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, rest) = unsigned.split_at(int_len);
        let (frac_digits, suffix) = match rest.strip_prefix('.') {
            Some(after_dot) => {
                let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                after_dot.split_at(frac_len)
            }
            None => ("", rest),
        };
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(QuantityError::NotANumber(quantity.to_owned()));
        }
        let scale = parse_suffix(quantity, suffix)?;
        let magnitude = magnitude_nanos(quantity, int_digits, frac_digits, scale)?;
        let nanos = if negative { -magnitude } else { magnitude };
        Ok(ExactQuantity { nanos })
    }

    /// Parses a k8s-openapi [`Quantity`].
    pub fn from_k8s(quantity: &Quantity) -> Result<Self, QuantityError> {
        Self::parse(&quantity.0)
    }

    /// A quantity of `nanos` nano-units; errors when the magnitude is above 2^63-1 units.
    pub fn from_nanos(nanos: i128) -> Result<Self, QuantityError> {
        if nanos.unsigned_abs() > MAX_NANOS.unsigned_abs() {
            return Err(QuantityError::Overflow(format!("{nanos}n")));
        }
        Ok(ExactQuantity { nanos })
    }

    /// A quantity of `milli` milli-units (always representable).
    pub fn from_milli(milli: i64) -> Self {
        ExactQuantity {
            nanos: i128::from(milli) * NANOS_PER_MILLI,
        }
    }

    /// A quantity of `units` whole units (always representable).
    pub fn from_units(units: i64) -> Self {
        ExactQuantity {
            nanos: i128::from(units) * NANOS_PER_UNIT,
        }
    }

    /// The exact value in nano-units.
    pub fn nanos(self) -> i128 {
        self.nanos
    }

    /// True for zero.
    pub fn is_zero(self) -> bool {
        self.nanos == 0
    }

    /// True below zero.
    pub fn is_negative(self) -> bool {
        self.nanos < 0
    }

    /// The value in milli-units, rounded away from zero like Go's `MilliValue` (`0.1m` is 1).
    /// Errors when the result does not fit in an i64 (above about 9.2e15 units).
    pub fn milli_value(self) -> Result<i64, QuantityError> {
        let milli = div_away_from_zero(self.nanos, NANOS_PER_MILLI);
        i64::try_from(milli).map_err(|_| QuantityError::Overflow(self.to_string()))
    }

    /// The value in whole units, rounded away from zero like Go's `Value` (`1500m` is 2).
    pub fn value(self) -> i64 {
        let units = div_away_from_zero(self.nanos, NANOS_PER_UNIT);
        // |nanos| <= MAX_NANOS, so |units| <= i64::MAX; the fallback is unreachable.
        i64::try_from(units).unwrap_or(if units < 0 { i64::MIN } else { i64::MAX })
    }

    /// Sum; errors when the magnitude leaves the quantity range.
    pub fn checked_add(self, other: Self) -> Result<Self, QuantityError> {
        Self::from_nanos(self.nanos + other.nanos)
    }

    /// Difference; errors when the magnitude leaves the quantity range.
    pub fn checked_sub(self, other: Self) -> Result<Self, QuantityError> {
        Self::from_nanos(self.nanos - other.nanos)
    }

    /// The k8s-openapi form, in canonical decimal notation (see the `Display` impl).
    pub fn to_k8s(self) -> Quantity {
        Quantity(self.to_string())
    }
}

/// `value / divisor` rounded away from zero; `divisor` is positive.
fn div_away_from_zero(value: i128, divisor: i128) -> i128 {
    let quotient = value / divisor;
    if value % divisor == 0 {
        quotient
    } else if value < 0 {
        quotient - 1
    } else {
        quotient + 1
    }
}

/// Exact magnitude of `int.frac × scale` in nano-units, rounded up to a whole nano-unit.
fn magnitude_nanos(
    quantity: &str,
    int_digits: &str,
    frac_digits: &str,
    scale: Scale,
) -> Result<i128, QuantityError> {
    let too_precise = || QuantityError::TooPrecise(quantity.to_owned());
    let overflow = || QuantityError::Overflow(quantity.to_owned());

    // All digits as one integer D; the value is D × 10^(exp10 - frac_len) × 2^exp2.
    let all_digits = format!("{int_digits}{frac_digits}");
    let significant = all_digits.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    if trimmed.is_empty() {
        return Ok(0);
    }
    let trailing_zeros = significant.len() - trimmed.len();
    if trimmed.len() > MAX_POW10_U128 as usize {
        return Err(too_precise());
    }
    let digits: u128 = trimmed.parse().map_err(|_| too_precise())?;
    let (exp10, exp2) = match scale {
        Scale::Decimal(n) => (n, 0),
        Scale::Binary(n) => (0, n),
    };
    // Power of ten that turns D × 2^exp2 into nano-units. All terms are small (the string length
    // and an i32), so i64 arithmetic cannot overflow.
    let pow10 = exp10 + 9 - frac_digits.len() as i64 + trailing_zeros as i64;
    let scaled = digits
        .checked_mul(1u128 << exp2)
        .ok_or_else(|| if pow10 >= 0 { overflow() } else { too_precise() })?;
    let nanos = if pow10 >= 0 {
        let pow10 = u32::try_from(pow10).map_err(|_| overflow())?;
        if pow10 > MAX_POW10_U128 {
            return Err(overflow());
        }
        scaled.checked_mul(10u128.pow(pow10)).ok_or_else(overflow)?
    } else {
        let shift = pow10.unsigned_abs();
        if shift > u64::from(MAX_POW10_U128) {
            // scaled < 2^128 < 10^39 <= 10^shift: a positive fraction of a nano-unit, rounded up.
            1
        } else {
            let divisor = 10u128.pow(shift as u32);
            scaled / divisor + u128::from(scaled % divisor != 0)
        }
    };
    let nanos = i128::try_from(nanos).map_err(|_| overflow())?;
    if nanos > MAX_NANOS {
        return Err(overflow());
    }
    Ok(nanos)
}

impl FromStr for ExactQuantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<&Quantity> for ExactQuantity {
    type Error = QuantityError;

    fn try_from(quantity: &Quantity) -> Result<Self, Self::Error> {
        Self::from_k8s(quantity)
    }
}

/// Canonical decimal SI form, as Go writes a `DecimalSI` quantity: no fraction, the largest
/// exact suffix (`1500m`, `4k`, `3G`, `250n`). Parsing the output gives the same value back.
impl fmt::Display for ExactQuantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SUFFIXES: [&str; 10] = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let sign = if self.nanos < 0 { "-" } else { "" };
        let mut mantissa = self.nanos.unsigned_abs();
        let mut index = 0;
        while index + 1 < SUFFIXES.len() && mantissa.is_multiple_of(1000) {
            mantissa /= 1000;
            index += 1;
        }
        write!(f, "{sign}{mantissa}{}", SUFFIXES[index])
    }
}

/// A Kubernetes ResourceList: resource name to quantity, as in a pod spec or node status.
pub type ResourceList = BTreeMap<String, Quantity>;

/// A ResourceList as plain integers: `cpu` in milli-cores, every other resource in whole units
/// rounded up (bytes for memory; `batch-cpu` and `mid-cpu` already count milli-cores).
pub type ResourceAmounts = BTreeMap<String, i64>;

/// A bad entry in a ResourceList, or an amount that left the i64 range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// The quantity of a resource does not parse.
    #[error("resource {resource}: {source}")]
    Quantity {
        /// The resource name.
        resource: String,
        /// Why the quantity was rejected.
        source: QuantityError,
    },
    /// Adding or subtracting amounts of a resource overflowed.
    #[error("resource {resource}: amount out of range")]
    Overflow {
        /// The resource name.
        resource: String,
    },
}

/// The resource counted in milli-units by [`ResourceAmounts`].
pub const RESOURCE_CPU: &str = "cpu";
/// Memory, counted in bytes.
pub const RESOURCE_MEMORY: &str = "memory";

/// The integer amount of `quantity` for `resource` (milli-cores for `cpu`, else whole units).
pub fn amount_of(resource: &str, quantity: ExactQuantity) -> Result<i64, ResourceError> {
    if resource == RESOURCE_CPU {
        quantity.milli_value().map_err(|source| ResourceError::Quantity {
            resource: resource.to_owned(),
            source,
        })
    } else {
        Ok(quantity.value())
    }
}

/// Parses every entry of a ResourceList into integer amounts; the first bad entry is an error.
pub fn amounts_from_list(list: &ResourceList) -> Result<ResourceAmounts, ResourceError> {
    list.iter()
        .map(|(resource, quantity)| {
            let exact = ExactQuantity::from_k8s(quantity).map_err(|source| ResourceError::Quantity {
                resource: resource.clone(),
                source,
            })?;
            Ok((resource.clone(), amount_of(resource, exact)?))
        })
        .collect()
}

/// Turns integer amounts back into a ResourceList: `cpu` as canonical cores (`500m`, `2`),
/// everything else as a plain integer string (`25000`, `33000000000`).
pub fn amounts_to_list(amounts: &ResourceAmounts) -> ResourceList {
    amounts
        .iter()
        .map(|(resource, &amount)| {
            let quantity = if resource == RESOURCE_CPU {
                format_cpu_cores(amount)
            } else {
                format_integer(amount)
            };
            (resource.clone(), quantity)
        })
        .collect()
}

/// Per-resource sum over the union of names; errors on overflow.
pub fn sum_amounts(a: &ResourceAmounts, b: &ResourceAmounts) -> Result<ResourceAmounts, ResourceError> {
    let mut out = a.clone();
    for (resource, &amount) in b {
        let entry = out.entry(resource.clone()).or_insert(0);
        *entry = entry.checked_add(amount).ok_or_else(|| ResourceError::Overflow {
            resource: resource.clone(),
        })?;
    }
    Ok(out)
}

/// Per-resource maximum over the union of names (a missing name counts as absent, not 0).
pub fn max_amounts(a: &ResourceAmounts, b: &ResourceAmounts) -> ResourceAmounts {
    let mut out = a.clone();
    for (resource, &amount) in b {
        out.entry(resource.clone())
            .and_modify(|v| *v = (*v).max(amount))
            .or_insert(amount);
    }
    out
}

/// Per-resource `max(a - b, 0)` over the union of names, like Go's
/// `SubtractWithNonNegativeResult`; errors on overflow.
pub fn sub_amounts_floored(
    a: &ResourceAmounts,
    b: &ResourceAmounts,
) -> Result<ResourceAmounts, ResourceError> {
    let mut out = ResourceAmounts::new();
    for resource in a.keys().chain(b.keys()) {
        let left = a.get(resource).copied().unwrap_or(0);
        let right = b.get(resource).copied().unwrap_or(0);
        let diff = left.checked_sub(right).ok_or_else(|| ResourceError::Overflow {
            resource: resource.clone(),
        })?;
        out.insert(resource.clone(), diff.max(0));
    }
    Ok(out)
}

/// An integer quantity string, the form upstream writes for batch-cpu (milli-cores), mid-cpu,
/// batch-memory and other byte counts: `25000`, `33000000000`.
pub fn format_integer(amount: i64) -> Quantity {
    Quantity(amount.to_string())
}

/// Milli-cores as the integer string stored in `kubernetes.io/batch-cpu` (`25000` for 25 cores).
pub fn format_milli_cores(milli: i64) -> Quantity {
    format_integer(milli)
}

/// Bytes as an integer quantity string (`33000000000`).
pub fn format_bytes(bytes: i64) -> Quantity {
    format_integer(bytes)
}

/// Milli-cores as a canonical `cpu` quantity (`500m`, `2`, `1500m`).
pub fn format_cpu_cores(milli: i64) -> Quantity {
    ExactQuantity::from_milli(milli).to_k8s()
}

#[cfg(test)]
mod tests;
