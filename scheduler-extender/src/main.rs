//! koord-scheduler-extender binary: flags, logging, then the server.

use std::process::ExitCode;

use koord_scheduler_extender::cli;

fn main() -> ExitCode {
    let (cli, notes) = match cli::parse(std::env::args_os(), &koord_runtime::process_env) {
        Ok(parsed) => parsed,
        Err(error) => error.exit(),
    };
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        eprintln!("koord-scheduler-extender: a rustls crypto provider was already installed");
    }
    if let Err(error) =
        koord_runtime::init_logging(cli.log_format, koord_runtime::verbosity_filter(cli.verbosity))
    {
        eprintln!("koord-scheduler-extender: {error}");
        return ExitCode::from(2);
    }
    notes.log();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("koord-scheduler-extender: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(koord_scheduler_extender::serve::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "koord-scheduler-extender stopped");
            ExitCode::FAILURE
        }
    }
}
