//! The plain view: every new log line, prefixed with the time since start. What a pipe, a CI
//! log or a terminal without a TTY shows.

use std::io::Write;

use super::super::{StoryError, StoryState, View};

/// Prints each log line once, as it comes.
pub struct LinePrinter<W: Write> {
    out: W,
    printed: usize,
}

impl<W: Write> LinePrinter<W> {
    /// A printer writing to `out`.
    pub fn new(out: W) -> Self {
        LinePrinter { out, printed: 0 }
    }

    /// The writer back (tests read what was printed).
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// One log line as printed.
pub fn format_line(at: std::time::Duration, text: &str) -> String {
    format!("[{:>6.1}s] {text}", at.as_secs_f64())
}

impl<W: Write> View for LinePrinter<W> {
    fn update(&mut self, state: &StoryState) -> Result<(), StoryError> {
        for entry in state.log.iter().skip(self.printed) {
            writeln!(self.out, "{}", format_line(entry.at, &entry.text)).map_err(StoryError::Terminal)?;
        }
        self.printed = state.log.len();
        self.out.flush().map_err(StoryError::Terminal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_each_line_once() {
        let mut state = StoryState::new(&["n".into()], std::time::Duration::from_secs(30));
        state.log("one");
        let mut printer = LinePrinter::new(Vec::new());
        assert!(printer.update(&state).is_ok());
        state.elapsed = std::time::Duration::from_millis(1500);
        state.log("two");
        assert!(printer.update(&state).is_ok());
        let text = String::from_utf8(printer.into_inner()).unwrap_or_default();
        assert_eq!(text, "[   0.0s] one\n[   1.5s] two\n");
    }
}
