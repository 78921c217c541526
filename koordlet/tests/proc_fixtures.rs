//! Tier 2: the `/proc` readers against a fake proc root, and arbitrary bytes in every proc file.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use koordlet::system::meminfo::{Meminfo, MemoryCollectPolicy};
use koordlet::system::proc_stat::{ProcStat, USER_HZ, cpu_usage_cores};
use koordlet::system::psi::{NodePressure, PsiStats};
use koordlet::system::{SystemError, SystemRoots};

fn fake_proc() -> (tempfile::TempDir, SystemRoots) {
    let dir = tempfile::tempdir().unwrap();
    let roots = SystemRoots::under(dir.path());
    std::fs::create_dir_all(roots.proc.join("pressure")).unwrap();
    (dir, roots)
}

#[test]
fn node_cpu_memory_and_pressure_from_fixtures() {
    let (_dir, roots) = fake_proc();
    std::fs::write(
        roots.proc_file("stat"),
        "cpu  1000 0 500 9000 10 0 0 0 0 0\ncpu0 1000 0 500 9000 10 0 0 0 0 0\n",
    )
    .unwrap();
    let before = ProcStat::read(&roots).unwrap();
    std::fs::write(
        roots.proc_file("stat"),
        "cpu  1150 0 550 9100 10 0 0 0 0 0\ncpu0 1150 0 550 9100 10 0 0 0 0 0\n",
    )
    .unwrap();
    let after = ProcStat::read(&roots).unwrap();
    // 200 busy ticks in 2 s at 100 Hz: one core.
    assert_eq!(
        cpu_usage_cores(&before.total, &after.total, 2.0, USER_HZ),
        Some(1.0)
    );

    std::fs::write(
        roots.proc_file("meminfo"),
        "MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 600 kB\nCached: 400 kB\n",
    )
    .unwrap();
    let info = Meminfo::read(&roots).unwrap();
    assert_eq!(
        MemoryCollectPolicy::UsageWithoutPageCache.node_usage(&info, None),
        Some(400 * 1024)
    );
    assert_eq!(
        MemoryCollectPolicy::UsageWithPageCache.node_usage(&info, None),
        Some(900 * 1024)
    );
    assert_eq!(
        MemoryCollectPolicy::UsageWithHotPageCache.node_usage(&info, Some(300 * 1024)),
        Some(600 * 1024)
    );

    std::fs::write(
        roots.proc.join("pressure/memory"),
        "some avg10=3.00 avg60=1.00 avg300=0.50 total=10\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=5\n",
    )
    .unwrap();
    let psi = PsiStats::read_node(&roots, NodePressure::Memory).unwrap();
    assert_eq!((psi.some.avg10, psi.full.map(|f| f.avg10)), (3.0, Some(1.0)));
    assert!(matches!(
        PsiStats::read_node(&roots, NodePressure::Io),
        Err(SystemError::Unsupported { .. })
    ));
}

#[test]
fn errors_name_the_file() {
    let (_dir, roots) = fake_proc();
    std::fs::write(roots.proc_file("meminfo"), "MemTotal: 1000 kB\n").unwrap();
    let err = Meminfo::read(&roots).unwrap_err().to_string();
    assert!(err.contains("meminfo") && err.contains("MemFree"), "{err}");
    assert!(matches!(ProcStat::read(&roots), Err(SystemError::Io { .. })));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn arbitrary_bytes_in_proc_files_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
        let (_dir, roots) = fake_proc();
        for file in ["stat", "meminfo", "pressure/cpu"] {
            std::fs::write(roots.proc_file(file), &bytes).unwrap();
        }
        let _ = ProcStat::read(&roots);
        if let Ok(info) = Meminfo::read(&roots) {
            for policy in [MemoryCollectPolicy::UsageWithoutPageCache, MemoryCollectPolicy::UsageWithHotPageCache, MemoryCollectPolicy::UsageWithPageCache] {
                let _ = policy.node_usage(&info, Some(u64::MAX));
            }
        }
        let _ = PsiStats::read_node(&roots, NodePressure::Cpu);
    }
}
