//! Metric storage for the node agent: bounded in-memory series with window queries.
//!
//! Collectors append samples (time is always an argument, never read here); strategies and the
//! NodeMetric reporter query windows ("latest", "avg over 5 min", "p95 over 30 min"). Memory is
//! bounded by construction: a fixed number of series, each with a fixed-capacity ring of fine
//! samples and a fixed-capacity ring of coarse per-window summaries. See [`store`] for the
//! bound and the percentile definition.

pub mod clock;
pub mod collector;
mod ring;
pub mod series;
pub mod store;

pub use series::{Bucket, Series};
pub use store::{AppendError, MetricStore, StoreConfig, WindowStats};

/// A sample's time: milliseconds since the Unix epoch. A plain number so tests and the offline
/// `plan` command drive time by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MetricTime(pub i64);

impl MetricTime {
    /// From milliseconds since the epoch.
    pub fn from_millis(ms: i64) -> Self {
        Self(ms)
    }

    /// From whole seconds since the epoch.
    pub fn from_secs(s: i64) -> Self {
        Self(s.saturating_mul(1000))
    }

    /// Milliseconds since the epoch.
    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// `self - d`, saturating.
    pub fn minus(self, d: std::time::Duration) -> Self {
        Self(
            self.0
                .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }

    /// From a wall clock reading (the collector's edge converts once).
    pub fn from_system_time(t: std::time::SystemTime) -> Self {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => Self(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(e) => Self(-i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX)),
        }
    }
}

/// What a series measures. Units: CPU in cores, memory in bytes, ratios in 0..=1, PSI in
/// percent (as the kernel prints it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetricKind {
    /// Node CPU usage (cores) from `/proc/stat`.
    NodeCpuUsage,
    /// Node memory usage without page cache (bytes).
    NodeMemoryUsage,
    /// Node memory usage with all page cache.
    NodeMemoryUsageWithPageCache,
    /// Node memory usage with hot page cache.
    NodeMemoryUsageWithHotPageCache,
    /// System CPU usage: node minus pods and host applications, floored at 0.
    SysCpuUsage,
    /// System memory usage: node minus pods and host applications, floored at 0.
    SysMemoryUsage,
    /// BE pods' CPU usage (cores).
    BeCpuUsage,
    /// BE pods' effective CPU limit (cores).
    BeCpuRealLimit,
    /// BE pods' batch-cpu requests (cores).
    BeCpuRequest,
    /// Pod CPU usage (object = pod UID).
    PodCpuUsage,
    /// Pod memory usage (object = pod UID).
    PodMemoryUsage,
    /// Container CPU usage (object = container ID).
    ContainerCpuUsage,
    /// Container memory usage (object = container ID).
    ContainerMemoryUsage,
    /// Pod throttled ratio.
    PodCpuThrottled,
    /// Container throttled ratio.
    ContainerCpuThrottled,
    /// `some avg10` pressure of a resource (object = "" for the node, else pod UID / container ID).
    PsiSomeAvg10(PsiResource),
    /// `full avg10` pressure of a resource.
    PsiFullAvg10(PsiResource),
    /// Host application CPU usage (object = the application's name in the NodeSLO).
    HostAppCpuUsage,
    /// Host application memory usage (object = the application's name).
    HostAppMemoryUsage,
    /// NUMA node CPU usage (object = the NUMA node ID, `"0"`, `"1"`, ...).
    NumaCpuUsage,
    /// NUMA node memory usage without page cache or reclaimable slab (object = NUMA node ID).
    NumaMemoryUsage,
    /// NUMA node memory usage with page cache (object = NUMA node ID).
    NumaMemoryUsageWithPageCache,
    /// NUMA node system memory: the node's memory minus the pods' and host applications' on it
    /// (object = NUMA node ID).
    NumaSysMemoryUsage,
}

/// The three PSI resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PsiResource {
    /// CPU.
    Cpu,
    /// Memory.
    Memory,
    /// I/O.
    Io,
}

/// Identifies a series: what is measured and of which object ("" for node-level series).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SeriesKey {
    /// What is measured.
    pub kind: MetricKind,
    /// The pod UID, container ID, ... ("" for the node). At most [`store::MAX_OBJECT_LEN`] bytes.
    pub object: Box<str>,
}

impl SeriesKey {
    /// A node-level series.
    pub fn node(kind: MetricKind) -> Self {
        Self {
            kind,
            object: "".into(),
        }
    }

    /// A per-object series.
    pub fn of(kind: MetricKind, object: &str) -> Self {
        Self {
            kind,
            object: object.into(),
        }
    }
}

/// A series key seen through borrowed parts, so the store finds a series by `(kind, &str)`
/// without allocating the boxed name on every append (collectors append thousands per round).
/// Hash and equality agree with [`SeriesKey`]'s, as `Borrow` requires.
pub trait KeyView {
    /// What is measured.
    fn kind(&self) -> MetricKind;
    /// The object ("" for the node).
    fn object(&self) -> &str;
}

impl KeyView for SeriesKey {
    fn kind(&self) -> MetricKind {
        self.kind
    }
    fn object(&self) -> &str {
        &self.object
    }
}

impl KeyView for (MetricKind, &str) {
    fn kind(&self) -> MetricKind {
        self.0
    }
    fn object(&self) -> &str {
        self.1
    }
}

impl<'a> std::borrow::Borrow<dyn KeyView + 'a> for SeriesKey {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl std::hash::Hash for dyn KeyView + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.kind().hash(state);
        self.object().hash(state);
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.kind() == other.kind() && self.object() == other.object()
    }
}

impl Eq for dyn KeyView + '_ {}

impl std::hash::Hash for SeriesKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self as &dyn KeyView).hash(state);
    }
}
