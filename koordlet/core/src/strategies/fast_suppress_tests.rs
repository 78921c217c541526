use super::*;

const TICK: Duration = Duration::from_millis(50);
const NODE: NodeCpu = NodeCpu {
    capacity_milli: 4000,
    reserved_milli: 0,
};

fn strategy(policy: CpuSuppressPolicy) -> ResourceThresholdStrategy {
    ResourceThresholdStrategy {
        enable: Some(true),
        cpu_suppress_threshold_percent: Some(65),
        cpu_suppress_policy: Some(policy),
        ..Default::default()
    }
}

/// Feeds cumulative counters tick by tick from per-tick usages in milli-cores.
struct Feed {
    s: CounterSample,
}

impl Feed {
    fn new() -> Self {
        Feed {
            s: CounterSample::default(),
        }
    }
    /// Advances one tick with `non_be`, `be` and `system` milli-cores.
    fn next(&mut self, non_be: u64, be: u64, system: u64) -> CounterSample {
        let ns = |milli: u64| milli * TICK.as_nanos() as u64 / 1000;
        self.s.at += TICK;
        self.s.kubepods_ns += ns(non_be + be);
        self.s.be_ns += ns(be);
        self.s.node_busy_ns += ns(non_be + be + system);
        self.s
    }
}

fn quota_of(a: &FastAction) -> Option<i64> {
    match a {
        FastAction::SetQuota { quota_us, .. } => Some(*quota_us),
        _ => None,
    }
}

#[test]
fn a_spike_lowers_the_quota_on_the_next_tick() {
    let s = strategy(CpuSuppressPolicy::CfsQuota);
    let mut f = FastSuppress::new(FastSuppressConfig::default());
    let mut feed = Feed::new();
    let mut quota = Some(-1);
    assert_eq!(
        f.tick(feed.next(0, 0, 0), Some(&s), NODE, quota, None),
        FastAction::Idle
    );
    // From unlimited (-1) to a limit is a decrease: written at once.
    let a = f.tick(feed.next(100, 3000, 200), Some(&s), NODE, quota, None);
    // system 200, non-BE 100 -> budget 2600 - 100 - 200 = 2300m.
    assert_eq!(quota_of(&a), Some(230_000), "{a:?}");
    quota = Some(230_000);
    for _ in 0..5 {
        let a = f.tick(feed.next(100, 3000, 200), Some(&s), NODE, quota, None);
        assert_eq!(a, FastAction::Idle);
    }
    // LS steps to 2 cores: the very next tick asks for 2600 - 2000 - 200 = 400m.
    let a = f.tick(feed.next(2000, 1800, 200), Some(&s), NODE, quota, None);
    let FastAction::SetQuota {
        decision,
        quota_us,
        budget,
        usage,
    } = a
    else {
        panic!("no write: {a:?}")
    };
    assert_eq!(quota_us, 40_000);
    assert_eq!(f.budget_milli(), Some(400));
    assert_eq!(decision.action, "write");
    assert_eq!(budget.pod_non_be_milli, 2000);
    assert_eq!(usage.non_be_last_milli, 2000);
    assert_eq!(usage.be_milli, 1800);
}

#[test]
fn the_end_of_a_spike_is_forgotten_gradually_and_increases_wait_their_interval() {
    let s = strategy(CpuSuppressPolicy::CfsQuota);
    let mut f = FastSuppress::new(FastSuppressConfig::default());
    let mut feed = Feed::new();
    f.tick(feed.next(0, 0, 0), Some(&s), NODE, Some(-1), None);
    f.tick(feed.next(2000, 500, 0), Some(&s), NODE, Some(-1), None);
    let mut quota = Some(60_000);
    // LS goes idle: non-BE fed to the budget decays, never jumps to 0.
    f.tick(feed.next(0, 500, 0), Some(&s), NODE, quota, None);
    let u = f.usage();
    assert_eq!(u.non_be_last_milli, 0);
    assert!(u.non_be_milli > 1000 && u.non_be_milli < 2000, "{u:?}");
    // Increases: at most one per second, each at most 10 % of the node (40000 us).
    let mut writes = vec![];
    for i in 1..=60 {
        let a = f.tick(feed.next(0, 500, 0), Some(&s), NODE, quota, None);
        if let Some(q) = quota_of(&a) {
            assert!(
                q > quota.unwrap_or(0) && q - quota.unwrap_or(0) <= 40_000,
                "{a:?}"
            );
            writes.push((i, q));
            quota = Some(q);
        }
    }
    assert!(writes.windows(2).all(|w| w[1].0 - w[0].0 >= 20), "{writes:?}");
    assert!(writes.len() >= 2, "{writes:?}");
    // A new spike is not held back by the increase interval.
    let a = f.tick(feed.next(2400, 500, 0), Some(&s), NODE, quota, None);
    assert_eq!(quota_of(&a), Some(20_000));
}

#[test]
fn disabled_restores_once_per_transition() {
    let s = strategy(CpuSuppressPolicy::CfsQuota);
    let off = ResourceThresholdStrategy {
        enable: Some(false),
        ..s.clone()
    };
    let mut f = FastSuppress::new(FastSuppressConfig::default());
    let mut feed = Feed::new();
    assert_eq!(
        f.tick(feed.next(0, 0, 0), None, NODE, None, None),
        FastAction::Restore
    );
    assert_eq!(
        f.tick(feed.next(0, 0, 0), None, NODE, None, None),
        FastAction::Idle
    );
    assert_eq!(
        f.tick(feed.next(0, 0, 0), Some(&off), NODE, None, None),
        FastAction::Idle
    );
    let a = f.tick(feed.next(2000, 1000, 0), Some(&s), NODE, Some(-1), None);
    assert!(quota_of(&a).is_some());
    assert_eq!(
        f.tick(feed.next(0, 0, 0), Some(&off), NODE, None, None),
        FastAction::Restore
    );
    assert_eq!(
        f.tick(feed.next(0, 0, 0), Some(&off), NODE, None, None),
        FastAction::Idle
    );
}

