//! The resctrl filesystem: support detection, the optional mount, the tree's facts, the class
//! groups' `schemata` and `tasks`.
//!
//! Support needs both the CPU (`/proc/cpuinfo` flags `cat_l3` or `mba`; `rdt_a` on Intel) and a
//! resctrl mount at the configured root (`/proc/mounts`, type `resctrl`). koordlet mounts
//! resctrl itself only when allowed (`--mount-resctrl`); otherwise a missing mount turns the
//! feature off. Every path is below the root given, so tests run on a fake tree.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use koordlet_core::resctrl::{
    CacheInfo, CpuVendor, MbInfo, ResctrlFacts, ResctrlGroup, Schemata, SchemataLine,
};

use super::confine::{WriteMode, open_for_write};
use super::{ParseError, SystemError, SystemRoots, read_text};

/// The resctrl features `/proc/cpuinfo` reports (first CPU's `flags` and `vendor_id`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RdtFlags {
    /// `rdt_a`: Intel RDT allocation.
    pub rdt_a: bool,
    /// `cat_l3`: L3 cache allocation.
    pub cat_l3: bool,
    /// `cdp_l3`: L3 code/data prioritization.
    pub cdp_l3: bool,
    /// `mba`: memory bandwidth allocation.
    pub mba: bool,
}

impl RdtFlags {
    /// Whether the CPU can allocate anything resctrl controls.
    pub fn any_allocation(self) -> bool {
        self.cat_l3 || self.mba
    }
}

/// Parses `/proc/cpuinfo`: the vendor and the resctrl flags of the first processor.
pub fn parse_cpuinfo(text: &str) -> (CpuVendor, RdtFlags) {
    let mut vendor = CpuVendor::Unknown;
    let mut flags = RdtFlags::default();
    let mut seen_flags = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim() {
            "vendor_id" if vendor == CpuVendor::Unknown => vendor = CpuVendor::from_vendor_id(value),
            "flags" if !seen_flags => {
                seen_flags = true;
                for f in value.split_whitespace() {
                    match f {
                        "rdt_a" => flags.rdt_a = true,
                        "cat_l3" => flags.cat_l3 = true,
                        "cdp_l3" => flags.cdp_l3 = true,
                        "mba" => flags.mba = true,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    (vendor, flags)
}

/// Whether `/proc/mounts` text has a resctrl mount at `root`; `Some(options)` if so.
pub fn resctrl_mount<'a>(mounts: &'a str, root: &Path) -> Option<&'a str> {
    mounts.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // `then`, not `then_some`: the options field is read only once the line has four fields.
        (f.len() >= 4 && f[2] == "resctrl" && Path::new(f[1]) == root).then(|| f[3])
    })
}

