//! BE throughput: the bogo-ops per second stress-ng reports per stressor in its `--yaml` file.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::BenchError;

#[derive(Debug, Deserialize)]
struct Report {
    metrics: Vec<Metric>,
}

#[derive(Debug, Deserialize)]
struct Metric {
    stressor: String,
    #[serde(rename = "bogo-ops-per-second-real-time")]
    per_second: f64,
}

/// Bogo-ops per second (wall clock) per stressor, summed over instances of one stressor.
pub type Throughput = BTreeMap<String, f64>;

/// Reads a stress-ng `--yaml` report.
pub fn parse_yaml(text: &str) -> Result<Throughput, BenchError> {
    let report: Report = serde_yaml::from_str(text).map_err(|e| BenchError::StressNg(e.to_string()))?;
    if report.metrics.is_empty() {
        return Err(BenchError::StressNg("the report has no metrics".into()));
    }
    let mut out = Throughput::new();
    for m in report.metrics {
        if !m.per_second.is_finite() || m.per_second < 0.0 {
            return Err(BenchError::StressNg(format!(
                "stressor {}: bad rate {}",
                m.stressor, m.per_second
            )));
        }
        *out.entry(m.stressor).or_default() += m.per_second;
    }
    Ok(out)
}

/// BE throughput as a share of stand-alone: the mean over stressors of `run / alone`, so that
/// every stressor (CPU, memory bandwidth, cache) weighs the same whatever its bogo-op size.
/// Stressors missing from either side are an error: the two runs were not the same job.
pub fn share_of(run: &Throughput, alone: &Throughput) -> Result<f64, BenchError> {
    if run.keys().ne(alone.keys()) {
        return Err(BenchError::StressNg(format!(
            "stressors differ: {:?} vs {:?}",
            run.keys().collect::<Vec<_>>(),
            alone.keys().collect::<Vec<_>>()
        )));
    }
    let shares: Vec<f64> = run
        .iter()
        .filter_map(|(name, rate)| alone.get(name).filter(|a| **a > 0.0).map(|a| rate / a))
        .collect();
    if shares.is_empty() {
        return Err(BenchError::StressNg("stand-alone run did no work".into()));
    }
    Ok(shares.iter().sum::<f64>() / shares.len() as f64)
}

/// Mean per stressor over several runs.
pub fn mean(runs: &[Throughput]) -> Throughput {
    let mut sum = Throughput::new();
    for run in runs {
        for (k, v) in run {
            *sum.entry(k.clone()).or_default() += v;
        }
    }
    for v in sum.values_mut() {
        *v /= runs.len().max(1) as f64;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "---\nsystem-info:\n      stress-ng-version: 0.15.06\n      cpus: 2\n\nmetrics:\n    - stressor: cpu\n      bogo-ops: 1520\n      bogo-ops-per-second-usr-sys-time: 2306.147096\n      bogo-ops-per-second-real-time: 505.072684\n      wall-clock-time: 3.009468\n\n    - stressor: cache\n      bogo-ops: 630448\n      bogo-ops-per-second-real-time: 209069.303301\n      cache-ops-per-second: 193568079.635377\n\n    - stressor: cpu\n      bogo-ops: 10\n      bogo-ops-per-second-real-time: 4.927316\n...\n";

    #[test]
    fn reads_stress_ng_yaml_and_sums_instances() {
        let t = parse_yaml(REPORT).unwrap();
        assert_eq!(t.len(), 2);
        assert!((t["cpu"] - 510.0).abs() < 1e-6, "{t:?}");
        assert!((t["cache"] - 209069.303301).abs() < 1e-6);
    }

    #[test]
    fn share_weighs_each_stressor_the_same() {
        let alone = parse_yaml(REPORT).unwrap();
        let half: Throughput = alone
            .iter()
            .map(|(k, v)| (k.clone(), if k == "cpu" { v / 2.0 } else { *v }))
            .collect();
        assert!((share_of(&half, &alone).unwrap() - 0.75).abs() < 1e-9);
        let other = Throughput::from([("vm".to_string(), 1.0)]);
        assert!(share_of(&other, &alone).is_err());
        assert!(parse_yaml("metrics: []\n").is_err());
        assert!(parse_yaml("not yaml: [").is_err());
    }
}
