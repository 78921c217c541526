//! koord-webhook binary: flags, logging, then the server or an offline command.

use std::process::ExitCode;

use koord_runtime::StartupNotes;
use koord_webhook::cli::{self, Command, OutputFormat};
use koord_webhook::offline;

fn main() -> ExitCode {
    let (cli, notes) = match cli::parse(std::env::args_os(), &koord_runtime::process_env) {
        Ok(parsed) => parsed,
        Err(error) => error.exit(),
    };
    match cli.command {
        Some(Command::Mutate(args)) => {
            let result = offline::read_input(&args.file)
                .and_then(|text| offline::run_mutate(&text, args.seed, &args.namespace));
            match result.and_then(|value| {
                serde_json::to_string_pretty(&value)
                    .map_err(|error| offline::OfflineError::Input(error.to_string()))
            }) {
                Ok(json) => match koord_runtime::print_stdout(&json) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(error) => {
                        eprintln!("koord-webhook mutate: cannot write the output: {error}");
                        ExitCode::from(2)
                    }
                },
                Err(error) => {
                    eprintln!("koord-webhook mutate: {error}");
                    ExitCode::from(error.exit_code())
                }
            }
        }
        Some(Command::Validate(args)) => {
            let result = offline::read_input(&args.file)
                .and_then(|text| offline::run_validate(&text, &args.config_namespace, &args.slo_config_name));
            match result {
                Ok(violations) => {
                    // JSON always prints the array (`[]` when valid), so scripts can parse the
                    // output whatever the exit code; text prints nothing when valid.
                    if args.output == OutputFormat::Json || !violations.is_empty() {
                        let output = offline::format_violations(&violations, args.output);
                        if let Err(error) = koord_runtime::print_stdout(&output) {
                            eprintln!("koord-webhook validate: cannot write the output: {error}");
                        }
                    }
                    if violations.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    }
                }
                Err(error) => {
                    eprintln!("koord-webhook validate: {error}");
                    ExitCode::from(2)
                }
            }
        }
        None => serve(cli.server, &notes),
    }
}

fn serve(args: koord_webhook::cli::ServerArgs, notes: &StartupNotes) -> ExitCode {
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        eprintln!("koord-webhook: a rustls crypto provider was already installed");
    }
    if let Err(error) =
        koord_runtime::init_logging(args.log_format, koord_runtime::verbosity_filter(args.verbosity))
    {
        eprintln!("koord-webhook: {error}");
        return ExitCode::from(2);
    }
    notes.log();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("koord-webhook: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(koord_webhook::serve::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "koord-webhook stopped");
            ExitCode::FAILURE
        }
    }
}
