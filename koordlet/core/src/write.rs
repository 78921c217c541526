//! The one typed cgroup write: what strategies decide, what `koordlet plan` prints and what the
//! executor applies.
//!
//! Directory, resource and value are typed, so a decided write cannot fail to convert on its
//! way to the kernel: the directory was validated when it was built, the resource is a row of
//! the resource table and the value is already in its domain's type.

use std::borrow::Cow;

use serde::ser::SerializeStruct;

use crate::cpuset::CpuSet;
use crate::paths::CgroupDir;
use crate::resource::{CgroupResource, CgroupValue};

/// One desired cgroup file value, in the order the plan lists it.
///
/// The order of a plan's writes matters (the kernel rejects a burst above the quota, a child
/// cpuset wider than its parent, a v1 child quota above its parent's): the executor applies
/// them in sequence. Serialized as `koordlet plan` shows v1 writes: `cgroup`, `file` (the v1
/// name), `value` (text in v1 units), `strategy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupWrite {
    /// The cgroup directory relative to the cgroup root (e.g. `kubepods/besteffort/pod<uid>`).
    pub cgroup: CgroupDir,
    /// The knob.
    pub resource: CgroupResource,
    /// The value in v1 units (converted for v2 by the system layer).
    pub value: CgroupValue,
    /// Which strategy wants it (`be_limits`, `cpu_burst`, ...), for the audit line. Borrowed
    /// for every decided write; owned only for the executor's derived writes (a burst clamp
    /// names the strategy whose quota caused it).
    pub strategy: Cow<'static, str>,
}

impl CgroupWrite {
    /// An integer write (`-1` means unlimited where the file allows it).
    pub fn int(cgroup: &CgroupDir, resource: CgroupResource, value: i64, strategy: &'static str) -> Self {
        CgroupWrite {
            cgroup: cgroup.clone(),
            resource,
            value: CgroupValue::Int(value),
            strategy: Cow::Borrowed(strategy),
        }
    }

    /// A CPU list write (`cpuset.cpus`).
    pub fn cpus(cgroup: &CgroupDir, resource: CgroupResource, cpus: &CpuSet, strategy: &'static str) -> Self {
        CgroupWrite {
            cgroup: cgroup.clone(),
            resource,
            value: CgroupValue::Cpus(cpus.clone()),
            strategy: Cow::Borrowed(strategy),
        }
    }

    /// The v1 file name (`cpu.cfs_quota_us`), as plans and audit lines name the knob.
    pub fn file(&self) -> &'static str {
        self.resource.name()
    }
}

impl serde::Serialize for CgroupWrite {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("CgroupWrite", 4)?;
        s.serialize_field("cgroup", &self.cgroup.to_string())?;
        s.serialize_field("file", self.file())?;
        s.serialize_field("value", &self.value.to_string())?;
        s.serialize_field("strategy", &self.strategy)?;
        s.end()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn serializes_in_v1_terms() {
        let dir = CgroupDir::new("kubepods/besteffort").unwrap();
        let w = CgroupWrite::int(&dir, CgroupResource::CpuCfsQuota, -1, "cpu_suppress");
        assert_eq!(
            serde_json::to_value(&w).unwrap(),
            serde_json::json!({"cgroup": "kubepods/besteffort", "file": "cpu.cfs_quota_us",
                "value": "-1", "strategy": "cpu_suppress"})
        );
        let w = CgroupWrite::cpus(
            &dir,
            CgroupResource::CpusetCpus,
            &CpuSet::parse("0-2,8").unwrap(),
            "cpu_suppress",
        );
        assert_eq!(w.file(), "cpuset.cpus");
        assert_eq!(serde_json::to_value(&w).unwrap()["value"], "0-2,8");
    }
}
