//! Pressure stall information: `/proc/pressure/{cpu,memory,io}` and cgroup v2
//! `{cpu,memory,io}.pressure` share one format:
//! `some avg10=0.12 avg60=0.05 avg300=0.01 total=12345` and an optional `full ...` line.

use super::ParseError;

/// One line of a pressure file.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PsiLine {
    /// Share of the last 10 s with stalled tasks, in percent.
    pub avg10: f64,
    /// Last 60 s, percent.
    pub avg60: f64,
    /// Last 300 s, percent.
    pub avg300: f64,
    /// Cumulative stall time in µs.
    pub total_us: u64,
}

/// A parsed pressure file.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PsiStats {
    /// Some tasks stalled.
    pub some: PsiLine,
    /// All non-idle tasks stalled; `None` where the kernel has no `full` line (cpu before 5.13).
    pub full: Option<PsiLine>,
}

impl PsiStats {
    /// Parses a pressure file. The `some` line is required.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut some = None;
        let mut full = None;
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            let slot = match fields.next() {
                Some("some") => &mut some,
                Some("full") => &mut full,
                _ => continue,
            };
            *slot = Some(parse_line(fields)?);
        }
        let some = some.ok_or_else(|| ParseError::new("pressure", "no `some` line"))?;
        Ok(Self { some, full })
    }
}

/// The node-level pressure resources (`<proc>/pressure/<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodePressure {
    /// `cpu`
    Cpu,
    /// `memory`
    Memory,
    /// `io`
    Io,
}

impl PsiStats {
    /// Reads `<proc>/pressure/{cpu,memory,io}`. A kernel without PSI (no file, or
    /// `psi=0` making reads fail with EOPNOTSUPP) is [`super::SystemError::Unsupported`].
    pub fn read_node(roots: &super::SystemRoots, which: NodePressure) -> Result<Self, super::SystemError> {
        let name = match which {
            NodePressure::Cpu => "cpu",
            NodePressure::Memory => "memory",
            NodePressure::Io => "io",
        };
        let path = roots.proc.join("pressure").join(name);
        let text = match super::read_text(&path) {
            Err(super::SystemError::Io { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::Unsupported
                ) || source.raw_os_error() == Some(95) =>
            {
                return Err(super::SystemError::Unsupported {
                    resource: "pressure",
                    path: path.display().to_string(),
                });
            }
            other => other?,
        };
        Self::parse(&text).map_err(|e| super::SystemError::parse(path, e))
    }
}

fn parse_line<'a>(fields: impl Iterator<Item = &'a str>) -> Result<PsiLine, ParseError> {
    let mut line = PsiLine::default();
    let mut seen = 0u8;
    for field in fields {
        let Some((key, value)) = field.split_once('=') else {
            continue;
        };
        let avg = |v: &str| -> Result<f64, ParseError> {
            match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
                _ => Err(ParseError::new("pressure", format!("bad average {v:?}"))),
            }
        };
        match key {
            "avg10" => (line.avg10, seen) = (avg(value)?, seen | 1),
            "avg60" => (line.avg60, seen) = (avg(value)?, seen | 2),
            "avg300" => (line.avg300, seen) = (avg(value)?, seen | 4),
            "total" => {
                line.total_us = value
                    .parse()
                    .map_err(|_| ParseError::new("pressure", format!("bad total {value:?}")))?;
                seen |= 8;
            }
            _ => {}
        }
    }
    if seen != 15 {
        return Err(ParseError::new(
            "pressure",
            "line lacks avg10, avg60, avg300 or total",
        ));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_some_and_full() {
        let text = "some avg10=1.50 avg60=0.25 avg300=0.00 total=12345\nfull avg10=0.50 avg60=0.00 avg300=0.00 total=99\n";
        let psi = PsiStats::parse(text).unwrap();
        assert_eq!(psi.some.avg10, 1.5);
        assert_eq!(psi.some.total_us, 12345);
        assert_eq!(psi.full.unwrap().avg10, 0.5);
        let cpu_old = PsiStats::parse("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        assert_eq!(cpu_old.full, None);
        assert!(PsiStats::parse("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").is_err());
        assert!(PsiStats::parse("some avg10=x avg60=0.00 avg300=0.00 total=0\n").is_err());
        assert!(PsiStats::parse("some avg10=NaN avg60=0.00 avg300=0.00 total=0\n").is_err());
        assert!(PsiStats::parse("some avg10=1.0\n").is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = PsiStats::parse(&String::from_utf8_lossy(&bytes));
        }
    }
}
