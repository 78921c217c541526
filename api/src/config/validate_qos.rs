//! Rules of `resource-qos-config`: per-class CPU, memory, block I/O, resctrl and network QoS.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::ConfigKey;
use super::error::{ConfigError, Rule};
use super::layer::Layered;
use super::syntax::is_non_negative_quantity;
use super::validate::Check;
use crate::nodeslo::{NetworkQosCfg, ResourceQos, ResourceQosStrategy, SystemStrategy};
use crate::quantity::ExactQuantity;

/// Validates one ResourceQOS strategy.
pub(crate) fn resource_qos(s: &ResourceQosStrategy, c: &mut Check<'_>) {
    let classes = [
        ("lsrClass", &s.lsr_class),
        ("lsClass", &s.ls_class),
        ("beClass", &s.be_class),
        ("systemClass", &s.system_class),
        ("cgroupRoot", &s.cgroup_root),
    ];
    for (name, class) in classes {
        if let Some(q) = class {
            class_qos(q, &mut c.sub(name));
        }
    }
    network_totals(s, c);
}

fn class_qos(q: &ResourceQos, c: &mut Check<'_>) {
    if let Some(cpu) = &q.cpu_qos {
        let mut cc = c.sub("cpuQOS");
        cc.range("groupIdentity", cpu.group_identity, Some(-1), Some(2));
        cc.range("schedIdle", cpu.sched_idle, Some(0), Some(1));
    }
    if let Some(m) = &q.memory_qos {
        let mut mc = c.sub("memoryQOS");
        for (f, v) in [
            ("minLimitPercent", m.min_limit_percent),
            ("lowLimitPercent", m.low_limit_percent),
            ("throttlingPercent", m.throttling_percent),
            ("wmarkRatio", m.wmark_ratio),
        ] {
            mc.range(f, v, Some(0), Some(100));
        }
        mc.range("wmarkScalePermill", m.wmark_scale_permill, Some(1), Some(1000));
        mc.range("wmarkMinAdj", m.wmark_min_adj, Some(-25), Some(50));
        mc.range("priorityEnable", m.priority_enable, Some(0), Some(1));
        mc.range("priority", m.priority, Some(0), Some(12));
        mc.range("oomKillGroup", m.oom_kill_group, Some(0), Some(1));
        mc.range(
            "pageCacheLimitPercent",
            m.page_cache_limit_percent,
            Some(0),
            Some(100),
        );
        mc.range("pageCacheLimitSize", m.page_cache_limit_size, Some(0), None);
    }
    if let Some(b) = &q.blkio_qos {
        for (i, block) in b.blocks.iter().flatten().enumerate() {
            let mut bc = c.sub(&format!("blkioQOS.blocks[{i}]"));
            if let Some(t) = block.block_type.as_deref()
                && !["device", "volumegroup", "podvolume"].contains(&t)
            {
                bc.push(
                    "type",
                    Rule::NotOneOf {
                        value: t.to_owned(),
                        allowed: "device, volumegroup, podvolume",
                    },
                );
            }
            if let Some(w) = block.io_cfg.as_ref().and_then(|io| io.get("ioWeightPercent")) {
                match w.as_i64() {
                    Some(v) => bc.range("ioCfg.ioWeightPercent", Some(v), Some(1), Some(100)),
                    None => bc.push(
                        "ioCfg.ioWeightPercent",
                        Rule::WrongType(format!("expected an integer, found {w}")),
                    ),
                }
            }
        }
    }
    if let Some(r) = &q.resctrl_qos {
        let mut rc = c.sub("resctrlQOS");
        rc.range(
            "catRangeStartPercent",
            r.cat_range_start_percent,
            Some(0),
            Some(100),
        );
        rc.range("catRangeEndPercent", r.cat_range_end_percent, Some(0), Some(100));
        rc.range("mbaPercent", r.mba_percent, Some(0), Some(100));
        rc.pair(
            ("catRangeStartPercent", r.cat_range_start_percent),
            ("catRangeEndPercent", r.cat_range_end_percent),
            false,
        );
    }
    if let Some(n) = &q.network_qos {
        let mut nc = c.sub("networkQOS");
        for (f, v) in [
            ("ingressRequest", &n.ingress_request),
            ("ingressLimit", &n.ingress_limit),
            ("egressRequest", &n.egress_request),
            ("egressLimit", &n.egress_limit),
        ] {
            match v {
                Some(IntOrString::Int(p)) => nc.range(f, Some(i64::from(*p)), Some(0), Some(100)),
                Some(IntOrString::String(q)) if !is_non_negative_quantity(q) => {
                    nc.push(f, Rule::InvalidQuantity { value: q.clone() })
                }
                _ => {}
            }
        }
    }
}

