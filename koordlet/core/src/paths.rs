//! Kubernetes cgroup directories: QoS level, pod level and container level, for the cgroupfs
//! and the systemd driver.
//!
//! | level | cgroupfs | systemd |
//! |---|---|---|
//! | kubepods | `kubepods` | `kubepods.slice` |
//! | Burstable | `kubepods/burstable` | `kubepods.slice/kubepods-burstable.slice` |
//! | BestEffort | `kubepods/besteffort` | `kubepods.slice/kubepods-besteffort.slice` |
//! | Guaranteed | `kubepods` | `kubepods.slice` |
//! | pod | `<qos>/pod<uid>` | `<qos>/kubepods[-<qos>]-pod<uid with - as _>.slice` |
//! | container | `<pod>/<id>` | `<pod>/cri-containerd-<id>.scope`, `docker-<id>.scope`, `crio-<id>.scope` |
//!
//! Everything is relative to the cgroup root (and, on v1, to the controller directory), below
//! an optional parent (kubelet's `--cgroup-root`). UIDs and IDs are validated so a hostile pod
//! can never make a path leave the tree.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use koord_api::KubeQoSClass;
use koord_api::nodeslo::{CgroupBaseType, HostApplicationSpec};

use crate::error::NameError;

/// The kernel's `NAME_MAX`: the longest directory name a cgroup can have.
pub const MAX_CGROUP_NAME: usize = 255;
/// The kernel's `PATH_MAX`: the longest relative cgroup path accepted.
pub const MAX_CGROUP_PATH: usize = 4096;

/// A cgroup directory relative to the cgroup root (and to the controller directory on v1),
/// e.g. `kubepods/besteffort/pod<uid>`. Always relative and free of `..`, so it cannot leave
/// the tree. The default is the root cgroup.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CgroupDir(PathBuf);

impl CgroupDir {
    /// Validates a relative cgroup path (`""` is the root cgroup): no `..`, no leading `/`, no
    /// NUL byte, no component longer than the kernel's `NAME_MAX` and no path longer than
    /// [`MAX_CGROUP_PATH`], so whatever is accepted names a directory below the root the kernel
    /// could actually have.
    pub fn new(path: impl AsRef<Path>) -> Result<Self, NameError> {
        let path = path.as_ref();
        let bad = |reason| NameError {
            what: "cgroup path",
            value: path.display().to_string().chars().take(80).collect(),
            reason,
        };
        if path.as_os_str().len() > MAX_CGROUP_PATH {
            return Err(bad("longer than 4096 bytes"));
        }
        let mut clean = PathBuf::new();
        for component in path.components() {
            match component {
                Component::Normal(part) => {
                    if part.as_encoded_bytes().contains(&0) {
                        return Err(bad("contains a NUL byte"));
                    }
                    if part.len() > MAX_CGROUP_NAME {
                        return Err(bad("has a component longer than 255 bytes"));
                    }
                    clean.push(part);
                }
                Component::CurDir => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(bad("must be relative and must not contain `..`"));
                }
            }
        }
        Ok(Self(clean))
    }

    /// The root cgroup.
    pub fn root() -> Self {
        Self(PathBuf::new())
    }

    /// For paths built from validated parts only.
    pub(crate) fn trusted(path: PathBuf) -> Self {
        Self(path)
    }

    #[allow(dead_code)]
    pub(crate) fn join_trusted(&self, name: &str) -> Self {
        Self(self.0.join(name))
    }

    /// A child directory; `name` is validated like [`CgroupDir::new`].
    pub fn join(&self, name: impl AsRef<Path>) -> Result<Self, NameError> {
        Ok(Self(self.0.join(CgroupDir::new(name)?.0)))
    }

    /// The parent directory (`None` for the root).
    pub fn parent(&self) -> Option<CgroupDir> {
        if self.0.as_os_str().is_empty() {
            None
        } else {
            Some(Self(self.0.parent().map(Path::to_path_buf).unwrap_or_default()))
        }
    }

    /// Number of components (0 for the root); the executor orders writes by it.
    pub fn depth(&self) -> usize {
        self.0.components().count()
    }

    /// The relative path.
    pub fn as_path(&self) -> &Path {
        &self.0
    }

    /// True when `self` is `other` or below it.
    pub fn starts_with(&self, other: &CgroupDir) -> bool {
        self.0.starts_with(&other.0)
    }
}

impl std::fmt::Display for CgroupDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.display())
    }
}

