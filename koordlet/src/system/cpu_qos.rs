//! Which per-cgroup CPU QoS files this kernel offers (`cpu.idle`, Anolis `cpu.bvt_warp_ns`),
//! probed in the kubepods cgroup: the answer decides what the cpu_qos strategy writes.

use std::path::Path;

use koordlet_core::strategies::cpu_qos::CpuQosKernel;

use super::{CgroupResource, Cgroups, KubeCgroupPaths, SystemError};

/// Probes the kubepods cgroup for `cpu.idle` and `cpu.bvt_warp_ns`. A missing kubepods
/// directory is [`SystemError::CgroupDirMissing`] (probe again later: the kubelet has not
/// created it yet); a file the kernel lacks is just `false`, without the unsupported warning
/// (most kernels have no group identity and that is not worth a warning).
pub fn probe_cpu_qos(cgroups: &Cgroups, paths: &KubeCgroupPaths) -> Result<CpuQosKernel, SystemError> {
    let dir = paths.kubepods_dir();
    let has = |resource: CgroupResource| -> Result<bool, SystemError> {
        let path = match cgroups.file_path(resource, &dir) {
            Ok(path) => path,
            Err(SystemError::Unsupported { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let parent = path.parent().unwrap_or(Path::new("/"));
        if !parent.is_dir() {
            return Err(SystemError::CgroupDirMissing(parent.to_path_buf()));
        }
        Ok(path.is_file())
    };
    Ok(CpuQosKernel {
        idle: has(CgroupResource::CpuIdle)?,
        bvt: has(CgroupResource::CpuBvtWarpNs)?,
    })
}
