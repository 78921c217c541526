//! Flag values in upstream's notation, as clap `value_parser`s: Go's listen addresses (`:8080`)
//! and Go's bools (`true`, `1`, `t`, ...). They apply to environment variables too, since clap
//! runs the same parser on both.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// A listen address that is not `HOST:PORT` or `:PORT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid listen address {0:?}: use HOST:PORT (0.0.0.0:8080, [::]:8080) or :PORT")]
pub struct ListenAddrError(String);

/// `HOST:PORT`, or Go's `:PORT` meaning every interface: `:8080` is `0.0.0.0:8080`.
pub fn parse_listen_addr(text: &str) -> Result<SocketAddr, ListenAddrError> {
    let text = text.trim();
    if let Some(port) = text.strip_prefix(':') {
        return port
            .parse::<u16>()
            .map(|port| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))
            .map_err(|_| ListenAddrError(text.to_owned()));
    }
    text.parse().map_err(|_| ListenAddrError(text.to_owned()))
}

/// A bool flag value that is none of Go's spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid bool {0:?}: use true or false (also 1/0, t/f, yes/no, on/off)")]
pub struct BoolError(String);

/// Go's `strconv.ParseBool` spellings (`1`, `t`, `T`, `TRUE`, `true`, `True` and the false
/// ones), plus `yes`/`no`/`on`/`off` in any case, which our environment variables took before.
pub fn parse_go_bool(text: &str) -> Result<bool, BoolError> {
    match text.trim() {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        other => match other.to_ascii_lowercase().as_str() {
            "yes" | "on" | "y" => Ok(true),
            "no" | "off" | "n" => Ok(false),
            _ => Err(BoolError(text.to_owned())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_take_go_s_port_only_form() {
        let cases: &[(&str, &str)] = &[
            (":8080", "0.0.0.0:8080"),
            (":9316", "0.0.0.0:9316"),
            ("0.0.0.0:8000", "0.0.0.0:8000"),
            ("127.0.0.1:0", "127.0.0.1:0"),
            ("[::]:8080", "[::]:8080"),
            (" :80 ", "0.0.0.0:80"),
        ];
        for (text, want) in cases {
            assert_eq!(parse_listen_addr(text).unwrap().to_string(), *want, "{text}");
        }
        for bad in ["", ":", ":http", ":70000", "8080", "localhost:8080"] {
            assert!(parse_listen_addr(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_listen_addr(":x").unwrap_err().to_string(),
            "invalid listen address \":x\": use HOST:PORT (0.0.0.0:8080, [::]:8080) or :PORT"
        );
    }

    #[test]
    fn bools_take_go_s_spellings() {
        for yes in ["1", "t", "T", "TRUE", "true", "True", "yes", "On", "y"] {
            assert_eq!(parse_go_bool(yes), Ok(true), "{yes}");
        }
        for no in ["0", "f", "F", "FALSE", "false", "False", "no", "OFF", "n"] {
            assert_eq!(parse_go_bool(no), Ok(false), "{no}");
        }
        for bad in ["", "tRuE", "2", "enabled"] {
            assert!(parse_go_bool(bad).is_err(), "{bad}");
        }
    }
}
