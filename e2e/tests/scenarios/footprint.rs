//! The memory footprint of each installed component as the node's kernel charges it: every
//! koord-manager, koord-webhook, koordlet and koord-scheduler-extender pod's resident set (its
//! own `process_resident_memory_bytes`) and its pod memory cgroup (`memory.usage_in_bytes`,
//! page cache included, and the kernel memory within it, `memory.kmem.usage_in_bytes`) against
//! the chart's limit. A measurement: it prints the figures (docs/benchmarks.md, real cluster)
//! and fails only when they cannot be read. Real cluster only (cgroup v1 on the node).

use std::path::Path;

use crate::colocation::read;
use crate::common;
use crate::dashboard::targets;
use crate::env::{Env, Wanted, find_dir};

const MI: f64 = 1024.0 * 1024.0;

/// `name`'s value in a text exposition (the first sample of that name).
fn sample(exposition: &str, name: &str) -> Option<f64> {
    exposition.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let value = match rest.strip_prefix('{') {
            Some(labels) => labels.split_once("} ")?.1,
            None => rest.strip_prefix(' ')?,
        };
        value.split_whitespace().next()?.parse().ok()
    })
}

fn bytes(dir: &Path, file: &str) -> Option<f64> {
    read(&dir.join(file))?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn component_memory_as_the_kernel_charges_it() {
    let env = Env::start(Wanted::default()).await;
    if !env.is_real() {
        println!("skipped: the embedded components run in the test's own process");
        return;
    }
    let (_, root) = match env.first_node_cgroups().await {
        Ok(found) => found,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    let targets = targets(&env.client).await;
    assert!(!targets.is_empty(), "no component pod found");
    println!("footprint: component, pod, RSS, cgroup charge (kernel part), peak, chart limit");
    for target in targets {
        let addr = target.addr;
        let body = tokio::task::spawn_blocking(move || common::http_get(addr, "/metrics"))
            .await
            .unwrap();
        let Some((200, body)) = body else {
            panic!("{} at {addr}: no /metrics", target.pod)
        };
        let rss = sample(&body, "process_resident_memory_bytes")
            .unwrap_or_else(|| panic!("{}: no process_resident_memory_bytes", target.pod));
        let dir = find_dir(&root.join("memory"), &format!("pod{}", target.uid), 4)
            .unwrap_or_else(|| panic!("{}: no memory cgroup pod{}", target.pod, target.uid));
        let usage = bytes(&dir, "memory.usage_in_bytes").expect("memory.usage_in_bytes");
        let kmem = bytes(&dir, "memory.kmem.usage_in_bytes");
        let peak = bytes(&dir, "memory.max_usage_in_bytes");
        assert!(
            rss > 0.0 && usage > 0.0,
            "{}: rss {rss}, usage {usage}",
            target.pod
        );
        let mib = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1} MiB", v / MI));
        println!(
            "footprint: {:<24} {:<44} RSS {:>9}  charge {:>9} (kernel {:>9})  peak {:>9}  limit {}",
            target.app,
            target.pod,
            mib(Some(rss)),
            mib(Some(usage)),
            mib(kmem),
            mib(peak),
            mib(target.memory_limit.map(|l| l as f64)),
        );
    }
}

#[test]
fn exposition_samples_are_read_by_name() {
    let text =
        "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 123\nx{a=\"b\"} 4\n";
    assert_eq!(sample(text, "process_resident_memory_bytes"), Some(123.0));
    assert_eq!(sample(text, "x"), Some(4.0));
    assert_eq!(sample(text, "y"), None);
    assert_eq!(sample(text, "process_resident_memory"), None);
}
