//! Printing the result of an offline command (`calc`, `plan`, `mutate`) to stdout.

use std::io::Write;

/// Writes `text` and a newline to stdout.
///
/// A reader that stopped reading (`koord-manager calc -f in.yaml | head`) is not an error for an
/// offline command: the broken pipe ends the output quietly instead of panicking as `println!`
/// does. Any other write error is returned so the caller can report it and exit non-zero.
pub fn print_stdout(text: &str) -> std::io::Result<()> {
    write_ignoring_broken_pipe(&mut std::io::stdout().lock(), text)
}

fn write_ignoring_broken_pipe(out: &mut impl Write, text: &str) -> std::io::Result<()> {
    let result = out
        .write_all(text.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    match result {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Closed(std::io::ErrorKind);

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(self.0.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_broken_pipe_is_not_an_error() {
        assert!(write_ignoring_broken_pipe(&mut Closed(std::io::ErrorKind::BrokenPipe), "x").is_ok());
    }

    #[test]
    fn other_write_errors_are_returned() {
        let error = write_ignoring_broken_pipe(&mut Closed(std::io::ErrorKind::StorageFull), "x");
        assert_eq!(error.map_err(|e| e.kind()), Err(std::io::ErrorKind::StorageFull));
    }

    #[test]
    fn the_text_ends_with_a_newline() {
        let mut out = Vec::new();
        write_ignoring_broken_pipe(&mut out, "{}").unwrap();
        assert_eq!(out, b"{}\n");
    }
}
