//! Which cgroup version is mounted where.
//!
//! Detection reads the mount table of the proc root (`self/mountinfo`, else `mounts`) and keeps
//! the cgroup mounts below the configured cgroup root; when the table says nothing about that
//! root (a fake tree in a temp dir, a container with a bind-mounted `/host-cgroup` seen under
//! another name) it falls back to looking at the directory itself: `cgroup.controllers` at the
//! root means v2, controller directories (`cpu`, `cpu,cpuacct`, `memory`, ...) mean v1.
//!
//! A cgroup2 mount next to v1 controllers (systemd's "hybrid" mode, e.g. `/sys/fs/cgroup/unified`
//! with no controllers) is reported as [`CgroupMode::Hybrid`]; every controller file is then
//! read the v1 way, and the unified mount is only used for pressure (PSI) files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{CgroupDriver, ParseError, Subsystem, SystemError, SystemRoots};

/// The cgroup version in force for controller files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupMode {
    /// Only v1 controller hierarchies.
    V1,
    /// v1 controllers plus a cgroup2 mount (systemd hybrid). Controller files are v1.
    Hybrid,
    /// The unified hierarchy at the root.
    V2,
}

/// Where each controller lives below the cgroup root. Paths are relative to the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLayout {
    /// The version in force.
    pub mode: CgroupMode,
    /// v1: controller -> directory below the root (`cpu`, or `cpu,cpuacct` when co-mounted).
    /// Empty on v2. On hybrid, [`Subsystem::Unified`] maps to the cgroup2 mount.
    pub subsystems: BTreeMap<Subsystem, PathBuf>,
    /// How the layout was found ("mountinfo", "mounts", "directory"), for the startup log line.
    pub source: &'static str,
}

impl CgroupLayout {
    /// A pure v2 layout (for tests and the offline `plan` command).
    pub fn v2() -> Self {
        Self {
            mode: CgroupMode::V2,
            subsystems: BTreeMap::new(),
            source: "given",
        }
    }

    /// A v1 layout with every controller in its own conventional directory.
    pub fn v1() -> Self {
        let subsystems = Subsystem::CONTROLLERS
            .iter()
            .map(|s| (*s, PathBuf::from(s.name())))
            .collect();
        Self {
            mode: CgroupMode::V1,
            subsystems,
            source: "given",
        }
    }

    /// The version controller files follow: hybrid hosts are v1 for every controller.
    pub fn version(&self) -> super::CgroupVersion {
        match self.mode {
            CgroupMode::V2 => super::CgroupVersion::V2,
            CgroupMode::V1 | CgroupMode::Hybrid => super::CgroupVersion::V1,
        }
    }

    /// The directory below the root that holds `subsystem`'s files; `Some("")` on v2 (the root
    /// itself), `None` when that v1 controller is not mounted.
    pub fn subsystem_dir(&self, subsystem: Subsystem) -> Option<&Path> {
        match self.mode {
            CgroupMode::V2 => Some(Path::new("")),
            CgroupMode::V1 | CgroupMode::Hybrid => self.subsystems.get(&subsystem).map(PathBuf::as_path),
        }
    }

    /// Detects the layout below `roots.cgroup`, from the mount table first, the directory second.
    pub fn detect(roots: &SystemRoots) -> Result<Self, SystemError> {
        for (file, source) in [("self/mountinfo", "mountinfo"), ("mounts", "mounts")] {
            let path = roots.proc.join(file);
            let Ok(bytes) = std::fs::read(&path) else { continue };
            let text = String::from_utf8_lossy(&bytes);
            let mounts = if source == "mountinfo" {
                parse_mountinfo(&text)
            } else {
                parse_mounts(&text)
            };
            // A table we cannot read is no evidence: fall through to the next source.
            let Ok(mounts) = mounts else {
                tracing::warn!(path = %path.display(), "unparsable mount table; trying the next source");
                continue;
            };
            if let Some(layout) = layout_from_mounts(&mounts, &roots.cgroup, source) {
                return Ok(layout);
            }
        }
        layout_from_directory(&roots.cgroup)
    }
}

/// One cgroup mount from the mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// True for `cgroup2`.
    pub unified: bool,
    /// v1 controllers named in the super options (`cpu`, `cpuacct`, `name=systemd` is dropped).
    pub controllers: Vec<String>,
}

/// Parses `/proc/<pid>/mountinfo`, keeping cgroup and cgroup2 mounts. Malformed lines are an
/// error (a truncated read would otherwise look like "no cgroups").
pub fn parse_mountinfo(text: &str) -> Result<Vec<CgroupMount>, ParseError> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let sep = fields
            .iter()
            .position(|f| *f == "-")
            .ok_or_else(|| ParseError::new("mountinfo", format!("no separator in {line:?}")))?;
        if sep < 5 || fields.len() < sep + 3 {
            return Err(ParseError::new("mountinfo", format!("short line {line:?}")));
        }
        push_cgroup_mount(&mut out, fields[4], fields[sep + 1], fields[sep + 3]);
    }
    Ok(out)
}