#[test]
fn a_counter_going_backwards_or_a_stuck_clock_decides_nothing() {
    let s = strategy(CpuSuppressPolicy::CfsQuota);
    let mut f = FastSuppress::new(FastSuppressConfig::default());
    let mut feed = Feed::new();
    f.tick(feed.next(100, 100, 0), Some(&s), NODE, Some(-1), None);
    let mut back = feed.next(2000, 1000, 0);
    back.be_ns = 0;
    assert_eq!(f.tick(back, Some(&s), NODE, Some(-1), None), FastAction::Idle);
    let same = back;
    assert_eq!(f.tick(same, Some(&s), NODE, Some(-1), None), FastAction::Idle);
    // Unknown capacity: nothing.
    let a = f.tick(
        feed.next(2000, 1000, 0),
        Some(&s),
        NodeCpu::default(),
        Some(-1),
        None,
    );
    assert_eq!(a, FastAction::Idle);
}

#[test]
fn reservation_and_floor_come_from_the_decision_core() {
    let mut s = strategy(CpuSuppressPolicy::CfsQuota);
    s.cpu_suppress_min_percent = Some(20);
    let node = NodeCpu {
        capacity_milli: 4000,
        reserved_milli: 500,
    };
    let mut f = FastSuppress::new(FastSuppressConfig::default());
    let mut feed = Feed::new();
    f.tick(feed.next(0, 0, 0), Some(&s), node, Some(-1), None);
    // system 100 < reservation 500: 2600 - 3000 - 500 < floor 800m.
    let a = f.tick(feed.next(3000, 1000, 100), Some(&s), node, Some(-1), None);
    let FastAction::SetQuota { budget, quota_us, .. } = a else {
        panic!("{a:?}")
    };
    assert_eq!(budget.system_milli, 500);
    assert_eq!(budget.budget_milli, 800);
    assert_eq!(quota_us, 80_000);
}

#[test]
fn cpuset_policy_asks_for_a_resize_only_when_the_count_changes() {
    let s = strategy(CpuSuppressPolicy::Cpuset);
    let mut f = FastSuppress::new(FastSuppressConfig::default());
    let mut feed = Feed::new();
    let size = |current| {
        Some(CpusetSize {
            current,
            available: 4,
            min: 2,
        })
    };
    f.tick(feed.next(0, 0, 0), Some(&s), NODE, None, size(4));
    // Budget 2600 - 100 = 2500m -> 3 CPUs.
    let a = f.tick(feed.next(100, 3000, 0), Some(&s), NODE, None, size(4));
    assert!(
        matches!(a, FastAction::ResizeCpuset { wanted_cpus: 3, .. }),
        "{a:?}"
    );
    assert_eq!(
        f.tick(feed.next(100, 3000, 0), Some(&s), NODE, None, size(3)),
        FastAction::Idle
    );
    // Spike: 2600 - 2500 = 100m -> the floor of 2 CPUs.
    let a = f.tick(feed.next(2500, 1000, 0), Some(&s), NODE, None, size(3));
    assert!(
        matches!(a, FastAction::ResizeCpuset { wanted_cpus: 2, .. }),
        "{a:?}"
    );
    // Wanting more than is available: no endless resizes.
    let idle = FastSuppress::new(FastSuppressConfig::default());
    let mut g = idle;
    let mut feed = Feed::new();
    let few = Some(CpusetSize {
        current: 2,
        available: 2,
        min: 2,
    });
    g.tick(feed.next(0, 0, 0), Some(&s), NODE, None, few);
    assert_eq!(
        g.tick(feed.next(0, 0, 0), Some(&s), NODE, None, few),
        FastAction::Idle
    );
}

/// Host applications outside kubepods are non-BE host usage, not system usage: with a node
/// reservation above the system share, they are still subtracted in full (upstream's formula),
/// and a host-application spike lowers the quota on the next tick like a pod spike.
#[test]
fn host_applications_are_non_be_usage_not_system() {
    let s = strategy(CpuSuppressPolicy::CfsQuota);
    let node = NodeCpu {
        capacity_milli: 4000,
        reserved_milli: 500,
    };
    let ns = |milli: u64| milli * TICK.as_nanos() as u64 / 1000;
    let mut f = FastSuppress::new(FastSuppressConfig::default());
    let mut sample = CounterSample::default();
    let mut step = |f: &mut FastSuppress, kubepods: u64, be: u64, host: u64, system: u64| {
        sample.at += TICK;
        sample.kubepods_ns += ns(kubepods);
        sample.be_ns += ns(be);
        sample.host_ns += ns(host);
        sample.node_busy_ns += ns(kubepods + host + system);
        f.tick(sample, Some(&s), node, Some(-1), None)
    };
    step(&mut f, 0, 0, 0, 0);
    // Host app 800m, system 100m (< reservation 500m): budget 2600 - 800 - 500 = 1300m.
    let a = step(&mut f, 1000, 1000, 800, 100);
    let FastAction::SetQuota { budget, usage, .. } = a else {
        panic!("{a:?}")
    };
    assert_eq!(usage.host_app_milli, 800);
    assert_eq!(budget.host_app_non_be_milli, 800);
    assert_eq!(budget.pod_non_be_milli, 0);
    assert_eq!(budget.system_milli, 500);
    assert_eq!(budget.budget_milli, 1300);
    // Counted as system instead it would hide under the reservation: 2600 - max(900, 500) = 1700.
}
