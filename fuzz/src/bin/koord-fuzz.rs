//! The AFL++ driver: `koord-fuzz <target>` fuzzes one target in persistent mode. Built only
//! with the `afl` feature through `cargo afl build` (see scripts/fuzz.sh).

use koord_fuzz::Target;

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = Target::from_name(&name) else {
        let names: Vec<&str> = Target::ALL.iter().map(|t| t.name()).collect();
        eprintln!("usage: koord-fuzz <target> (one of: {})", names.join(", "));
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| {
        target.run(data);
    });
}
