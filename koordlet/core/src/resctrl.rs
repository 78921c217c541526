//! The resctrl vocabulary: schemata lines, the facts of a resctrl tree, the class groups and
//! the typed schemata write.
//!
//! The kernel prints a group's `schemata` one resource per line, names right-aligned and values
//! padded (`    L3:0=7ff;1=7ff`, `    MB:0=100;1= 50`, AMD `MB:0=2048;1=  16`); [`Schemata::parse`]
//! accepts that and what users write. Cache masks are hexadecimal, memory bandwidth decimal.
//! Values are compared as numbers, so a padded read equals the unpadded value written.

use std::collections::BTreeMap;
use std::fmt;

use crate::ParseError;

/// One resource's line of a `schemata` file: `L3:0=7ff;1=7ff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemataLine {
    /// Resource name as the kernel spells it (`L3`, `L3CODE`, `L3DATA`, `MB`, `L2`, `SMBA`).
    pub resource: String,
    /// Value per domain (cache) id, ids sorted.
    pub values: BTreeMap<u32, u64>,
}

impl SchemataLine {
    /// Whether this resource's values are capacity bitmasks (hex) rather than bandwidth.
    pub fn is_cache(&self) -> bool {
        is_cache_resource(&self.resource)
    }

    /// The line with every domain of `ids` set to `value`.
    pub fn uniform(resource: &str, ids: impl IntoIterator<Item = u32>, value: u64) -> Self {
        SchemataLine {
            resource: resource.to_owned(),
            values: ids.into_iter().map(|id| (id, value)).collect(),
        }
    }

    /// Whether `other` holds the same value for every domain this line sets.
    pub fn is_satisfied_by(&self, other: &SchemataLine) -> bool {
        self.resource == other.resource && self.values.iter().all(|(id, v)| other.values.get(id) == Some(v))
    }
}

fn is_cache_resource(name: &str) -> bool {
    name.starts_with("L2") || name.starts_with("L3")
}

impl fmt::Display for SchemataLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.resource)?;
        for (i, (id, v)) in self.values.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            if self.is_cache() {
                write!(f, "{id}={v:x}")?;
            } else {
                write!(f, "{id}={v}")?;
            }
        }
        Ok(())
    }
}

/// A parsed `schemata` file: its lines in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schemata {
    /// One line per resource.
    pub lines: Vec<SchemataLine>,
}

impl Schemata {
    /// Parses a `schemata` file. Blank lines are ignored; anything else that is not
    /// `NAME:id=value;...` is an error naming the line.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut lines = Vec::new();
        for raw in text.lines() {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            let (name, rest) = line
                .split_once(':')
                .ok_or_else(|| ParseError::new("resctrl schemata", format!("no ':' in {line:?}")))?;
            let resource = name.trim();
            if resource.is_empty() || !resource.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(ParseError::new(
                    "resctrl schemata",
                    format!("bad resource name in {line:?}"),
                ));
            }
            let radix = if is_cache_resource(resource) { 16 } else { 10 };
            let mut values = BTreeMap::new();
            for item in rest.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                let (id, value) = item.split_once('=').ok_or_else(|| {
                    ParseError::new("resctrl schemata", format!("no '=' in {item:?} of {resource}"))
                })?;
                let id: u32 = id.trim().parse().map_err(|_| {
                    ParseError::new("resctrl schemata", format!("bad domain id {id:?} of {resource}"))
                })?;
                let value = u64::from_str_radix(value.trim(), radix).map_err(|_| {
                    ParseError::new("resctrl schemata", format!("bad value {value:?} of {resource}"))
                })?;
                if values.insert(id, value).is_some() {
                    return Err(ParseError::new(
                        "resctrl schemata",
                        format!("domain {id} twice in {resource}"),
                    ));
                }
            }
            lines.push(SchemataLine {
                resource: resource.to_owned(),
                values,
            });
        }
        Ok(Schemata { lines })
    }

    /// The line of `resource`, if the file has one.
    pub fn line(&self, resource: &str) -> Option<&SchemataLine> {
        self.lines.iter().find(|l| l.resource == resource)
    }
}

/// A cache resource's `info/<L3|L3CODE>/` files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheInfo {
    /// `cbm_mask`: every way of the cache (the 100% mask).
    pub cbm_mask: u64,
    /// `min_cbm_bits`: fewest consecutive ways a mask may have.
    pub min_cbm_bits: u32,
}

/// The `info/MB/` files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MbInfo {
    /// `min_bandwidth`: the smallest value accepted (percent on Intel).
    pub min_bandwidth: u64,
    /// `bandwidth_gran`: the step values are rounded up to (percent on Intel).
    pub bandwidth_gran: u64,
}

/// Whose memory bandwidth allocation the node has: the units of `MB` differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum CpuVendor {
    /// Intel RDT: `MB` in percent.
    Intel,
    /// AMD (and Hygon) QoS: `MB` in 1/8 GB/s.
    Amd,
    /// Not known (`koordlet plan` on a tree alone): inferred from the root's `MB` values.
    Unknown,
}