/// The kubelet's cgroup driver: it decides the directory names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CgroupDriver {
    /// Plain directories (`kubepods/burstable/pod<uid>/<id>`).
    Cgroupfs,
    /// systemd slices and scopes.
    Systemd,
}

impl CgroupDriver {
    /// Parses the `--cgroup-driver` flag value.
    pub fn parse(text: &str) -> Option<CgroupDriver> {
        match text {
            "cgroupfs" => Some(CgroupDriver::Cgroupfs),
            "systemd" => Some(CgroupDriver::Systemd),
            _ => None,
        }
    }
}

/// The three Kubernetes QoS classes, for sweeps over the QoS directories.
pub const KUBE_QOS_CLASSES: [KubeQoSClass; 3] = [
    KubeQoSClass::Guaranteed,
    KubeQoSClass::Burstable,
    KubeQoSClass::BestEffort,
];

/// The word the kubelet puts in a QoS directory's name (Guaranteed pods have none: they live
/// directly in kubepods).
fn qos_dir_word(qos: KubeQoSClass) -> Option<&'static str> {
    match qos {
        KubeQoSClass::Guaranteed => None,
        KubeQoSClass::Burstable => Some("burstable"),
        KubeQoSClass::BestEffort => Some("besteffort"),
    }
}

/// A pod UID that is safe in a path (letters, digits, `-`; 1..=128 chars).
///
/// `_` is refused: the systemd driver writes a UID's `-` as `_`, so `a_b` and `a-b` would
/// name the same slice and one pod's writes could land in the other's cgroup. Kubernetes
/// UIDs (RFC 4122) and static pods' hashes never contain it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodUid(String);

impl PodUid {
    /// Validates a pod UID (`metadata.uid`, or a static pod's hash).
    pub fn new(uid: &str) -> Result<Self, NameError> {
        check_name("pod uid", uid, |c| c.is_ascii_alphanumeric() || c == '-')?;
        Ok(Self(uid.to_owned()))
    }

    /// The UID as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PodUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The container runtime named in a container status's `containerID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContainerRuntime {
    /// `containerd://`
    Containerd,
    /// `docker://`
    Docker,
    /// `cri-o://`
    CriO,
    /// `pouch://`
    Pouch,
}

impl ContainerRuntime {
    fn scheme(self) -> &'static str {
        match self {
            Self::Containerd => "containerd",
            Self::Docker => "docker",
            Self::CriO => "cri-o",
            Self::Pouch => "pouch",
        }
    }

    fn systemd_scope_prefix(self) -> &'static str {
        match self {
            Self::Containerd => "cri-containerd",
            Self::Docker => "docker",
            Self::CriO => "crio",
            Self::Pouch => "pouch",
        }
    }
}

/// A container ID as Kubernetes reports it: `<runtime>://<id>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContainerId {
    /// The runtime that owns the container.
    pub runtime: ContainerRuntime,
    id: String,
}

impl ContainerId {
    /// Parses `containerd://<id>`, `docker://<id>`, `cri-o://<id>` or `pouch://<id>`; the id
    /// must be letters and digits (runtimes use 64 hex digits).
    pub fn parse(text: &str) -> Result<Self, NameError> {
        let bad = |reason| NameError {
            what: "container id",
            value: truncate(text),
            reason,
        };
        let (scheme, id) = text
            .split_once("://")
            .ok_or_else(|| bad("expected <runtime>://<id>"))?;
        let runtime = [
            ContainerRuntime::Containerd,
            ContainerRuntime::Docker,
            ContainerRuntime::CriO,
            ContainerRuntime::Pouch,
        ]
        .into_iter()
        .find(|r| r.scheme() == scheme)
        .ok_or_else(|| bad("unknown runtime (containerd, docker, cri-o, pouch)"))?;
        check_name("container id", id, |c| c.is_ascii_alphanumeric())?;
        Ok(Self {
            runtime,
            id: id.to_owned(),
        })
    }

    /// The bare id (the part after `://`).
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.runtime.scheme(), self.id)
    }
}

fn truncate(text: &str) -> String {
    text.chars().take(80).collect()
}

fn check_name(what: &'static str, value: &str, allowed: impl Fn(char) -> bool) -> Result<(), NameError> {
    let reason = if value.is_empty() {
        Some("empty")
    } else if value.len() > 128 {
        Some("longer than 128 characters")
    } else if !value.chars().all(allowed) {
        Some("contains characters not allowed in a cgroup name")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(NameError {
            what,
            value: truncate(value),
            reason,
        }),
        None => Ok(()),
    }
}