/// Why resctrl is off on this node (logged once at start).
#[derive(Debug, thiserror::Error)]
pub enum ResctrlUnsupported {
    /// The CPU has neither cache nor bandwidth allocation.
    #[error("the CPU reports no cat_l3 or mba flag in {0}")]
    NoCpuSupport(PathBuf),
    /// Not mounted and koordlet may not mount it.
    #[error("resctrl is not mounted at {0} (koordlet mounts it only with --mount-resctrl)")]
    NotMounted(PathBuf),
    /// Mounting failed.
    #[error("mounting resctrl at {path}: {source}")]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A proc file or the tree could not be read.
    #[error(transparent)]
    System(#[from] SystemError),
}

/// Checks support and the mount (mounting when `mount_allowed`); returns the tree and vendor.
pub fn detect(
    roots: &SystemRoots,
    mount_allowed: bool,
) -> Result<(ResctrlFs, CpuVendor), ResctrlUnsupported> {
    let cpuinfo_path = roots.proc_file("cpuinfo");
    let (vendor, flags) = parse_cpuinfo(&read_text(&cpuinfo_path)?);
    if !flags.any_allocation() {
        return Err(ResctrlUnsupported::NoCpuSupport(cpuinfo_path));
    }
    let mounts = read_text(&roots.proc_file("mounts"))?;
    if resctrl_mount(&mounts, &roots.resctrl).is_none() {
        if !mount_allowed {
            return Err(ResctrlUnsupported::NotMounted(roots.resctrl.clone()));
        }
        mount(&roots.resctrl)?;
    }
    let fs = ResctrlFs::new(&roots.resctrl);
    fs.read_facts(vendor)?;
    Ok((fs, vendor))
}

fn mount(path: &Path) -> Result<(), ResctrlUnsupported> {
    let err = |source: std::io::Error| ResctrlUnsupported::Mount {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(path).map_err(err)?;
    rustix::mount::mount(
        "resctrl",
        path,
        "resctrl",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .map_err(|e| err(e.into()))
}

/// A resctrl tree at a root (the real `/sys/fs/resctrl` or a fake one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResctrlFs {
    root: PathBuf,
}

fn parse_err(path: &Path, e: ParseError) -> SystemError {
    SystemError::parse(path, e)
}

fn read_number(path: &Path) -> Result<u64, SystemError> {
    let text = read_text(path)?;
    text.trim().parse().map_err(|_| {
        parse_err(
            path,
            ParseError::new("resctrl info", format!("not a number: {:?}", text.trim())),
        )
    })
}

impl ResctrlFs {
    /// The tree at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A group's directory.
    pub fn group_dir(&self, group: ResctrlGroup) -> PathBuf {
        self.root.join(group.name())
    }

    /// Reads the root `schemata` and the `info` files the decision needs. The root `schemata`
    /// must exist; `info/L3` (or `info/L3CODE` with CDP) and `info/MB` are read when present.
    pub fn read_facts(&self, vendor: CpuVendor) -> Result<ResctrlFacts, SystemError> {
        let schemata_path = self.root.join("schemata");
        let root = Schemata::parse(&read_text(&schemata_path)?).map_err(|e| parse_err(&schemata_path, e))?;
        let info = self.root.join("info");
        let l3 = ["L3", "L3CODE"]
            .iter()
            .map(|r| info.join(r))
            .find(|d| d.join("cbm_mask").is_file())
            .map(|dir| -> Result<CacheInfo, SystemError> {
                let mask_path = dir.join("cbm_mask");
                let text = read_text(&mask_path)?;
                let cbm_mask = u64::from_str_radix(text.trim(), 16).map_err(|_| {
                    parse_err(
                        &mask_path,
                        ParseError::new("cbm_mask", format!("not hex: {:?}", text.trim())),
                    )
                })?;
                let min_path = dir.join("min_cbm_bits");
                let min_cbm_bits = if min_path.is_file() {
                    u32::try_from(read_number(&min_path)?).unwrap_or(u32::MAX)
                } else {
                    1
                };
                Ok(CacheInfo {
                    cbm_mask,
                    min_cbm_bits,
                })
            })
            .transpose()?;
        let mb_dir = info.join("MB");
        let mb = if mb_dir.is_dir() {
            let opt = |name: &str, default: u64| {
                let p = mb_dir.join(name);
                if p.is_file() { read_number(&p) } else { Ok(default) }
            };
            Some(MbInfo {
                min_bandwidth: opt("min_bandwidth", 0)?,
                bandwidth_gran: opt("bandwidth_gran", 1)?,
            })
        } else {
            None
        };
        Ok(ResctrlFacts { root, l3, mb, vendor })
    }

    /// Creates the group (mode 0755) if missing; true when it was created.
    pub fn ensure_group(&self, group: ResctrlGroup) -> Result<bool, SystemError> {
        let dir = self.group_dir(group);
        if dir.is_dir() {
            return Ok(false);
        }
        std::fs::create_dir(&dir).map_err(|source| SystemError::Io { path: dir, source })?;
        Ok(true)
    }

    /// A group's `schemata`, parsed.
    pub fn group_schemata(&self, group: ResctrlGroup) -> Result<Schemata, SystemError> {
        let path = self.group_dir(group).join("schemata");
        Schemata::parse(&read_text(&path)?).map_err(|e| parse_err(&path, e))
    }

    /// Writes one line to a group's `schemata` (the kernel leaves the other resources alone).
    pub fn write_line(&self, group: ResctrlGroup, line: &SchemataLine) -> Result<(), SystemError> {
        let path = self.group_dir(group).join("schemata");
        write_file(&self.root, &path, format!("{line}\n").as_bytes())
    }

    /// The task ids in a group.
    pub fn group_tasks(&self, group: ResctrlGroup) -> Result<BTreeSet<u32>, SystemError> {
        let path = self.group_dir(group).join("tasks");
        parse_ids(&path, &read_text(&path)?)
    }

    /// Moves one task into a group (one id per write, as the kernel reports one error per
    /// write). A task that exited meanwhile (`ESRCH`) is not an error: `Ok(false)`.
    pub fn add_task(&self, group: ResctrlGroup, tid: u32) -> Result<bool, SystemError> {
        let path = self.group_dir(group).join("tasks");
        let mut file = open_for_write(&self.root, &path, WriteMode::Append)?;
        match file.write_all(format!("{tid}\n").as_bytes()) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
            Err(source) => Err(SystemError::Io { path, source }),
        }
    }
}

fn write_file(root: &Path, path: &Path, bytes: &[u8]) -> Result<(), SystemError> {
    // Truncating is what `echo line > schemata` does; the kernel ignores it, a fake tree needs it.
    let mut file = open_for_write(root, path, WriteMode::Truncate)?;
    file.write_all(bytes).map_err(|source| SystemError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses a list of task ids, one per line (`tasks`, `cgroup.threads`).
pub fn parse_ids(path: &Path, text: &str) -> Result<BTreeSet<u32>, SystemError> {
    text.split_whitespace()
        .map(|t| {
            t.parse().map_err(|_| {
                parse_err(
                    path,
                    ParseError::new("task list", format!("not a task id: {t:?}")),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Fuzz finding: a mount line with fewer than four fields indexed past its end.
    #[test]
    fn short_mount_lines_are_skipped_not_a_panic() {
        let root = Path::new("/sys/fs/resctrl");
        for mounts in ["x", "a b", "resctrl /sys/fs/resctrl resctrl", "\n\n"] {
            assert_eq!(resctrl_mount(mounts, root), None, "{mounts:?}");
        }
        let mounts = "a\nresctrl /sys/fs/resctrl resctrl rw,relatime 0 0\n";
        assert_eq!(resctrl_mount(mounts, root), Some("rw,relatime"));
    }

    #[test]
    fn resctrl_cpuinfo_flags_and_mounts() {
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu rdt_a cat_l3 cdp_l3 mba\n\n\
                    processor\t: 1\nvendor_id\t: GenuineIntel\nflags\t\t: fpu\n";
        let (vendor, flags) = parse_cpuinfo(text);
        assert_eq!(vendor, CpuVendor::Intel);
        assert!(flags.rdt_a && flags.cat_l3 && flags.cdp_l3 && flags.mba);
        let (vendor, flags) = parse_cpuinfo("vendor_id : AuthenticAMD\nflags : fpu rdtscp\n");
        assert_eq!(vendor, CpuVendor::Amd);
        assert!(!flags.any_allocation());
        let mounts = "sysfs /sys sysfs rw 0 0\nresctrl /sys/fs/resctrl resctrl rw,cdp 0 0\n";
        assert_eq!(
            resctrl_mount(mounts, Path::new("/sys/fs/resctrl")),
            Some("rw,cdp")
        );
        assert_eq!(resctrl_mount(mounts, Path::new("/host/resctrl")), None);
        assert!(parse_ids(Path::new("t"), "1\n22\n").unwrap().contains(&22));
        assert!(parse_ids(Path::new("t"), "1\nx\n").is_err());
    }
}
