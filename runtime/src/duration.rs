//! Durations on the command line: Go's notation (see [`koord_api::duration`]) plus, because the
//! flags always took them, a bare whole number as seconds. Every duration flag of every binary
//! uses [`parse_duration`] or [`parse_interval`] as its clap `value_parser`, so a value the Helm
//! chart renders is a value the binary starts with.

use std::time::Duration;

pub use koord_api::duration::DurationError;
use koord_api::duration::parse_go_duration;

/// A Go duration (`1m30s`, `500ms`, `1.5h`) or a bare whole number of seconds (`60`).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let input = text.trim();
    let digits = input.strip_prefix('+').unwrap_or(input);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return digits
            .parse()
            .map(Duration::from_secs)
            .map_err(|_| DurationError::Overflow(input.to_owned()));
    }
    parse_go_duration(input)
}

/// [`parse_duration`] that also refuses zero, for intervals and periods (a zero tick would spin).
pub fn parse_interval(text: &str) -> Result<Duration, DurationError> {
    let duration = parse_duration(text)?;
    if duration.is_zero() {
        return Err(DurationError::Zero(text.trim().to_owned()));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_take_go_durations_and_bare_seconds() {
        let cases: &[(&str, Duration)] = &[
            ("30", Duration::from_secs(30)),
            ("+60", Duration::from_secs(60)),
            ("0", Duration::ZERO),
            ("1m30s", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("2h", Duration::from_secs(7200)),
            ("1.5h", Duration::from_secs(5400)),
            ("300us", Duration::from_micros(300)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), Ok(*want), "{text}");
        }
    }

    #[test]
    fn refuses_with_the_grammar_s_reasons() {
        let cases: &[(&str, &str)] = &[
            ("", "empty duration (use e.g. 30s, 1m30s, 500ms, 2h)"),
            ("-30", "invalid duration \"-30\": must not be negative"),
            (
                "1.5",
                "invalid duration \"1.5\": a number is missing its unit (ns, us, ms, s, m or h)",
            ),
            (
                "5d",
                "invalid duration \"5d\": unknown unit \"d\" (use ns, us, ms, s, m or h)",
            ),
            (
                "99999999999999999999",
                "invalid duration \"99999999999999999999\": too long",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text).unwrap_err().to_string(), *want, "{text}");
        }
    }

    #[test]
    fn intervals_must_be_positive() {
        assert_eq!(parse_interval("50ms"), Ok(Duration::from_millis(50)));
        for zero in ["0", "0s", "0ms"] {
            assert_eq!(
                parse_interval(zero).unwrap_err().to_string(),
                format!("invalid duration {zero:?}: an interval must be longer than zero")
            );
        }
    }
}
