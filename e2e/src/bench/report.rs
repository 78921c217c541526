//! Figures per (policy, LS workload, load): medians over repetitions with their spread, the
//! inflation against LS alone, and the Markdown table.

use std::fmt::Write;

/// One measured point: one repetition of one policy, workload and load.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Isolation policy name (a row of the table).
    pub policy: String,
    /// LS workload (`nginx`, `memcached`).
    pub workload: String,
    /// LS load, percent of measured capacity.
    pub load_pct: u32,
    /// LS latency quantiles, ms.
    pub p50_ms: f64,
    /// p99, ms.
    pub p99_ms: f64,
    /// p99.9, ms.
    pub p999_ms: f64,
    /// Requests due.
    pub due: u64,
    /// Failed requests.
    pub errors: u64,
    /// Timed-out requests.
    pub timeouts: u64,
    /// BE throughput as a share of BE alone (none without BE).
    pub be_share: Option<f64>,
    /// The BE job's batch-cpu (request = limit, milli-cores): what the node offered, at most
    /// the whole node. koordlet turns it into the job's CFS quota.
    pub be_batch_milli_cpu: Option<u64>,
    /// Node CPU utilisation over the point, 0..1.
    pub node_cpu: f64,
    /// 1-minute load average at the end of the point.
    pub loadavg: f64,
}

/// One table row: a policy, workload and load over its repetitions.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Policy.
    pub policy: String,
    /// LS workload.
    pub workload: String,
    /// Load, percent of capacity.
    pub load_pct: u32,
    /// Repetitions.
    pub reps: usize,
    /// Median p50, ms.
    pub p50_ms: f64,
    /// Median p99, ms.
    pub p99_ms: f64,
    /// Smallest and largest p99 over repetitions, ms.
    pub p99_spread: (f64, f64),
    /// Median p99.9, ms.
    pub p999_ms: f64,
    /// Median p99 over LS alone's median p99 at the same workload and load, minus one.
    pub p99_inflation: Option<f64>,
    /// Errors and timeouts over requests due, all repetitions.
    pub failed: (u64, u64, u64),
    /// Median BE share and its spread.
    pub be_share: Option<(f64, f64, f64)>,
    /// Smallest and largest batch-cpu of the BE jobs, milli-cores.
    pub be_batch_milli_cpu: Option<(u64, u64)>,
    /// Mean node CPU utilisation.
    pub node_cpu: f64,
    /// Mean load average.
    pub loadavg: f64,
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

fn spread(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(*v), hi.max(*v))
        })
}

/// Rows in first-seen order of (policy, workload, load); inflation against `baseline`.
pub fn aggregate(points: &[Point], baseline: &str) -> Vec<Row> {
    let mut keys: Vec<(String, String, u32)> = Vec::new();
    for p in points {
        let key = (p.policy.clone(), p.workload.clone(), p.load_pct);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut rows: Vec<Row> = keys
        .into_iter()
        .map(|(policy, workload, load_pct)| {
            let mine: Vec<&Point> = points
                .iter()
                .filter(|p| p.policy == policy && p.workload == workload && p.load_pct == load_pct)
                .collect();
            let col = |f: fn(&Point) -> f64| mine.iter().map(|p| f(p)).collect::<Vec<f64>>();
            let p99s = col(|p| p.p99_ms);
            let shares: Vec<f64> = mine.iter().filter_map(|p| p.be_share).collect();
            let be_share = (!shares.is_empty()).then(|| {
                let (lo, hi) = spread(&shares);
                (median(&mut shares.clone()), lo, hi)
            });
            let n = mine.len().max(1) as f64;
            let batch: Vec<u64> = mine.iter().filter_map(|p| p.be_batch_milli_cpu).collect();
            let be_batch_milli_cpu = batch.iter().min().copied().zip(batch.iter().max().copied());
            Row {
                be_batch_milli_cpu,
                reps: mine.len(),
                p50_ms: median(&mut col(|p| p.p50_ms)),
                p99_ms: median(&mut p99s.clone()),
                p99_spread: spread(&p99s),
                p999_ms: median(&mut col(|p| p.p999_ms)),
                p99_inflation: None,
                failed: (
                    mine.iter().map(|p| p.errors).sum(),
                    mine.iter().map(|p| p.timeouts).sum(),
                    mine.iter().map(|p| p.due).sum(),
                ),
                be_share,
                node_cpu: mine.iter().map(|p| p.node_cpu).sum::<f64>() / n,
                loadavg: mine.iter().map(|p| p.loadavg).sum::<f64>() / n,
                policy,
                workload,
                load_pct,
            }
        })
        .collect();
    let base: Vec<(String, u32, f64)> = rows
        .iter()
        .filter(|r| r.policy == baseline)
        .map(|r| (r.workload.clone(), r.load_pct, r.p99_ms))
        .collect();
    for row in &mut rows {
        row.p99_inflation = base
            .iter()
            .find(|(w, l, _)| *w == row.workload && *l == row.load_pct)
            .filter(|(_, _, b)| *b > 0.0)
            .map(|(_, _, b)| row.p99_ms / b - 1.0);
    }
    rows
}

/// The Markdown table of `rows`.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| LS | load | policy | p50 ms | p99 ms (min–max) | p99.9 ms | p99 inflation | errors / timeouts | BE throughput (min–max) | BE batch-cpu | node CPU | loadavg |\n\
         |---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let inflation = r
            .p99_inflation
            .map_or("—".to_string(), |i| format!("{:+.0} %", i * 100.0));
        let be = r.be_share.map_or("—".to_string(), |(m, lo, hi)| {
            format!("{:.0} % ({:.0}–{:.0})", m * 100.0, lo * 100.0, hi * 100.0)
        });
        let batch = match r.be_batch_milli_cpu {
            None => "—".to_string(),
            Some((lo, hi)) if lo == hi => format!("{lo}m"),
            Some((lo, hi)) => format!("{lo}–{hi}m"),
        };
        let _ = writeln!(
            out,
            "| {} | {} % | {} | {:.2} | {:.2} ({:.2}–{:.2}) | {:.2} | {} | {} / {} of {} | {} | {} | {:.0} % | {:.1} |",
            r.workload,
            r.load_pct,
            r.policy,
            r.p50_ms,
            r.p99_ms,
            r.p99_spread.0,
            r.p99_spread.1,
            r.p999_ms,
            inflation,
            r.failed.0,
            r.failed.1,
            r.failed.2,
            be,
            batch,
            r.node_cpu * 100.0,
            r.loadavg
        );
    }
    out
}

