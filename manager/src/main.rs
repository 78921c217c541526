//! The koord-manager binary: flags, logging, then [`koord_manager::run::run`] or `calc`.

use std::process::ExitCode;

use koord_manager::{
    calc,
    cli::{self, CalcArgs, Command},
    run,
};

/// `calc` exit code for bad input.
const EXIT_BAD_INPUT: u8 = 2;

fn calc_command(args: &CalcArgs) -> ExitCode {
    let input = match koord_runtime::read_file_or_stdin(&args.file) {
        Ok(input) => input,
        Err(error) => {
            eprintln!("koord-manager calc: {error}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let now = match args.now.as_deref().map(str::parse::<jiff::Timestamp>) {
        None => jiff::Timestamp::now(),
        Some(Ok(now)) => now,
        Some(Err(error)) => {
            eprintln!("koord-manager calc: --now is not an RFC 3339 time: {error}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    match calc::calc(&input, now) {
        Ok(output) => match serde_json::to_string_pretty(&output) {
            Ok(json) => match koord_runtime::print_stdout(&json) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("koord-manager calc: cannot write the output: {error}");
                    ExitCode::FAILURE
                }
            },
            Err(error) => {
                eprintln!("koord-manager calc: {error}");
                ExitCode::FAILURE
            }
        },
        Err(error) => {
            eprintln!("koord-manager calc: {}: {error}", args.file);
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (cli, notes) = match cli::parse(std::env::args_os(), &koord_runtime::process_env) {
        Ok(parsed) => parsed,
        Err(error) => error.exit(),
    };
    if let Some(Command::Calc(args)) = &cli.command {
        return Ok(calc_command(args));
    }
    koord_runtime::init_logging(
        cli.run.log_format,
        koord_runtime::verbosity_filter(cli.run.verbosity),
    )?;
    notes.log();
    let client = run::client(&cli.run).await?;
    run::run(cli.run, client, koord_runtime::shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}
