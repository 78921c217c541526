//! Every file koordlet writes in the cgroup and resctrl trees is opened through here, so no
//! write can land outside the configured root, whatever a path was built from.
//!
//! Two checks, both before the file is opened for writing:
//! 1. lexical: the path is the root joined with plain names only (no `..`, no absolute part);
//!    the typed paths of `koordlet-core` already guarantee it, this catches a bug anywhere
//!    between the builder and the write;
//! 2. by the kernel: the file is opened with `openat2(root, relative, RESOLVE_BENEATH |
//!    RESOLVE_NO_MAGICLINKS)`, which fails with `EXDEV` if resolving any component (a symlink
//!    planted in the tree, a `..` the lexical check missed) would leave the root. Relative
//!    symlinks that stay inside (v1's `cpu -> cpu,cpuacct`) still work. The kernel does this
//!    at open time, so there is no window between checking and opening (which a
//!    canonicalize-then-open check would have).
//!
//! The root itself is trusted: it comes from the operator's flags and may be a symlink; so is
//! the directory directly below it (a v1 controller mount such as `cpu`, which a chroot-style
//! root or a test tree may link to the real mount elsewhere, or a fixed name such as
//! `kubepods` or a resctrl group). Nothing built from a pod is ever that first component, and
//! everything below it must resolve beneath it. On a
//! kernel without `openat2` (before 5.6) the second check falls back to resolving the parent
//! directory with `canonicalize` and opening the file with `O_NOFOLLOW`: a rename race between
//! the two is possible there, but cgroupfs and resctrl cannot hold symlinks and only root can
//! rename in them, so the fallback still refuses every escape a crafted name could make.

use std::fs::File;
use std::io;
use std::path::{Component, Path};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::SystemError;

/// How the file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Truncate and write (cgroup knobs, `schemata`).
    Truncate,
    /// Append (`tasks`: one id per write).
    Append,
}

/// Opens `path`, which must lie below `root`, for writing. `ENOENT` comes back as
/// [`SystemError::CgroupDirMissing`] (a pod that went away), an escape as
/// [`SystemError::OutsideRoot`].
pub fn open_for_write(root: &Path, path: &Path, mode: WriteMode) -> Result<File, SystemError> {
    let outside = |reason: &'static str| SystemError::OutsideRoot {
        root: root.to_path_buf(),
        path: path.to_path_buf(),
        reason,
    };
    let relative = path
        .strip_prefix(root)
        .map_err(|_| outside("not below the root"))?;
    if relative.as_os_str().is_empty() || !relative.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(outside("not a plain relative path below the root"));
    }
    let io_error = |source: io::Error| {
        if source.kind() == io::ErrorKind::NotFound {
            SystemError::CgroupDirMissing(path.to_path_buf())
        } else {
            SystemError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    };
    let access = match mode {
        WriteMode::Truncate => OFlags::WRONLY | OFlags::TRUNC,
        WriteMode::Append => OFlags::WRONLY | OFlags::APPEND,
    } | OFlags::CLOEXEC
        | OFlags::NOCTTY;
    let (trusted, below) = trusted_base(root, relative);
    let dir = rustix::fs::open(
        &trusted,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_error(e.into()))?;
    match rustix::fs::openat2(
        &dir,
        below,
        access,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => Ok(File::from(fd)),
        Err(rustix::io::Errno::XDEV) => Err(outside("resolves outside the root (symlink or `..`)")),
        Err(rustix::io::Errno::NOSYS) => open_checked_by_path(&trusted, path, access, &outside, &io_error),
        Err(e) => Err(io_error(e.into())),
    }
}

/// The trusted directory (the root, or the directory directly below it when the file lies
/// deeper) and the path that must resolve beneath it.
fn trusted_base<'a>(root: &Path, relative: &'a Path) -> (std::path::PathBuf, &'a Path) {
    let mut components = relative.components();
    match (components.next(), components.as_path()) {
        (Some(first), rest) if !rest.as_os_str().is_empty() => (root.join(first), rest),
        _ => (root.to_path_buf(), relative),
    }
}