impl CpuVendor {
    /// From `/proc/cpuinfo`'s `vendor_id`.
    pub fn from_vendor_id(id: &str) -> Self {
        match id.trim() {
            "GenuineIntel" => CpuVendor::Intel,
            "AuthenticAMD" | "HygonGenuine" => CpuVendor::Amd,
            _ => CpuVendor::Unknown,
        }
    }
}

/// What a resctrl tree says about the node: read once by the agent (or by `koordlet plan` from
/// a directory), then handed to the pure decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResctrlFacts {
    /// The root group's `schemata`: which resources and which domain ids exist.
    pub root: Schemata,
    /// `info/L3` (or `info/L3CODE` with CDP), when the node has cache allocation.
    pub l3: Option<CacheInfo>,
    /// `info/MB`, when the node has memory bandwidth allocation.
    pub mb: Option<MbInfo>,
    /// The CPU vendor.
    pub vendor: CpuVendor,
}

/// The class groups koordlet keeps under the resctrl root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum ResctrlGroup {
    /// LSR and LSE pods.
    #[serde(rename = "LSR")]
    Lsr,
    /// LS pods.
    #[serde(rename = "LS")]
    Ls,
    /// BE pods.
    #[serde(rename = "BE")]
    Be,
}

impl ResctrlGroup {
    /// Every group, in the order they are written.
    pub const ALL: [ResctrlGroup; 3] = [ResctrlGroup::Lsr, ResctrlGroup::Ls, ResctrlGroup::Be];

    /// The directory name under the resctrl root.
    pub fn name(self) -> &'static str {
        match self {
            ResctrlGroup::Lsr => "LSR",
            ResctrlGroup::Ls => "LS",
            ResctrlGroup::Be => "BE",
        }
    }
}

impl fmt::Display for ResctrlGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One desired schemata line of one group: what the resctrl strategy decides, `koordlet plan`
/// prints (as `{"cgroup": "resctrl/<GROUP>", "file": "schemata", ...}`) and the agent writes.
/// One write per resource, so a line the kernel refuses does not block the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResctrlWrite {
    /// The group.
    pub group: ResctrlGroup,
    /// The line to write.
    pub line: SchemataLine,
    /// The strategy that wants it (`resctrl`), for the audit line.
    pub strategy: &'static str,
}

impl ResctrlWrite {
    /// The directory as plans and audit lines name it: `resctrl/<GROUP>`.
    pub fn target(&self) -> String {
        format!("resctrl/{}", self.group)
    }
}

impl serde::Serialize for ResctrlWrite {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s = serializer.serialize_struct("ResctrlWrite", 4)?;
        s.serialize_field("cgroup", &self.target())?;
        s.serialize_field("file", "schemata")?;
        s.serialize_field("value", &self.line.to_string())?;
        s.serialize_field("strategy", self.strategy)?;
        s.end()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn resctrl_schemata_parses_kernel_padding_and_round_trips() {
        let s = Schemata::parse("    L3:0=7ff;1=07ff\n    MB:0=100;1= 50\n").unwrap();
        assert_eq!(s.lines.len(), 2);
        assert_eq!(s.line("L3").unwrap().to_string(), "L3:0=7ff;1=7ff");
        assert_eq!(s.line("MB").unwrap().to_string(), "MB:0=100;1=50");
        let amd = Schemata::parse("MB:0=2048;1=  16;2=2048\nL3:0=ffff;1=ffff;2=ffff\n").unwrap();
        assert_eq!(amd.line("MB").unwrap().values[&1], 16);
        let want = SchemataLine::uniform("L3", [0, 1], 0x7ff);
        assert!(want.is_satisfied_by(s.line("L3").unwrap()));
        assert!(!SchemataLine::uniform("MB", [1], 100).is_satisfied_by(s.line("MB").unwrap()));
    }

    #[test]
    fn resctrl_schemata_rejects_garbage() {
        for bad in [
            "L3 0=ff",
            "L3:0",
            "L3:x=ff",
            "L3:0=zz",
            "MB:0=1;0=2",
            ":0=1",
            "MB:0=-1",
        ] {
            assert!(Schemata::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(Schemata::parse("\n\n").unwrap(), Schemata::default());
    }

    #[test]
    fn resctrl_write_serializes_like_a_cgroup_write() {
        let w = ResctrlWrite {
            group: ResctrlGroup::Be,
            line: SchemataLine::uniform("L3", [0, 1], 0xf),
            strategy: "resctrl",
        };
        assert_eq!(
            serde_json::to_value(&w).unwrap(),
            serde_json::json!({"cgroup": "resctrl/BE", "file": "schemata",
                "value": "L3:0=f;1=f", "strategy": "resctrl"})
        );
        assert_eq!(CpuVendor::from_vendor_id("AuthenticAMD"), CpuVendor::Amd);
        assert_eq!(CpuVendor::from_vendor_id("GenuineIntel"), CpuVendor::Intel);
    }
}