/// Builds the cgroup directories the kubelet creates, for one driver and parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeCgroupPaths {
    /// The kubelet's driver.
    pub driver: CgroupDriver,
    /// kubelet's `--cgroup-root` below the cgroup root (empty: the root itself). Tests put their
    /// whole kubepods tree below a unique directory this way.
    pub parent: PathBuf,
}

impl KubeCgroupPaths {
    /// Paths for `driver` directly below the cgroup root.
    pub fn new(driver: CgroupDriver) -> Self {
        Self {
            driver,
            parent: PathBuf::new(),
        }
    }

    /// Paths for `driver` below `parent` (must be a safe relative path).
    pub fn with_parent(driver: CgroupDriver, parent: &Path) -> Result<Self, NameError> {
        let parent = CgroupDir::new(parent)?;
        Ok(Self {
            driver,
            parent: parent.as_path().to_path_buf(),
        })
    }

    /// The kubepods directory (Guaranteed pods live directly in it).
    pub fn kubepods_dir(&self) -> CgroupDir {
        let name = match self.driver {
            CgroupDriver::Cgroupfs => "kubepods",
            CgroupDriver::Systemd => "kubepods.slice",
        };
        CgroupDir::trusted(self.parent.join(name))
    }

    /// The QoS-level directory for `qos`.
    pub fn qos_dir(&self, qos: KubeQoSClass) -> CgroupDir {
        let base = self.kubepods_dir();
        match (qos_dir_word(qos), self.driver) {
            (None, _) => base,
            (Some(word), CgroupDriver::Cgroupfs) => base.join_trusted(word),
            (Some(word), CgroupDriver::Systemd) => base.join_trusted(&format!("kubepods-{word}.slice")),
        }
    }

    /// The pod directory.
    pub fn pod_dir(&self, qos: KubeQoSClass, uid: &PodUid) -> CgroupDir {
        let name = match (self.driver, qos_dir_word(qos)) {
            (CgroupDriver::Cgroupfs, _) => format!("pod{uid}"),
            (CgroupDriver::Systemd, None) => format!("kubepods-pod{}.slice", uid.as_str().replace('-', "_")),
            (CgroupDriver::Systemd, Some(word)) => {
                format!("kubepods-{word}-pod{}.slice", uid.as_str().replace('-', "_"))
            }
        };
        self.qos_dir(qos).join_trusted(&name)
    }

    /// The container directory.
    pub fn container_dir(&self, qos: KubeQoSClass, uid: &PodUid, container: &ContainerId) -> CgroupDir {
        let name = match self.driver {
            CgroupDriver::Cgroupfs => container.id().to_owned(),
            CgroupDriver::Systemd => format!(
                "{}-{}.scope",
                container.runtime.systemd_scope_prefix(),
                container.id()
            ),
        };
        self.pod_dir(qos, uid).join_trusted(&name)
    }

    /// The pod directory (and the kube QoS class it stands for) of pod `uid` that the runtime
    /// names `cgroup_parent` (NRI's `PodSandbox.linux.cgroup_parent`:
    /// `/kubepods/besteffort/pod<uid>` with the cgroupfs driver,
    /// `kubepods-besteffort-pod<uid_>.slice` with systemd). Only one of the three
    /// directories this layout gives the pod is accepted, so a runtime's parent can never point
    /// koordlet's writes at a cgroup outside the pod; `None` for anything else.
    pub fn pod_dir_of_parent(&self, cgroup_parent: &str, uid: &PodUid) -> Option<(KubeQoSClass, CgroupDir)> {
        let parent = cgroup_parent.trim_end_matches('/');
        [
            KubeQoSClass::Guaranteed,
            KubeQoSClass::Burstable,
            KubeQoSClass::BestEffort,
        ]
        .into_iter()
        .map(|qos| (qos, self.pod_dir(qos, uid)))
        .find(|(_, dir)| match self.driver {
            CgroupDriver::Cgroupfs => Path::new(parent.trim_start_matches('/')) == dir.as_path(),
            // systemd names the slice only; its place follows from the name.
            CgroupDriver::Systemd => dir.as_path().file_name().and_then(|n| n.to_str()) == Some(parent),
        })
    }

