//! Writes the CRD manifests into `charts/koordinator/crds/` (or the directory given as the
//! only argument). Run `cargo run -p koord-api --bin crdgen` after changing a CRD type.

use std::path::PathBuf;
use std::process::ExitCode;

use koord_api::crds::{CRD_DIR, crd_files};

fn main() -> ExitCode {
    let dir = match std::env::args_os().nth(1) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(CRD_DIR),
    };
    let files = match crd_files() {
        Ok(files) => files,
        Err(err) => {
            eprintln!("crdgen: cannot serialize the CRDs: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(err) = std::fs::create_dir_all(&dir) {
        eprintln!("crdgen: cannot create {}: {err}", dir.display());
        return ExitCode::FAILURE;
    }
    for file in files {
        let path = dir.join(&file.file_name);
        if let Err(err) = std::fs::write(&path, file.yaml) {
            eprintln!("crdgen: cannot write {}: {err}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
