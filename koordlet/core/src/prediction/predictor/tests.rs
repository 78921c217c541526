#![allow(clippy::unwrap_used)]
use super::*;

const GI: f64 = 1024.0 * 1024.0 * 1024.0;
const DAY_MS: i64 = 24 * 3600 * 1000;
const NOW: i64 = 100 * DAY_MS;

fn pod(uid: &str, priority: PriorityClass, cpu: f64, memory_gi: f64) -> PredictPod {
    PredictPod {
        uid: uid.to_string(),
        name: format!("ns/{uid}"),
        priority,
        created_ms: Some(NOW - 2 * DAY_MS),
        terminating: false,
        request: Amounts::new(cpu, memory_gi * GI),
    }
}

fn peaks(list: &[(&str, f64, f64)]) -> HashMap<String, Peak> {
    list.iter()
        .map(|(uid, cpu, mem_gi)| (uid.to_string(), Amounts::new(*cpu, mem_gi * GI)))
        .collect()
}

fn input<'a>(pods: &'a [PredictPod], pod_peaks: &'a HashMap<String, Peak>) -> PredictInput<'a> {
    PredictInput {
        pods,
        pod_peaks,
        sys_peak: Some(Amounts::new(1.0, 1.0 * GI)),
        prod_peak: Some(Amounts::new(3.0, 6.0 * GI)),
        none_peak: Some(Amounts::ZERO),
        capacity: Amounts::new(100.0, 400.0 * GI),
        now_ms: NOW,
        settings: PredictSettings::default(),
    }
}

fn close(a: Amounts, cpu: f64, memory_gi: f64) -> bool {
    (a.cpu_cores - cpu).abs() < 1e-9 && (a.memory_bytes - memory_gi * GI).abs() < 1.0
}

#[test]
fn pods_below_and_above_their_request() {
    // a: request 4 / 8Gi, peak 1 / 2Gi -> peak×1.1 = 1.1 / 2.2Gi, reclaimable 2.9 / 5.8Gi.
    // b: request 1 / 1Gi, peak 2 / 4Gi -> 2.2 / 4.4Gi unreclaimable, nothing reclaimable.
    let pods = [
        pod("a", PriorityClass::Prod, 4.0, 8.0),
        pod("b", PriorityClass::None, 1.0, 1.0),
    ];
    let peaks = peaks(&[("a", 1.0, 2.0), ("b", 2.0, 4.0)]);
    let p = pod_predictor(&input(&pods, &peaks));
    assert!(close(p.unreclaimable, 3.3, 6.6), "{p:?}");
    assert!(close(p.reclaimable, 2.9, 5.8), "{p:?}");
    assert!(close(p.result, 2.9, 5.8), "{p:?}");
    assert_eq!(p.counted, 2);
}

#[test]
fn other_classes_cold_start_and_terminating_pods_add_nothing() {
    let mut young = pod("young", PriorityClass::Prod, 4.0, 8.0);
    young.created_ms = Some(NOW - DAY_MS + 1000);
    let mut leaving = pod("leaving", PriorityClass::Prod, 4.0, 8.0);
    leaving.terminating = true;
    let mut unknown_age = pod("unknown-age", PriorityClass::Prod, 2.0, 2.0);
    unknown_age.created_ms = None;
    let pods = [
        young,
        leaving,
        pod("batch", PriorityClass::Batch, 4.0, 8.0),
        pod("mid", PriorityClass::Mid, 4.0, 8.0),
        unknown_age,
    ];
    let peaks = peaks(&[
        ("young", 1.0, 1.0),
        ("leaving", 1.0, 1.0),
        ("batch", 1.0, 1.0),
        ("mid", 1.0, 1.0),
        ("unknown-age", 1.0, 1.0),
    ]);
    let p = pod_predictor(&input(&pods, &peaks));
    assert_eq!((p.cold, p.terminating, p.counted), (1, 1, 1), "{p:?}");
    assert!(close(p.unreclaimable, 1.1, 1.1), "{p:?}");
    assert!(close(p.reclaimable, 0.9, 0.9), "{p:?}");
    // The priority predictor counts the young pod's request (active), not the terminating one's
    // nor other classes'.
    let q = priority_predictor(&input(&pods, &peaks)).unwrap();
    assert!(close(q.reclaim_request, 6.0, 10.0), "{q:?}");
    // With no cold start the young pod counts.
    let mut i = input(&pods, &peaks);
    i.settings.cold_start = Duration::ZERO;
    assert_eq!(pod_predictor(&i).counted, 2);
}

