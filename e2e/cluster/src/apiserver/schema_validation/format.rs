//! The string `format`s checked here: the cheap ones of the real server's list (`date-time`,
//! `date`, `uuid`, `uuid3`/`4`/`5`, `ipv4`, `ipv6`, `cidr`, `byte`). Every other format is
//! accepted unchecked, as the real server does for formats it does not know.

use std::net::IpAddr;

use base64::Engine;

/// `Some(valid)` for a format we check, `None` for one we do not.
pub fn check(format: &str, s: &str) -> Option<bool> {
    Some(match format {
        "date-time" | "datetime" => {
            s.parse::<jiff::Timestamp>().is_ok() || s.parse::<jiff::civil::DateTime>().is_ok()
        }
        "date" => s.len() == 10 && s.parse::<jiff::civil::Date>().is_ok(),
        "uuid" => uuid(s, None),
        "uuid3" => uuid(s, Some('3')),
        "uuid4" => uuid(s, Some('4')),
        "uuid5" => uuid(s, Some('5')),
        "ipv4" => s.contains('.') && s.parse::<IpAddr>().is_ok(),
        "ipv6" => s.contains(':') && s.parse::<IpAddr>().is_ok(),
        "cidr" => cidr(s),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        _ => return None,
    })
}

fn uuid(s: &str, version: Option<char>) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    let shape = groups.iter().map(|g| g.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_hexdigit()));
    shape && version.is_none_or(|v| groups.get(2).and_then(|g| g.chars().next()) == Some(v))
}

fn cidr(s: &str) -> bool {
    let Some((ip, prefix)) = s.split_once('/') else {
        return false;
    };
    let Ok(ip) = ip.parse::<IpAddr>() else {
        return false;
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    !prefix.is_empty()
        && prefix.chars().all(|c| c.is_ascii_digit())
        && prefix.parse::<u32>().is_ok_and(|p| p <= max)
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn formats() {
        for (format, good, bad) in [
            ("date-time", "2024-01-02T03:04:05Z", "yesterday"),
            ("date", "2024-01-02", "2024-1-2"),
            ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123e4567"),
            (
                "uuid4",
                "123e4567-e89b-42d3-a456-426614174000",
                "123e4567-e89b-12d3-a456-426614174000",
            ),
            ("ipv4", "10.0.0.1", "::1"),
            ("ipv6", "::1", "10.0.0.1"),
            ("cidr", "10.0.0.0/8", "10.0.0.0/33"),
            ("byte", "aGVsbG8=", "not base64!"),
        ] {
            assert_eq!(check(format, good), Some(true), "{format} {good}");
            assert_eq!(check(format, bad), Some(false), "{format} {bad}");
        }
        assert_eq!(check("k8s-short-name", "anything"), None);
    }
}