/// The fallback for kernels without `openat2`: the resolved parent must stay below the
/// resolved root, and the last component must not be a symlink.
fn open_checked_by_path(
    root: &Path,
    path: &Path,
    access: OFlags,
    outside: &dyn Fn(&'static str) -> SystemError,
    io_error: &dyn Fn(io::Error) -> SystemError,
) -> Result<File, SystemError> {
    let real_root = root.canonicalize().map_err(io_error)?;
    let parent = path.parent().ok_or_else(|| outside("has no parent directory"))?;
    let real_parent = parent.canonicalize().map_err(io_error)?;
    if !real_parent.starts_with(&real_root) {
        return Err(outside("resolves outside the root (symlink)"));
    }
    match rustix::fs::open(path, access | OFlags::NOFOLLOW, Mode::empty()) {
        Ok(fd) => Ok(File::from(fd)),
        Err(rustix::io::Errno::LOOP) => Err(outside("the file is a symlink")),
        Err(e) => Err(io_error(e.into())),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write;
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn writes_below_the_root_and_through_inner_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cgroup");
        std::fs::create_dir_all(root.join("cpu,cpuacct/kubepods")).unwrap();
        symlink("cpu,cpuacct", root.join("cpu")).unwrap();
        let file = root.join("cpu/kubepods/cpu.shares");
        std::fs::write(&file, "2\n").unwrap();
        let mut f = open_for_write(&root, &file, WriteMode::Truncate).unwrap();
        f.write_all(b"1024").unwrap();
        drop(f);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "1024");
        let mut f = open_for_write(&root, &file, WriteMode::Append).unwrap();
        f.write_all(b"\n7").unwrap();
        drop(f);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "1024\n7");
    }

    #[test]
    fn escapes_are_refused_before_anything_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cgroup");
        let outside_dir = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("kubepods")).unwrap();
        std::fs::create_dir_all(&outside_dir).unwrap();
        let victim = outside_dir.join("cpu.shares");
        std::fs::write(&victim, "untouched").unwrap();
        // A directory symlink and a file symlink planted in the tree, absolute and relative.
        symlink(&outside_dir, root.join("kubepods/evil")).unwrap();
        symlink("../../outside", root.join("kubepods/evil-rel")).unwrap();
        symlink(&victim, root.join("kubepods/cpu.shares")).unwrap();
        for path in [
            root.join("kubepods/evil/cpu.shares"),
            root.join("kubepods/evil-rel/cpu.shares"),
            root.join("kubepods/cpu.shares"),
            root.join("kubepods/../../outside/cpu.shares"),
            victim.clone(),
            root.clone(),
        ] {
            let err = open_for_write(&root, &path, WriteMode::Truncate).unwrap_err();
            assert!(
                matches!(err, SystemError::OutsideRoot { .. }),
                "{}: {err}",
                path.display()
            );
            assert!(err.to_string().contains("outside the configured root"), "{err}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
    }

    #[test]
    fn a_controller_linked_elsewhere_is_trusted_but_nothing_below_it_may_escape() {
        // A chroot-style root whose controller directories link to the real mounts.
        let tmp = tempfile::tempdir().unwrap();
        let mount = tmp.path().join("mount/cpu");
        let root = tmp.path().join("root");
        std::fs::create_dir_all(mount.join("kubepods")).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        symlink(&mount, root.join("cpu")).unwrap();
        std::fs::write(mount.join("kubepods/cpu.shares"), "2").unwrap();
        let mut f =
            open_for_write(&root, &root.join("cpu/kubepods/cpu.shares"), WriteMode::Truncate).unwrap();
        f.write_all(b"512").unwrap();
        drop(f);
        assert_eq!(
            std::fs::read_to_string(mount.join("kubepods/cpu.shares")).unwrap(),
            "512"
        );
        symlink(tmp.path(), mount.join("kubepods/evil")).unwrap();
        let err = open_for_write(&root, &root.join("cpu/kubepods/evil/x"), WriteMode::Truncate).unwrap_err();
        assert!(matches!(err, SystemError::OutsideRoot { .. }), "{err}");
    }

    #[test]
    fn a_missing_cgroup_is_reported_as_missing() {
        let tmp = tempfile::tempdir().unwrap();
        let err = open_for_write(
            tmp.path(),
            &tmp.path().join("gone/cpu.shares"),
            WriteMode::Truncate,
        )
        .unwrap_err();
        assert!(matches!(err, SystemError::CgroupDirMissing(_)), "{err}");
    }
}