/// Per policy at `load_pct`: how far it is from the goal (p99 inflation ≤ `max_inflation` with
/// BE share ≥ `min_share`), one line each.
pub fn goal_lines(rows: &[Row], load_pct: u32, max_inflation: f64, min_share: f64) -> Vec<String> {
    rows.iter()
        .filter(|r| r.load_pct == load_pct)
        .filter_map(|r| {
            let (inflation, (share, _, _)) = (r.p99_inflation?, r.be_share?);
            let met = inflation <= max_inflation && share >= min_share;
            Some(format!(
                "{} {} at {} %: p99 {:+.0} % (goal ≤ {:+.0} %), BE {:.0} % (goal ≥ {:.0} %): {}",
                r.workload,
                r.policy,
                load_pct,
                inflation * 100.0,
                max_inflation * 100.0,
                share * 100.0,
                min_share * 100.0,
                if met { "goal met" } else { "goal missed" }
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(policy: &str, p99: f64, share: Option<f64>) -> Point {
        Point {
            policy: policy.into(),
            workload: "nginx".into(),
            load_pct: 60,
            p50_ms: p99 / 4.0,
            p99_ms: p99,
            p999_ms: p99 * 2.0,
            due: 100,
            errors: 1,
            timeouts: 0,
            be_share: share,
            be_batch_milli_cpu: share.map(|s| if s > 0.5 { 1500 } else { 2000 }),
            node_cpu: 0.5,
            loadavg: 1.0,
        }
    }

    #[test]
    fn medians_spread_inflation_and_table() {
        let points = [
            point("ls-alone", 1.0, None),
            point("ls-alone", 3.0, None),
            point("ls-alone", 2.0, None),
            point("cpuset", 2.2, Some(0.6)),
            point("cpuset", 2.0, Some(0.4)),
        ];
        let rows = aggregate(&points, "ls-alone");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].p99_ms, 2.0);
        assert_eq!(rows[0].p99_spread, (1.0, 3.0));
        assert_eq!(rows[0].p99_inflation, Some(0.0));
        assert!((rows[1].p99_ms - 2.1).abs() < 1e-9);
        assert!((rows[1].p99_inflation.unwrap() - 0.05).abs() < 1e-9);
        assert_eq!(rows[1].be_share, Some((0.5, 0.4, 0.6)));
        assert_eq!(rows[1].failed, (2, 0, 200));
        let table = markdown(&rows);
        assert_eq!(table.lines().count(), 4, "{table}");
        assert!(table.contains("| nginx | 60 % | cpuset | 0.53 | 2.10 (2.00–2.20) | 4.20 | +5 % | 2 / 0 of 200 | 50 % (40–60) | 1500–2000m | 50 % | 1.0 |"), "{table}");
        assert_eq!(rows[1].be_batch_milli_cpu, Some((1500, 2000)));
        let goal = goal_lines(&rows, 60, 0.10, 0.5);
        assert_eq!(goal.len(), 1);
        assert!(goal[0].ends_with("goal met"), "{goal:?}");
    }
}