    /// The pod UID a pod directory name stands for (`pod<uid>` or `...-pod<uid_>.slice`), for
    /// sweeping directories of pods that no longer exist.
    pub fn pod_uid_from_dir_name(&self, name: &str) -> Option<PodUid> {
        let uid = match self.driver {
            CgroupDriver::Cgroupfs => name.strip_prefix("pod")?.to_owned(),
            CgroupDriver::Systemd => {
                let stem = name.strip_suffix(".slice")?;
                let (_, uid) = stem.rsplit_once("-pod")?;
                uid.replace('_', "-")
            }
        };
        PodUid::new(&uid).ok()
    }
}

/// A host application's cgroup: its base (`CgroupRoot` by default, `Kubepods`,
/// `KubepodsBurstable`, `KubepodsBesteffort` for the kubelet driver in use) joined with
/// `parentDir` and `relativePath`. `None` without a cgroup path or with an invalid one.
pub fn host_app_dir(app: &HostApplicationSpec, paths: &KubeCgroupPaths) -> Option<CgroupDir> {
    let cg = app.cgroup_path.as_ref()?;
    let base = match cg.base.unwrap_or(CgroupBaseType::CgroupRoot) {
        CgroupBaseType::CgroupRoot => CgroupDir::root(),
        CgroupBaseType::Kubepods => paths.kubepods_dir(),
        CgroupBaseType::KubepodsBurstable => paths.qos_dir(KubeQoSClass::Burstable),
        CgroupBaseType::KubepodsBesteffort => paths.qos_dir(KubeQoSClass::BestEffort),
    };
    let mut dir = base;
    for part in [cg.parent_dir.as_deref(), cg.relative_path.as_deref()]
        .into_iter()
        .flatten()
        .map(|p| p.trim_matches('/'))
        .filter(|p| !p.is_empty())
    {
        dir = dir.join(part).ok()?;
    }
    (dir != CgroupDir::root()).then_some(dir)
}

