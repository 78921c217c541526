//! Durations in Go's notation, the one grammar for every duration koordinator-rs reads.
//!
//! Kubernetes users write durations the way Go's `time.ParseDuration` reads them (`1m30s`,
//! `500ms`, `1.5h`): in the slo-controller-config (`metricAggregatePolicy.durations`), in the
//! Helm chart's values and on every binary's command line. One parser keeps a value that one
//! place accepts from being refused by another (a chart value that renders but crash-loops a pod).
//! The grammar is Go's: a sequence of decimal numbers, each with an optional fraction and a unit
//! `ns`, `us`, `µs`, `ms`, `s`, `m`, `h`, or `0` alone. Negative durations are refused: nothing
//! in the configuration means "in the past". Command-line flags also take a bare whole number as
//! seconds (`koord_runtime::parse_duration`).

use std::time::Duration;

use thiserror::Error;

/// Why a duration was refused; the message quotes the input and shows the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    /// Nothing was given.
    #[error("empty duration (use e.g. 30s, 1m30s, 500ms, 2h)")]
    Empty,
    /// A leading `-`.
    #[error("invalid duration {0:?}: must not be negative")]
    Negative(String),
    /// A number without a unit inside a longer duration (`1m30`).
    #[error("invalid duration {0:?}: a number is missing its unit (ns, us, ms, s, m or h)")]
    MissingUnit(String),
    /// A unit that is not one of Go's.
    #[error("invalid duration {input:?}: unknown unit {unit:?} (use ns, us, ms, s, m or h)")]
    UnknownUnit {
        /// The whole input.
        input: String,
        /// The unit as written.
        unit: String,
    },
    /// Something where a number was expected (`m30s`, `1..5s`).
    #[error("invalid duration {0:?}: expected a number like 30s, 1m30s, 500ms or 1.5h")]
    BadNumber(String),
    /// Zero where only a positive duration makes sense (an interval).
    #[error("invalid duration {0:?}: an interval must be longer than zero")]
    Zero(String),
    /// More than `u64::MAX` nanoseconds (about 584 years).
    #[error("invalid duration {0:?}: too long")]
    Overflow(String),
}

/// Parses `text` as a Go duration (`time.ParseDuration`), refusing negative ones.
pub fn parse_go_duration(text: &str) -> Result<Duration, DurationError> {
    let input = text.trim();
    if input.is_empty() {
        return Err(DurationError::Empty);
    }
    let body = match input.as_bytes()[0] {
        b'-' => return Err(DurationError::Negative(input.to_owned())),
        b'+' => &input[1..],
        _ => input,
    };
    if body == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = body;
    let mut total: u128 = 0;
    if rest.is_empty() {
        return Err(DurationError::BadNumber(input.to_owned()));
    }
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(DurationError::BadNumber(input.to_owned()));
        }
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(input.to_owned()));
        }
        let nanos_per_unit: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(DurationError::UnknownUnit {
                    input: input.to_owned(),
                    unit: unit.to_owned(),
                });
            }
        };
        let overflow = || DurationError::Overflow(input.to_owned());
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| overflow())?
        };
        // Twenty fraction digits are more than nanoseconds need; further digits are dropped.
        let mut fraction_nanos: u128 = 0;
        let mut scale: u128 = 1;
        for digit in fraction.bytes().take(20) {
            fraction_nanos = fraction_nanos * 10 + u128::from(digit - b'0');
            scale *= 10;
        }
        let term = whole
            .checked_mul(nanos_per_unit)
            .and_then(|w| w.checked_add(fraction_nanos * nanos_per_unit / scale))
            .ok_or_else(overflow)?;
        total = total.checked_add(term).ok_or_else(overflow)?;
        rest = next;
    }
    let nanos = u64::try_from(total).map_err(|_| DurationError::Overflow(input.to_owned()))?;
    Ok(Duration::from_nanos(nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn accepts_go_forms() {
        let cases: &[(&str, Duration)] = &[
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("60s", Duration::from_secs(60)),
            ("1m30s", Duration::from_secs(90)),
            ("500ms", ms(500)),
            ("2h", Duration::from_secs(7200)),
            ("1.5h", Duration::from_secs(5400)),
            ("300us", Duration::from_micros(300)),
            ("300µs", Duration::from_micros(300)),
            ("300μs", Duration::from_micros(300)),
            ("42ns", Duration::from_nanos(42)),
            ("1h2m3s4ms5us6ns", Duration::new(3723, 4_005_006)),
            (".5s", ms(500)),
            ("1.s", Duration::from_secs(1)),
            ("+5s", Duration::from_secs(5)),
            ("2h45m", Duration::from_secs(9900)),
            ("8760h", Duration::from_secs(8760 * 3600)),
            ("0.000000001s", Duration::from_nanos(1)),
            ("1.0000000019s", Duration::new(1, 1)),
            (" 30s ", Duration::from_secs(30)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_go_duration(text), Ok(*want), "{text}");
        }
    }

    #[test]
    fn refuses_with_a_reason() {
        let cases: &[(&str, &str)] = &[
            ("", "empty duration (use e.g. 30s, 1m30s, 500ms, 2h)"),
            ("  ", "empty duration (use e.g. 30s, 1m30s, 500ms, 2h)"),
            ("-1s", "invalid duration \"-1s\": must not be negative"),
            (
                "1m30",
                "invalid duration \"1m30\": a number is missing its unit (ns, us, ms, s, m or h)",
            ),
            (
                "1.5",
                "invalid duration \"1.5\": a number is missing its unit (ns, us, ms, s, m or h)",
            ),
            (
                "5d",
                "invalid duration \"5d\": unknown unit \"d\" (use ns, us, ms, s, m or h)",
            ),
            (
                "10 s",
                "invalid duration \"10 s\": unknown unit \" s\" (use ns, us, ms, s, m or h)",
            ),
            (
                "m30s",
                "invalid duration \"m30s\": expected a number like 30s, 1m30s, 500ms or 1.5h",
            ),
            (
                "1..5s",
                "invalid duration \"1..5s\": expected a number like 30s, 1m30s, 500ms or 1.5h",
            ),
            (
                "+",
                "invalid duration \"+\": expected a number like 30s, 1m30s, 500ms or 1.5h",
            ),
            (
                ".s",
                "invalid duration \".s\": expected a number like 30s, 1m30s, 500ms or 1.5h",
            ),
            (
                "99999999999999999999h",
                "invalid duration \"99999999999999999999h\": too long",
            ),
            ("6000000h", "invalid duration \"6000000h\": too long"),
            (
                "30",
                "invalid duration \"30\": a number is missing its unit (ns, us, ms, s, m or h)",
            ),
        ];
        for (text, want) in cases {
            match parse_go_duration(text) {
                Err(err) => assert_eq!(err.to_string(), *want, "{text}"),
                Ok(d) => panic!("{text:?} parsed as {d:?}"),
            }
        }
    }
}
