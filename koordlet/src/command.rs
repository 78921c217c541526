//! The process entry: parses the command line and runs the agent or an offline command.

use crate::cli::Command;

/// Runs koordlet with command-line `args` (program name first); returns the process exit code.
/// In-process callers (the e2e crate) use this or [`crate::agent::run_agent`] directly.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let (args, notes) = match crate::cli::parse(args, &koord_runtime::process_env) {
        Ok(parsed) => parsed,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match args.command {
        Some(Command::Plan(plan)) => crate::plan::command::run(&plan),
        None => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            if let Err(e) = koord_runtime::init_logging(
                args.agent.log_format,
                koord_runtime::verbosity_filter(args.agent.verbosity),
            ) {
                eprintln!("koordlet: {e}");
                return 2;
            }
            notes.log();
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("koordlet: cannot start the async runtime: {e}");
                    return 1;
                }
            };
            match runtime.block_on(crate::agent::run_agent(
                args.agent,
                koord_runtime::shutdown_signal(),
            )) {
                Ok(()) => 0,
                Err(e) => {
                    tracing::error!(error = %e, "koordlet failed");
                    eprintln!("koordlet: {e}");
                    1
                }
            }
        }
    }
}
