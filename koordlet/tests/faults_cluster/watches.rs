//! Watches cut: every watch of the API server ended with 410 Gone at once (its history
//! compacted, so no resume works and every client lists again), several times; then the
//! NodeSLO deleted (koordlet keeps enforcing the last one it saw) and recreated with other
//! settings (koordlet follows the new object).

use std::time::Duration;

use koord_test_support::poll::wait_for;
use kube::api::DeleteParams;
use serde_json::json;

use crate::env::{FaultEnv, be_pod};

const STORMS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watches_expired_at_once_and_a_nodeslo_deleted_and_recreated_are_followed() {
    let _serial = crate::SERIAL.lock().await;
    let Some(mut env) = FaultEnv::start("watches", 8 << 30).await else {
        return;
    };
    env.create_running(be_pod("batch", "20Mi")).await;
    let suppress = |enable: bool| {
        json!({"resourceUsedThresholdWithBE": {"enable": enable, "cpuSuppressPolicy": "cfsQuota",
               "cpuSuppressThresholdPercent": 65}})
    };
    env.node_slo(suppress(true)).await;
    env.start_koordlet("");
    wait_for("the BE quota suppressed", Duration::from_secs(30), async || {
        (env.be_quota() > 0).then_some(())
    })
    .await;

    // 410 storms: koordlet lists again and keeps following its NodeSLO.
    for _ in 0..STORMS {
        env.cluster.api_server().expire_watches();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    env.node_slo(suppress(false)).await;
    wait_for(
        "suppress off after the storms",
        Duration::from_secs(20),
        async || (env.be_quota() == -1).then_some(()),
    )
    .await;
    env.node_slo(suppress(true)).await;
    wait_for("suppress on again", Duration::from_secs(20), async || {
        (env.be_quota() > 0).then_some(())
    })
    .await;

    // Deleted: the last NodeSLO seen stays in force (a quota reset by hand is put back).
    env.node_slos()
        .delete(&env.node.name, &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    std::fs::write(env.be_quota_file(), "-1").unwrap();
    wait_for(
        "the deleted NodeSLO still enforced",
        Duration::from_secs(10),
        async || (env.be_quota() > 0).then_some(()),
    )
    .await;
    // Recreated with suppress off: followed.
    env.node_slo(suppress(false)).await;
    wait_for(
        "the recreated NodeSLO followed",
        Duration::from_secs(20),
        async || (env.be_quota() == -1).then_some(()),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        env.be_quota(),
        -1,
        "suppress came back after the recreated NodeSLO turned it off"
    );
    env.stop_koordlet().await;
}
