//! A koordlet restarted on a steady node leaves every cgroup alone: its first rounds read what
//! the kernel holds, find the plan already in place and write nothing (the executor compares
//! semantically before writing; its `changed` counter is the audit log's line count).

use std::time::Duration;

use koord_test_support::poll::wait_for;
use serde_json::json;

use crate::env::{FaultEnv, be_pod, ls_pod};

const CHANGED: &str = "koordlet_cgroup_writes_total{";
const ROUNDS: &str = "koordlet_collection_round_seconds_count";

async fn changed_writes(env: &FaultEnv) -> f64 {
    env.metric_where(CHANGED, &["result=\"changed\""]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_on_a_steady_node_writes_nothing_in_the_first_rounds() {
    let _serial = crate::SERIAL.lock().await;
    let Some(mut env) = FaultEnv::start("restart", 8 << 30).await else {
        return;
    };
    env.create_running(ls_pod("web")).await;
    env.create_running(be_pod("batch", "20Mi")).await;
    // Deterministic decisions only (suppress follows the machine's load, which is noisy): BE
    // limits from batch resources, burst for the LS pod, the CPU QoS classes.
    env.node_slo(json!({"cpuBurstStrategy": {"policy": "cpuBurstOnly", "cpuBurstPercent": 100}}))
        .await;
    let gates = "BECPUSuppress=false";
    env.start_koordlet(gates);
    // Steady: no change for 5 rounds in a row.
    let mut last = -1.0;
    let mut quiet = 0;
    wait_for(
        "the first koordlet to settle",
        Duration::from_secs(60),
        async || {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = changed_writes(&env).await;
            quiet = if now == last { quiet + 1 } else { 0 };
            last = now;
            (quiet >= 5).then_some(())
        },
    )
    .await;
    assert!(
        last > 0.0,
        "the first koordlet wrote nothing: the scenario proves nothing"
    );
    println!("first koordlet settled after {last} changes");
    env.stop_koordlet().await;

    env.start_koordlet(gates);
    wait_for(
        "five rounds of the restarted koordlet",
        Duration::from_secs(30),
        async || (env.metric(ROUNDS).await >= 5.0).then_some(()),
    )
    .await;
    assert_eq!(
        changed_writes(&env).await,
        0.0,
        "the restarted koordlet changed a cgroup"
    );
    let checked = env.metric(CHANGED).await;
    println!("restarted koordlet: 0 changes among {checked} write decisions checked against the kernel");
    env.stop_koordlet().await;
}