#[test]
fn a_pod_without_a_model_counts_its_request_as_unreclaimable() {
    let pods = [
        pod("a", PriorityClass::Prod, 4.0, 8.0),
        pod("new", PriorityClass::Prod, 2.0, 3.0),
    ];
    let peaks = peaks(&[("a", 1.0, 2.0)]);
    let p = pod_predictor(&input(&pods, &peaks));
    assert_eq!(p.without_model, ["ns/new"]);
    assert!(close(p.unreclaimable, 1.1 + 2.0, 2.2 + 3.0), "{p:?}");
    assert!(close(p.reclaimable, 2.9, 5.8), "{p:?}");
}

#[test]
fn safety_margin_arithmetic() {
    let pods = [pod("a", PriorityClass::Prod, 10.0, 10.0)];
    let peaks = peaks(&[("a", 2.0, 4.0)]);
    for (margin, cpu, mem) in [(0, 8.0, 6.0), (10, 7.8, 5.6), (50, 7.0, 4.0), (400, 0.0, 0.0)] {
        let mut i = input(&pods, &peaks);
        i.settings.safety_margin_percent = margin;
        let p = pod_predictor(&i);
        assert!(close(p.result, cpu, mem), "margin {margin}: {p:?}");
    }
    // Priority: (sys 1 + prod 3 + none 0) × 1.1 = 4.4 cores; (1 + 6)Gi × 1.1 = 7.7Gi.
    let q = priority_predictor(&input(&pods, &peaks)).unwrap();
    assert!(close(q.unreclaimable, 4.4, 7.7), "{q:?}");
    assert!(close(q.reclaimable, 5.6, 2.3), "{q:?}");
    // The prod peak leaves the system out: (prod 3 + none 0) × 1.1, 6Gi × 1.1.
    assert!(close(q.prod_pods_peak, 3.3, 6.6), "{q:?}");
}

#[test]
fn the_smaller_predictor_wins_per_resource() {
    // Pod predictor: 10 − 2.2 = 7.8 cores, 10 − 4.4 = 5.6Gi (margin 10 %).
    // Priority predictor: 10 − 4.4 = 5.6 cores, 10 − 7.7 = 2.3Gi; with a tiny class peak the
    // priority CPU is larger than the pod CPU.
    let pods = [pod("a", PriorityClass::Prod, 10.0, 10.0)];
    let peaks = peaks(&[("a", 2.0, 4.0)]);
    let mut i = input(&pods, &peaks);
    i.sys_peak = Some(Amounts::new(0.1, 1.0 * GI));
    i.prod_peak = Some(Amounts::new(0.4, 6.0 * GI));
    let r = predict_prod_reclaimable(&i).unwrap();
    assert!(close(r.pod.result, 7.8, 5.6), "{r:?}");
    assert!(close(r.priority.result, 9.45, 2.3), "{r:?}");
    assert!(close(r.result, 7.8, 2.3), "{r:?}");
}

#[test]
fn capacity_bounds_the_result() {
    // Requests far beyond the node: reclaimable is bounded by capacity − unreclaimable.
    let pods = [pod("a", PriorityClass::Prod, 500.0, 1000.0)];
    let peaks = peaks(&[("a", 90.0, 300.0)]);
    let i = input(&pods, &peaks);
    let p = pod_predictor(&i);
    assert!(close(p.result, 1.0, 70.0), "{p:?}"); // 100 − 99, 400 − 330
    // Unreclaimable past capacity: 0, never negative.
    let peaks = self::peaks(&[("a", 200.0, 900.0)]);
    let p = pod_predictor(&input(&pods, &peaks));
    assert!(close(p.result, 0.0, 0.0), "{p:?}");
}

#[test]
fn missing_node_models_make_the_prediction_unavailable() {
    let pods = [pod("a", PriorityClass::Prod, 4.0, 8.0)];
    let peaks = peaks(&[("a", 1.0, 2.0)]);
    let mut i = input(&pods, &peaks);
    i.sys_peak = None;
    assert_eq!(predict_prod_reclaimable(&i), Err(MissingModel::System));
    let mut i = input(&pods, &peaks);
    i.prod_peak = None;
    assert_eq!(
        predict_prod_reclaimable(&i).map(|r| r.result),
        Err(MissingModel::Class("koord-prod"))
    );
    let mut i = input(&pods, &peaks);
    i.none_peak = None;
    assert_eq!(predict_prod_reclaimable(&i).unwrap_err().label(), "none");
}
