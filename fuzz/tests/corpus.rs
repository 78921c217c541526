//! Replays every committed corpus input (seeds and the regression inputs of past findings)
//! through its target, so a fixed finding stays fixed without a fuzzer installed.

use std::path::Path;

use koord_fuzz::Target;

#[test]
fn every_corpus_input_runs_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut total = 0;
    for target in Target::ALL {
        let dir = root.join(target.name());
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        entries.sort();
        assert!(!entries.is_empty(), "{target}: no corpus in {}", dir.display());
        for path in entries {
            let data = std::fs::read(&path).unwrap();
            target.run(&data);
            total += 1;
        }
    }
    println!("replayed {total} corpus inputs");
}

#[test]
fn target_names_round_trip() {
    for target in Target::ALL {
        assert_eq!(Target::from_name(target.name()), Some(target));
    }
    assert_eq!(Target::from_name("nope"), None);
}
