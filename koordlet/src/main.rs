//! The `koordlet` binary: everything lives in the library so the e2e crate can run it in-process.

fn main() {
    std::process::exit(koordlet::run(std::env::args_os()));
}
