//! Rules of `resource-qos-config`: per-class CPU, memory, block I/O, resctrl and network QoS.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::error::Rule;
use super::syntax::is_non_negative_quantity;
use super::validate::Check;
use crate::nodeslo::{ResourceQos, ResourceQosStrategy};

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
/// direction sum to at most 100. (Quantity sums against `totalNetworkBandwidth` need quantity
/// arithmetic and a system strategy; they are not checked here.)
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
