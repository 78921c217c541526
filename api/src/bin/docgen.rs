//! Writes the configuration reference to `docs/configuration.md` (or the path given as the only
//! argument). Run `cargo run -p koord-api --bin docgen` after changing a config or CRD type.

use std::path::PathBuf;
use std::process::ExitCode;

use koord_api::reference::{REFERENCE_PATH, configuration_reference};

fn main() -> ExitCode {
    let path = match std::env::args_os().nth(1) {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(REFERENCE_PATH),
    };
    let text = match configuration_reference() {
        Ok(text) => text,
        Err(err) => {
            eprintln!("docgen: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(dir) = path.parent()
        && let Err(err) = std::fs::create_dir_all(dir)
    {
        eprintln!("docgen: cannot create {}: {err}", dir.display());
        return ExitCode::FAILURE;
    }
    if let Err(err) = std::fs::write(&path, text) {
        eprintln!("docgen: cannot write {}: {err}", path.display());
        return ExitCode::FAILURE;
    }
    println!("wrote {}", path.display());
    ExitCode::SUCCESS
}
