//! The node's CPU facts koord-manager needs for CPU normalization (upstream's `CPUBasicInfo`,
//! reported as the NodeResourceTopology annotation `node.koordinator.sh/cpu-basic-info`).
//!
//! - CPU model and vendor: the first processor of `/proc/cpuinfo` (`model name`, `vendor_id`).
//!   arm64 kernels print neither: there the model is `implementer <CPU implementer> part <CPU
//!   part>` (e.g. `implementer 0x41 part 0xd0c`, the codes the kernel prints, without a name
//!   table) and the vendor is the implementer code. A cpuinfo with neither form is an error:
//!   nothing is reported rather than a model that matches no `ratioModel` by accident.
//! - Hyper-threading: some core runs more than one logical CPU, from
//!   `/sys/devices/system/cpu/cpu*/topology/thread_siblings_list`; when no such file is readable,
//!   `siblings` > `cpu cores` of the first processor in cpuinfo; when neither says, off.
//! - Turbo: `/sys/devices/system/cpu/intel_pstate/no_turbo` is `0` when that file exists (intel
//!   pstate driver), else `/sys/devices/system/cpu/cpufreq/boost` is `1` (acpi-cpufreq,
//!   amd-pstate), else off. A file with anything else in it counts as absent.
//! - L3 CAT mask: resctrl's `info/L3/cbm_mask` when resctrl is mounted, as upstream.
//!
//! Parsing is pure and never panics; [`read_cpu_basic_info`] reads below the configured roots.

use std::path::Path;

use koord_api::cpu_normalization::CpuBasicInfo;

use super::{CpuSet, ParseError, SystemError, SystemRoots, read_text};

const CPUINFO: &str = "/proc/cpuinfo";

/// What the first processor of `/proc/cpuinfo` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuinfoFacts {
    /// `model name`, or the arm64 implementer/part form.
    pub model: String,
    /// `vendor_id`, or the arm64 implementer code; empty when neither is printed.
    pub vendor_id: String,
    /// `siblings`: logical CPUs per package (x86 only).
    pub siblings: Option<u32>,
    /// `cpu cores`: physical cores per package (x86 only).
    pub cpu_cores: Option<u32>,
}

impl CpuinfoFacts {
    /// Hyper-threading as cpuinfo tells it (`siblings` > `cpu cores`); `None` when either is
    /// missing.
    pub fn hyper_threading(&self) -> Option<bool> {
        Some(self.siblings? > self.cpu_cores?)
    }
}

/// Parses `/proc/cpuinfo`: the fields of its first processor block (up to the first blank
/// line). Lines without a colon and unknown keys are ignored.
pub fn parse_cpuinfo(text: &str) -> Result<CpuinfoFacts, ParseError> {
    let mut facts = CpuinfoFacts::default();
    let (mut implementer, mut part) = (None, None);
    let mut started = false;
    for line in text.lines() {
        if line.trim().is_empty() {
            if started {
                break;
            }
            continue;
        }
        started = true;
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "model name" if facts.model.is_empty() => facts.model = value.to_owned(),
            "vendor_id" if facts.vendor_id.is_empty() => facts.vendor_id = value.to_owned(),
            "siblings" => facts.siblings = value.parse().ok(),
            "cpu cores" => facts.cpu_cores = value.parse().ok(),
            "CPU implementer" => implementer = Some(value.to_owned()),
            "CPU part" => part = Some(value.to_owned()),
            _ => {}
        }
    }
    if facts.model.is_empty() {
        match (&implementer, &part) {
            (Some(i), Some(p)) if !i.is_empty() && !p.is_empty() => {
                facts.model = format!("implementer {i} part {p}");
            }
            _ => {
                return Err(ParseError::new(
                    CPUINFO,
                    "no `model name` (nor arm64 `CPU implementer` and `CPU part`) in the first processor",
                ));
            }
        }
    }
    if facts.vendor_id.is_empty()
        && let Some(i) = implementer
    {
        facts.vendor_id = i;
    }
    Ok(facts)
}

/// Whether some core runs more than one logical CPU, from the `thread_siblings_list` files'
/// contents; `None` when none of them parses (garbage counts as unreadable).
pub fn hyper_threading_from_siblings<'a>(lists: impl IntoIterator<Item = &'a str>) -> Option<bool> {
    let mut any = None;
    for text in lists {
        if let Ok(set) = CpuSet::parse(text) {
            if set.len() > 1 {
                return Some(true);
            }
            any = Some(false);
        }
    }
    any
}

/// Turbo from the two sysfs switches' contents (`None`: file absent): intel_pstate's
/// `no_turbo` wins when it holds `0` or `1`, then cpufreq's `boost`; otherwise off.
pub fn turbo_enabled(no_turbo: Option<&str>, boost: Option<&str>) -> bool {
    match no_turbo.map(str::trim) {
        Some("0") => return true,
        Some("1") => return false,
        _ => {}
    }
    boost.map(str::trim) == Some("1")
}

