//! In-process mutation: a pod with 3 containers and 10 labels against 50 profiles.
//! Prints p50/p99 of the pure decision and of the whole review (JSON in, JSON out).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use koord_webhook::mutate::{MutationOptions, mutate_pod};
use koord_webhook::review::{Decider, Endpoint, answer, to_wire_json};

fn measure(iterations: usize, mut run: impl FnMut()) -> Vec<u64> {
    for _ in 0..iterations / 10 {
        run();
    }
    let mut samples: Vec<u64> = (0..iterations)
        .map(|_| {
            let started = Instant::now();
            run();
            started.elapsed().as_nanos() as u64
        })
        .collect();
    samples.sort_unstable();
    samples
}

fn report(name: &str, samples: &[u64]) {
    println!(
        "{name:<38} n={:<6} p50={:>8.1}us p99={:>8.1}us max={:>8.1}us",
        samples.len(),
        common::percentile_us(samples, 0.50),
        common::percentile_us(samples, 0.99),
        common::percentile_us(samples, 1.0),
    );
}

fn main() {
    let view = common::view();
    let pod: Pod = serde_json::from_value(common::pod()).unwrap();
    let mut roll = || 0u32;
    let check = mutate_pod(&pod, "payments", &view, MutationOptions::default(), &mut roll).unwrap();
    let applied = check.profiles.iter().filter(|p| p.applied).count();
    println!(
        "profiles: {}, applied to the pod: {applied}, patch operations: {}",
        check.profiles.len(),
        check.patch.0.len()
    );

    let samples = measure(20_000, || {
        let mut roll = || 0u32;
        std::hint::black_box(
            mutate_pod(&pod, "payments", &view, MutationOptions::default(), &mut roll).unwrap(),
        );
    });
    report("mutate_pod (typed pod in, patch out)", &samples);

    let decider = Decider::new(Arc::new(view));
    let body = common::review_body();
    let samples = measure(20_000, || {
        let mut roll = || 0u32;
        let answer = answer(Endpoint::MutatePod, &body, &decider, &mut roll);
        std::hint::black_box(to_wire_json(&answer.review).unwrap());
    });
    report("review (JSON bytes in, JSON bytes out)", &samples);
}
