//! Metrics every binary serves besides its own: `<component>_build_info{version} 1`, the
//! standard Prometheus process metrics read from `/proc/self` at each scrape, and a counter
//! type for upstream series whose names carry no `_total` suffix.
//!
//! The process metrics follow the names of the Prometheus client libraries' process collector
//! (`process_resident_memory_bytes`, `process_cpu_seconds_total`, `process_open_fds`,
//! `process_max_fds`, `process_virtual_memory_bytes`, `process_start_time_seconds`), so the
//! usual dashboards and alerts work unchanged. A figure that cannot be read (no `/proc`, e.g.
//! outside Linux) is left out of the scrape, never reported as 0.

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder},
    metrics::{
        MetricType, TypedMetric,
        counter::{ConstCounter, Counter},
        gauge::ConstGauge,
        info::Info,
    },
    registry::Registry,
};

/// Labels of `<component>_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    /// The crate version the binary was built from.
    version: String,
}

/// Registers `<component>_build_info{version} 1` and the process metrics in `registry`, which
/// must be the root registry (the process metrics carry no component prefix).
///
/// `component` is the binary's metric prefix (`koordlet`, `koord_manager`, ...), `version` its
/// crate version (`env!("CARGO_PKG_VERSION")` of the binary's crate).
pub fn register_standard_metrics(registry: &mut Registry, component: &str, version: &str) {
    registry.register(
        format!("{component}_build"),
        "Always 1; the labels say which build runs",
        Info::new(BuildLabels {
            version: version.to_owned(),
        }),
    );
    registry.register_collector(Box::new(ProcessCollector));
}

/// Reads `/proc/self` on each scrape.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessCollector;

/// One scrape's figures; `None` where `/proc` could not be read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct ProcessFigures {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<f64>,
    virtual_bytes: Option<f64>,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
    start_time_seconds: Option<f64>,
}

impl ProcessFigures {
    fn read() -> Self {
        let Ok(me) = procfs::process::Process::myself() else {
            return Self::default();
        };
        let mut figures = Self::default();
        if let Ok(stat) = me.stat() {
            let ticks = procfs::ticks_per_second() as f64;
            if ticks > 0.0 {
                figures.cpu_seconds = Some((stat.utime + stat.stime) as f64 / ticks);
                figures.start_time_seconds = procfs::boot_time_secs()
                    .ok()
                    .map(|boot| boot as f64 + stat.starttime as f64 / ticks);
            }
            figures.resident_bytes = Some(stat.rss as f64 * procfs::page_size() as f64);
            figures.virtual_bytes = Some(stat.vsize as f64);
        }
        figures.open_fds = me.fd_count().ok().map(|n| n as f64);
        figures.max_fds = me.limits().ok().and_then(|l| match l.max_open_files.soft_limit {
            procfs::process::LimitValue::Value(n) => Some(n as f64),
            procfs::process::LimitValue::Unlimited => None,
        });
        figures
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: Option<f64>,
) -> std::fmt::Result {
    let Some(value) = value else { return Ok(()) };
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let figures = ProcessFigures::read();
        if let Some(seconds) = figures.cpu_seconds {
            let metric = ConstCounter::new(seconds);
            metric.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                metric.metric_type(),
            )?)?;
        }
        gauge(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            figures.resident_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            figures.virtual_bytes,
        )?;
        gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors",
            figures.open_fds,
        )?;
        gauge(
            &mut encoder,
            "process_max_fds",
            "Maximum number of open file descriptors",
            figures.max_fds,
        )?;
        gauge(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            figures.start_time_seconds,
        )
    }
}

/// A counter served under its exact name, without the `_total` suffix OpenMetrics gives
/// counters: for upstream Koordinator series such as `koordlet_pod_eviction` and
/// `slo_controller_nodeslo_reconcile_count`, whose names users' queries already spell. It is
/// typed `unknown` (OpenMetrics allows any name for it); `rate()` and `increase()` work on it as
/// on any counter.
#[derive(Debug, Clone, Default)]
pub struct UnsuffixedCounter(Counter<u64>);

impl UnsuffixedCounter {
    /// Adds one.
    pub fn inc(&self) {
        self.0.inc();
    }

    /// The current count.
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

impl TypedMetric for UnsuffixedCounter {
    const TYPE: MetricType = MetricType::Unknown;
}

impl EncodeMetric for UnsuffixedCounter {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> std::fmt::Result {
        encoder.encode_gauge(&self.0.get())
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use prometheus_client::{encoding::text::encode, metrics::family::Family};

    fn value(text: &str, name: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn build_info_and_process_figures_of_this_process() {
        let mut registry = Registry::default();
        register_standard_metrics(&mut registry, "koord_test", "1.2.3");
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("koord_test_build_info{version=\"1.2.3\"} 1"),
            "{text}"
        );
        assert!(value(&text, "process_resident_memory_bytes") > 1e6, "{text}");
        assert!(
            value(&text, "process_virtual_memory_bytes") >= value(&text, "process_resident_memory_bytes")
        );
        // Stdin, stdout, stderr at least.
        assert!(value(&text, "process_open_fds") >= 3.0, "{text}");
        assert!(value(&text, "process_max_fds") >= value(&text, "process_open_fds"));
        assert!(value(&text, "process_cpu_seconds_total") >= 0.0, "{text}");
        let started = value(&text, "process_start_time_seconds");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        // The test binary started within the last hour, and not in the future (1 s of rounding).
        assert!(
            started <= now + 1.0 && started > now - 3600.0,
            "{started} vs {now}"
        );
    }

    #[test]
    fn cpu_seconds_grow_with_work() {
        let before = ProcessFigures::read().cpu_seconds.unwrap();
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < std::time::Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = ProcessFigures::read().cpu_seconds.unwrap();
        assert!(after > before, "{before} -> {after}");
    }

    #[test]
    fn unsuffixed_counter_keeps_its_exact_name() {
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        struct L {
            reason: String,
        }
        let mut registry = Registry::with_prefix("koordlet");
        let family = Family::<L, UnsuffixedCounter>::default();
        registry.register("pod_eviction", "evictions", family.clone());
        let labels = L { reason: "x".into() };
        family.get_or_create(&labels).inc();
        family.get_or_create(&labels).inc();
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(text.contains("# TYPE koordlet_pod_eviction unknown"), "{text}");
        assert!(text.contains("koordlet_pod_eviction{reason=\"x\"} 2\n"), "{text}");
        assert!(!text.contains("_total"), "{text}");
    }
}