/// Reads a file below a root; `None` when it is absent or unreadable (the facts it would give
/// fall back as documented above).
fn read_optional(path: &Path) -> Option<String> {
    read_text(path).ok()
}

/// The `thread_siblings_list` of every `cpuN` directory below `<sys>/devices/system/cpu`.
fn read_thread_siblings(sys: &Path) -> Vec<String> {
    let dir = sys.join("devices/system/cpu");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("cpu"))
                .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| read_optional(&e.path().join("topology/thread_siblings_list")))
        .collect()
}

/// Detects the node's CPU facts below `roots` (proc for cpuinfo, sys for topology and turbo,
/// resctrl for the L3 mask). Only an unreadable or model-less `/proc/cpuinfo` is an error.
pub fn read_cpu_basic_info(roots: &SystemRoots) -> Result<CpuBasicInfo, SystemError> {
    let path = roots.proc_file("cpuinfo");
    let text = read_text(&path)?;
    let facts = parse_cpuinfo(&text).map_err(|e| SystemError::parse(&path, e))?;
    let siblings = read_thread_siblings(&roots.sys);
    let hyper_thread_enabled = hyper_threading_from_siblings(siblings.iter().map(String::as_str))
        .or_else(|| facts.hyper_threading())
        .unwrap_or(false);
    let cpu = roots.sys.join("devices/system/cpu");
    let turbo = turbo_enabled(
        read_optional(&cpu.join("intel_pstate/no_turbo")).as_deref(),
        read_optional(&cpu.join("cpufreq/boost")).as_deref(),
    );
    let cat_l3_cbm_mask = read_optional(&roots.resctrl.join("info/L3/cbm_mask"))
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_hexdigit()));
    Ok(CpuBasicInfo {
        cpu_model: facts.model,
        hyper_thread_enabled,
        turbo_enabled: turbo,
        cat_l3_cbm_mask,
        vendor_id: facts.vendor_id,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const INTEL: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n\
model name\t: Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz\nsiblings\t: 4\ncore id\t\t: 0\ncpu cores\t: 2\n\
flags\t\t: fpu vme ht\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: Other\n\n";

    const ARM: &str = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm\n\
CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\nCPU revision\t: 1\n\n\
processor\t: 1\nCPU implementer\t: 0x42\nCPU part\t: 0xd0d\n\n";

    #[test]
    fn cpuinfo_first_processor_wins() {
        let f = parse_cpuinfo(INTEL).unwrap();
        assert_eq!(f.model, "Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz");
        assert_eq!(f.vendor_id, "GenuineIntel");
        assert_eq!((f.siblings, f.cpu_cores), (Some(4), Some(2)));
        assert_eq!(f.hyper_threading(), Some(true));
    }

    #[test]
    fn arm64_cpuinfo_names_implementer_and_part() {
        let f = parse_cpuinfo(ARM).unwrap();
        assert_eq!(f.model, "implementer 0x41 part 0xd0c");
        assert_eq!(f.vendor_id, "0x41");
        assert_eq!(f.hyper_threading(), None);
    }

    #[test]
    fn cpuinfo_without_a_model_is_an_error() {
        for text in [
            "",
            "\n\n",
            "processor : 0\nvendor_id : IBM/S390\n",
            "processor : 0\nCPU implementer : 0x41\n",
            "model name :\n",
        ] {
            let err = parse_cpuinfo(text).unwrap_err();
            assert!(err.detail.contains("model name"), "{text:?}: {err:?}");
        }
        // Leading blank lines are skipped, not taken for the end of the first block.
        assert_eq!(parse_cpuinfo("\nmodel name : X\n").unwrap().model, "X");
    }

    #[test]
    fn hyper_threading_from_sibling_lists() {
        assert_eq!(hyper_threading_from_siblings(["0,2\n", "1,3\n"]), Some(true));
        assert_eq!(hyper_threading_from_siblings(["0-1\n"]), Some(true));
        assert_eq!(hyper_threading_from_siblings(["0\n", "1\n"]), Some(false));
        assert_eq!(hyper_threading_from_siblings(["garbage", "0\n"]), Some(false));
        assert_eq!(hyper_threading_from_siblings(["garbage", "9-1"]), None);
        assert_eq!(hyper_threading_from_siblings([]), None);
    }

    #[test]
    fn turbo_switches() {
        for (no_turbo, boost, want) in [
            (Some("0\n"), None, true),
            (Some("1\n"), Some("1\n"), false),
            (Some("0"), Some("0"), true),
            (None, Some("1\n"), true),
            (None, Some("0\n"), false),
            (Some("junk"), Some("1"), true),
            (Some("junk"), None, false),
            (None, None, false),
        ] {
            assert_eq!(turbo_enabled(no_turbo, boost), want, "{no_turbo:?} {boost:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let text = String::from_utf8_lossy(&bytes);
            let _ = parse_cpuinfo(&text);
            let _ = hyper_threading_from_siblings([text.as_ref()]);
            let _ = turbo_enabled(Some(&text), Some(&text));
        }
    }
}