/// Whether a host application counts as BE for suppress: QoS `BE` and its cgroup under the
/// besteffort QoS dir (upstream's `NonBEHostAppFilter`, negated).
pub fn host_app_is_be(app: &HostApplicationSpec) -> bool {
    app.qos.as_deref() == Some("BE")
        && app.cgroup_path.as_ref().and_then(|c| c.base) == Some(CgroupBaseType::KubepodsBesteffort)
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "6f1e3a2b-1111-2222-3333-444455556666";

    #[test]
    fn pod_dir_from_the_runtimes_cgroup_parent() {
        let uid = PodUid::new(UID).unwrap();
        let other = PodUid::new("0000").unwrap();
        let cgroupfs = KubeCgroupPaths::new(CgroupDriver::Cgroupfs);
        let found = |paths: &KubeCgroupPaths, parent: &str, uid: &PodUid| {
            paths.pod_dir_of_parent(parent, uid).map(|(_, d)| d.to_string())
        };
        let be = format!("kubepods/besteffort/pod{UID}");
        assert_eq!(found(&cgroupfs, &format!("/{be}"), &uid), Some(be.clone()));
        assert_eq!(found(&cgroupfs, &format!("{be}/"), &uid), Some(be.clone()));
        assert_eq!(
            found(&cgroupfs, &format!("/kubepods/pod{UID}"), &uid),
            Some(format!("kubepods/pod{UID}"))
        );
        // Another pod's directory, a parent outside kubepods, a climb out: refused.
        assert_eq!(found(&cgroupfs, &format!("/{be}"), &other), None);
        assert_eq!(found(&cgroupfs, &format!("/system.slice/pod{UID}"), &uid), None);
        assert_eq!(
            found(&cgroupfs, &format!("/kubepods/../besteffort/pod{UID}"), &uid),
            None
        );
        assert_eq!(found(&cgroupfs, "/", &uid), None);
        let nested = KubeCgroupPaths::with_parent(CgroupDriver::Cgroupfs, Path::new("k8s")).unwrap();
        assert_eq!(
            found(&nested, &format!("/k8s/{be}"), &uid),
            Some(format!("k8s/{be}"))
        );
        assert_eq!(found(&nested, &format!("/{be}"), &uid), None);
        let systemd = KubeCgroupPaths::new(CgroupDriver::Systemd);
        let slice = format!("kubepods-burstable-pod{}.slice", UID.replace('-', "_"));
        assert_eq!(
            found(&systemd, &slice, &uid),
            Some(format!("kubepods.slice/kubepods-burstable.slice/{slice}"))
        );
        assert_eq!(found(&systemd, "kubepods-burstable.slice", &uid), None);
        assert_eq!(
            systemd.pod_dir_of_parent(&slice, &uid).map(|(qos, _)| qos),
            Some(KubeQoSClass::Burstable)
        );
    }

    #[test]
    fn every_qos_class_at_every_level_for_both_drivers() {
        let uid = PodUid::new(UID).unwrap();
        let cid = ContainerId::parse("containerd://abc123").unwrap();
        let cases = [
            (
                CgroupDriver::Cgroupfs,
                KubeQoSClass::Guaranteed,
                "kubepods",
                "kubepods/pod6f1e3a2b-1111-2222-3333-444455556666",
                "abc123",
            ),
            (
                CgroupDriver::Cgroupfs,
                KubeQoSClass::Burstable,
                "kubepods/burstable",
                "kubepods/burstable/pod6f1e3a2b-1111-2222-3333-444455556666",
                "abc123",
            ),
            (
                CgroupDriver::Cgroupfs,
                KubeQoSClass::BestEffort,
                "kubepods/besteffort",
                "kubepods/besteffort/pod6f1e3a2b-1111-2222-3333-444455556666",
                "abc123",
            ),
            (
                CgroupDriver::Systemd,
                KubeQoSClass::Guaranteed,
                "kubepods.slice",
                "kubepods.slice/kubepods-pod6f1e3a2b_1111_2222_3333_444455556666.slice",
                "cri-containerd-abc123.scope",
            ),
            (
                CgroupDriver::Systemd,
                KubeQoSClass::Burstable,
                "kubepods.slice/kubepods-burstable.slice",
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6f1e3a2b_1111_2222_3333_444455556666.slice",
                "cri-containerd-abc123.scope",
            ),
            (
                CgroupDriver::Systemd,
                KubeQoSClass::BestEffort,
                "kubepods.slice/kubepods-besteffort.slice",
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod6f1e3a2b_1111_2222_3333_444455556666.slice",
                "cri-containerd-abc123.scope",
            ),
        ];
        for (driver, qos, qos_dir, pod_dir, container) in cases {
            let paths = KubeCgroupPaths::new(driver);
            assert_eq!(
                paths.qos_dir(qos).as_path(),
                Path::new(qos_dir),
                "{driver:?} {qos:?}"
            );
            assert_eq!(
                paths.pod_dir(qos, &uid).as_path(),
                Path::new(pod_dir),
                "{driver:?} {qos:?}"
            );
            assert_eq!(
                paths.container_dir(qos, &uid, &cid).as_path(),
                Path::new(pod_dir).join(container)
            );
            let pod_name = Path::new(pod_dir).file_name().unwrap().to_str().unwrap();
            assert_eq!(paths.pod_uid_from_dir_name(pod_name), Some(uid.clone()));
        }
    }

    #[test]
    fn runtimes_and_parent() {
        let uid = PodUid::new("u1").unwrap();
        let systemd = KubeCgroupPaths::with_parent(CgroupDriver::Systemd, Path::new("koord-test-1")).unwrap();
        for (id, scope) in [
            ("docker://d1", "docker-d1.scope"),
            ("cri-o://c1", "crio-c1.scope"),
            ("containerd://e1", "cri-containerd-e1.scope"),
        ] {
            let dir = systemd.container_dir(KubeQoSClass::BestEffort, &uid, &ContainerId::parse(id).unwrap());
            assert!(dir.as_path().starts_with("koord-test-1/kubepods.slice"));
            assert!(dir.as_path().ends_with(scope), "{id}");
        }
        assert_eq!(
            ContainerId::parse("docker://d1").unwrap().to_string(),
            "docker://d1"
        );
    }

    #[test]
    fn hostile_names_are_refused() {
        for bad in ["", "../x", "a/b", "x y", "a_b", &"a".repeat(129)] {
            assert!(PodUid::new(bad).is_err(), "{bad:?}");
        }
        for bad in [
            "abc",
            "containerd://",
            "containerd://../..",
            "rkt://abc",
            "docker://a-b",
        ] {
            assert!(ContainerId::parse(bad).is_err(), "{bad:?}");
        }
        assert!(KubeCgroupPaths::with_parent(CgroupDriver::Cgroupfs, Path::new("../etc")).is_err());
        assert!(KubeCgroupPaths::with_parent(CgroupDriver::Cgroupfs, Path::new("/etc")).is_err());
    }
}