/// One format (percent or quantity) per strategy, and the LSR+LS+BE percent requests of each
/// direction sum to at most 100. (Quantity sums against `totalNetworkBandwidth` need the
/// system-config key: [`network_bandwidth`].)
fn network_totals(s: &ResourceQosStrategy, c: &mut Check<'_>) {
    let all = [
        &s.lsr_class,
        &s.ls_class,
        &s.be_class,
        &s.system_class,
        &s.cgroup_root,
    ];
    let nets: Vec<_> = all
        .iter()
        .filter_map(|q| q.as_ref().and_then(|q| q.network_qos.as_ref()))
        .collect();
    let values = nets.iter().flat_map(|n| {
        [
            &n.ingress_request,
            &n.ingress_limit,
            &n.egress_request,
            &n.egress_limit,
        ]
    });
    let (mut ints, mut strings) = (false, false);
    for v in values.flatten() {
        match v {
            IntOrString::Int(_) => ints = true,
            IntOrString::String(_) => strings = true,
        }
    }
    if ints && strings {
        c.push("", Rule::MixedNetworkFormats);
    }
    let requesting = [&s.lsr_class, &s.ls_class, &s.be_class];
    let sum = |pick: fn(&crate::nodeslo::NetworkQosCfg) -> &Option<IntOrString>| -> i64 {
        requesting
            .iter()
            .filter_map(|q| q.as_ref().and_then(|q| q.network_qos.as_ref()))
            .filter_map(|n| match pick(n) {
                Some(IntOrString::Int(p)) => Some(i64::from(*p)),
                _ => None,
            })
            .sum()
    };
    let ingress = sum(|n| &n.ingress_request);
    if ingress > 100 {
        c.push(
            "",
            Rule::SumAbove100 {
                what: "LSR+LS+BE networkQOS.ingressRequest",
                sum: ingress,
            },
        );
    }
    let egress = sum(|n| &n.egress_request);
    if egress > 100 {
        c.push(
            "",
            Rule::SumAbove100 {
                what: "LSR+LS+BE networkQOS.egressRequest",
                sum: egress,
            },
        );
    }
}

/// Picks one network value out of a class's `networkQOS`.
type NetField = fn(&NetworkQosCfg) -> &Option<IntOrString>;

/// The LSR+LS+BE quantity requests of one direction, in whole units (Go's `Value`, rounded up).
fn quantity_requests(s: &ResourceQosStrategy, pick: NetField) -> i64 {
    [&s.lsr_class, &s.ls_class, &s.be_class]
        .iter()
        .filter_map(|q| q.as_ref().and_then(|q| q.network_qos.as_ref()))
        .filter_map(|n| match pick(n) {
            Some(IntOrString::String(q)) => ExactQuantity::parse(q).ok().map(ExactQuantity::value),
            _ => None,
        })
        .fold(0i64, i64::saturating_add)
}

/// Cross-key rule of `resource-qos-config` against `system-config` (upstream's
/// `CheckTotalQuantityIsValid`): in the cluster strategy and in each node entry, the LSR+LS+BE
/// `ingressRequest` quantities, and the `egressRequest` ones, add up to at most the
/// `totalNetworkBandwidth` that applies: the system-config node entry with an identical node
/// selector, else the system-config cluster strategy. A bandwidth of `0` (the default: unknown,
/// nodes may carry it in the `node.koordinator.sh/network-bandwidth` annotation) or one that is
/// not a quantity (reported by system-config's own rules) is not checked against. Upstream
/// checks against 0 in some of these cases (rejecting any quantity) and skips the cluster
/// strategy in others, and takes 0 when system-config has node entries but none with that
/// selector; we fall back to the cluster's bandwidth there.
pub(crate) fn network_bandwidth(
    qos: &Layered<ResourceQosStrategy>,
    system: &Layered<SystemStrategy>,
) -> Vec<ConfigError> {
    let key = ConfigKey::ResourceQos;
    // "0" (the default) means unknown: nodes may get theirs from the
    // node.koordinator.sh/network-bandwidth annotation, so there is nothing to check against.
    let total_of = |s: &SystemStrategy| {
        ExactQuantity::parse(&s.total_network_bandwidth.0)
            .ok()
            .map(ExactQuantity::value)
            .filter(|t| *t > 0)
    };
    let mut errors: Vec<ConfigError> = Vec::new();
    let directions: [(&'static str, NetField); 2] = [
        ("LSR+LS+BE networkQOS.ingressRequest", |n| &n.ingress_request),
        ("LSR+LS+BE networkQOS.egressRequest", |n| &n.egress_request),
    ];
    let over = |strategy: &ResourceQosStrategy, total: Option<i64>| -> Vec<Rule> {
        let Some(total) = total else { return Vec::new() };
        directions
            .iter()
            .map(|(what, pick)| (*what, quantity_requests(strategy, *pick)))
            .filter(|(_, sum)| *sum > total)
            .map(|(what, sum)| Rule::SumAboveTotalBandwidth { what, sum, total })
            .collect()
    };
    let cluster_total = total_of(&system.cluster);
    let cluster_rules = over(&qos.cluster, cluster_total);
    for rule in &cluster_rules {
        errors.push(ConfigError::new(key, key.cluster_path().to_owned(), rule.clone()));
    }
    for entry in &qos.nodes {
        let total = system
            .nodes
            .iter()
            .find(|n| n.node_selector == entry.node_selector)
            .map_or(cluster_total, |n| total_of(&n.strategy));
        // A node entry that only inherits the cluster's excess is not reported twice.
        for rule in over(&entry.strategy, total)
            .into_iter()
            .filter(|r| !cluster_rules.contains(r))
        {
            errors.push(ConfigError::new(
                key,
                format!("{}[{}]", key.nodes_field(), entry.index),
                rule,
            ));
        }
    }
    errors
}