/// Parses `/proc/mounts` (fstab format), keeping cgroup and cgroup2 mounts.
pub fn parse_mounts(text: &str) -> Result<Vec<CgroupMount>, ParseError> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 4 {
            return Err(ParseError::new("mounts", format!("short line {line:?}")));
        }
        push_cgroup_mount(&mut out, fields[1], fields[2], fields[3]);
    }
    Ok(out)
}

fn push_cgroup_mount(out: &mut Vec<CgroupMount>, mount_point: &str, fstype: &str, options: &str) {
    let unified = match fstype {
        "cgroup2" => true,
        "cgroup" => false,
        _ => return,
    };
    let controllers = if unified {
        Vec::new()
    } else {
        options
            .split(',')
            .filter(|o| Subsystem::CONTROLLERS.iter().any(|s| s.name() == *o))
            .map(str::to_owned)
            .collect()
    };
    out.push(CgroupMount {
        mount_point: PathBuf::from(unescape_octal(mount_point)),
        unified,
        controllers,
    });
}

/// The mount table escapes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                let value = digits.iter().fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(byte) = u8::try_from(value) {
                    out.push(byte);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Builds the layout from the mounts at or below `root`; `None` if none are there.
pub fn layout_from_mounts(mounts: &[CgroupMount], root: &Path, source: &'static str) -> Option<CgroupLayout> {
    let root = normalize(root);
    let mut subsystems = BTreeMap::new();
    let mut unified_below = None;
    for mount in mounts {
        let point = normalize(&mount.mount_point);
        if mount.unified && point == root {
            return Some(CgroupLayout {
                mode: CgroupMode::V2,
                subsystems: BTreeMap::new(),
                source,
            });
        }
        let Ok(rel) = point.strip_prefix(&root) else {
            continue;
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        if mount.unified {
            unified_below = Some(rel.to_path_buf());
            continue;
        }
        for name in &mount.controllers {
            if let Some(sub) = Subsystem::CONTROLLERS.iter().find(|s| s.name() == name) {
                subsystems.entry(*sub).or_insert_with(|| rel.to_path_buf());
            }
        }
    }
    if subsystems.is_empty() {
        return None;
    }
    let mode = match unified_below {
        Some(unified) => {
            subsystems.insert(Subsystem::Unified, unified);
            CgroupMode::Hybrid
        }
        None => CgroupMode::V1,
    };
    Some(CgroupLayout {
        mode,
        subsystems,
        source,
    })
}

fn normalize(path: &Path) -> PathBuf {
    path.components().collect()
}

/// The directory heuristic: `cgroup.controllers` at the root is v2; otherwise every known
/// controller directory (alone or co-mounted like `cpu,cpuacct`) is a v1 hierarchy.
pub fn layout_from_directory(root: &Path) -> Result<CgroupLayout, SystemError> {
    if root.join("cgroup.controllers").is_file() {
        return Ok(CgroupLayout {
            mode: CgroupMode::V2,
            subsystems: BTreeMap::new(),
            source: "directory",
        });
    }
    let entries = std::fs::read_dir(root).map_err(|source| SystemError::Io {
        path: root.to_path_buf(),
        source,
    })?;
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    // Prefer a directory named exactly after the controller, then co-mounted names.
    names.sort_by_key(|n| n.contains(','));
    let mut subsystems = BTreeMap::new();
    let mut unified = None;
    for name in &names {
        let dir = root.join(name);
        if !dir.is_dir() {
            continue;
        }
        if dir.join("cgroup.controllers").is_file() {
            unified = Some(PathBuf::from(name));
            continue;
        }
        for part in name.split(',') {
            if let Some(sub) = Subsystem::CONTROLLERS.iter().find(|s| s.name() == part) {
                subsystems.entry(*sub).or_insert_with(|| PathBuf::from(name));
            }
        }
    }
    if subsystems.is_empty() {
        return Err(SystemError::Unsupported {
            resource: "cgroup",
            path: format!(
                "{}: neither cgroup.controllers nor v1 controller directories",
                root.display()
            ),
        });
    }
    let mode = match unified {
        Some(u) => {
            subsystems.insert(Subsystem::Unified, u);
            CgroupMode::Hybrid
        }
        None => CgroupMode::V1,
    };
    Ok(CgroupLayout {
        mode,
        subsystems,
        source: "directory",
    })
}

/// Looks for the kubepods directory below `parent` in the cpu hierarchy (the root on v2):
/// `kubepods.slice` means systemd, `kubepods` cgroupfs. `None` when neither exists yet (no
/// pod ever started); the caller then uses its flag or asks the kubelet.
pub fn detect_driver(cgroup_root: &Path, layout: &CgroupLayout, parent: &Path) -> Option<CgroupDriver> {
    let base = cgroup_root
        .join(layout.subsystem_dir(Subsystem::Cpu)?)
        .join(parent);
    if base.join("kubepods.slice").is_dir() {
        Some(CgroupDriver::Systemd)
    } else if base.join("kubepods").is_dir() {
        Some(CgroupDriver::Cgroupfs)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_detection_looks_below_the_parent() {
        let dir = tempfile::tempdir().unwrap();
        let layout = CgroupLayout::v1();
        assert_eq!(detect_driver(dir.path(), &layout, Path::new("")), None);
        std::fs::create_dir_all(dir.path().join("cpu/kubepods/burstable")).unwrap();
        assert_eq!(
            detect_driver(dir.path(), &layout, Path::new("")),
            Some(CgroupDriver::Cgroupfs)
        );
        std::fs::create_dir_all(dir.path().join("kubepods.slice")).unwrap();
        assert_eq!(
            detect_driver(dir.path(), &CgroupLayout::v2(), Path::new("")),
            Some(CgroupDriver::Systemd)
        );
    }

    const THIS_MACHINE: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn this_machine_is_hybrid_with_separate_cpu_and_cpuacct() {
        let mounts = parse_mountinfo(THIS_MACHINE).unwrap();
        let layout = layout_from_mounts(&mounts, Path::new("/sys/fs/cgroup/"), "mountinfo").unwrap();
        assert_eq!(layout.mode, CgroupMode::Hybrid);
        assert_eq!(layout.subsystem_dir(Subsystem::Cpu), Some(Path::new("cpu")));
        assert_eq!(
            layout.subsystem_dir(Subsystem::CpuAcct),
            Some(Path::new("cpuacct"))
        );
        assert_eq!(
            layout.subsystem_dir(Subsystem::Unified),
            Some(Path::new("unified"))
        );
        assert_eq!(layout.subsystem_dir(Subsystem::Blkio), None);
    }

    #[test]
    fn co_mounted_cpu_cpuacct_and_pure_v2() {
        let text = "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n\
                    cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n";
        let layout = layout_from_mounts(
            &parse_mounts(text).unwrap(),
            Path::new("/sys/fs/cgroup"),
            "mounts",
        )
        .unwrap();
        assert_eq!(layout.mode, CgroupMode::V1);
        assert_eq!(
            layout.subsystem_dir(Subsystem::Cpu),
            Some(Path::new("cpu,cpuacct"))
        );
        assert_eq!(
            layout.subsystem_dir(Subsystem::CpuAcct),
            Some(Path::new("cpu,cpuacct"))
        );

        let v2 = "29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let layout =
            layout_from_mounts(&parse_mountinfo(v2).unwrap(), Path::new("/sys/fs/cgroup"), "m").unwrap();
        assert_eq!(layout.mode, CgroupMode::V2);
        assert_eq!(layout.subsystem_dir(Subsystem::Memory), Some(Path::new("")));
        // Mounts elsewhere say nothing about this root.
        assert!(layout_from_mounts(&parse_mountinfo(v2).unwrap(), Path::new("/host-cgroup"), "m").is_none());
    }

    #[test]
    fn escaped_mount_points_and_bad_lines() {
        let text = "1 2 0:1 / /tmp/a\\040b rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            parse_mountinfo(text).unwrap()[0].mount_point,
            PathBuf::from("/tmp/a b")
        );
        assert!(parse_mountinfo("garbage line\n").is_err());
        assert!(parse_mounts("x y\n").is_err());
    }

    #[test]
    fn directory_heuristic() {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["cpu,cpuacct", "cpu", "cpuacct", "memory", "unified"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("unified/cgroup.controllers"), "").unwrap();
        let layout = layout_from_directory(dir.path()).unwrap();
        assert_eq!(layout.mode, CgroupMode::Hybrid);
        assert_eq!(layout.subsystem_dir(Subsystem::Cpu), Some(Path::new("cpu")));
        std::fs::write(dir.path().join("cgroup.controllers"), "cpu memory").unwrap();
        assert_eq!(layout_from_directory(dir.path()).unwrap().mode, CgroupMode::V2);
        let empty = tempfile::tempdir().unwrap();
        assert!(layout_from_directory(empty.path()).is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_mount_tables_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let text = String::from_utf8_lossy(&bytes);
            if let Ok(m) = parse_mountinfo(&text) { let _ = layout_from_mounts(&m, Path::new("/"), "x"); }
            if let Ok(m) = parse_mounts(&text) { let _ = layout_from_mounts(&m, Path::new("/"), "x"); }
        }
    }
}
