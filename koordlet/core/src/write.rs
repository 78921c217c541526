//! The one typed cgroup write: what strategies decide, what `koordlet plan` prints and what the
//! executor applies.

use crate::paths::CgroupDir;
use crate::resource::{CgroupResource, CgroupValue};

/// One desired cgroup file value, as strategies produce it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupWrite {
    /// The cgroup directory relative to the cgroup root (e.g. `kubepods/besteffort/pod<uid>`).
    pub cgroup: CgroupDir,
    /// The knob.
    pub resource: CgroupResource,
    /// The value in v1 units (converted for v2 by the system layer).
    pub value: CgroupValue,
    /// Which strategy wants it (`be_limits`, `cpu_burst`, ...), for the audit line.
    pub strategy: String,
}
