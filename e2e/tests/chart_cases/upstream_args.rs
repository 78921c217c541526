//! A user switching from upstream Koordinator carries upstream's flags over in `extraArgs`: each
//! component, parsing the rendered args as its binary does, accepts them.

use super::*;

#[test]
fn upstream_flags_in_extra_args_start_every_component() {
    let Some(helm) = chart_support::helm() else { return };
    // What a user switching from upstream carries over in extraArgs.
    let rendered = render(
        &helm,
        &[
            "manager.extraArgs={--logtostderr=true,--v=4,--sync-period=0,-enable-leader-election}",
            "webhook.extraArgs={--logtostderr=true,--v=4,-health-probe-addr=:8000}",
            "koordlet.extraArgs={--logtostderr=true,--v=4,-reconcile-interval-seconds=1,--kubelet-preferred-address-type=InternalIP}",
            "schedulerExtender.extraArgs={--logtostderr=true,-v=5}",
        ],
    );
    let argv = |kind: &str, name: &str| container_argv(name, container(rendered.get(kind, name)));
    let manager = manager_cli(argv("Deployment", "koord-manager")).unwrap().run;
    assert_eq!(manager.verbosity, Some(4));
    assert!(manager.leader_elect);
    let webhook = webhook_cli(argv("Deployment", "koord-webhook")).unwrap().server;
    assert_eq!((webhook.verbosity, webhook.health_addr.port()), (Some(4), 8000));
    let koordlet = koordlet_args(argv("DaemonSet", "koordlet")).unwrap().agent;
    assert_eq!(koordlet.verbosity, Some(4));
    let extender = extender_cli(argv("Deployment", "koord-scheduler-extender")).unwrap();
    assert_eq!(extender.verbosity, Some(5));
    // A misspelt flag is still refused.
    let rendered = render(&helm, &["manager.extraArgs={--no-such-flag}"]);
    let argv = container_argv(
        "koord-manager",
        container(rendered.get("Deployment", "koord-manager")),
    );
    assert!(manager_cli(argv).is_err());
}

/// The chart leaves `RUST_LOG` unset unless `logLevel` is given, so `--v=4` in `extraArgs`
/// (which `RUST_LOG` would override) raises the level; a `logLevel` reaches every component.
#[test]
fn v_in_extra_args_is_not_overridden_unless_log_level_is_set() {
    let Some(helm) = chart_support::helm() else { return };
    let workloads = [
        ("Deployment", "koord-manager"),
        ("Deployment", "koord-webhook"),
        ("DaemonSet", "koordlet"),
        ("Deployment", "koord-scheduler-extender"),
    ];
    let rendered = render(&helm, &["koordlet.extraArgs={--v=4}"]);
    for (kind, name) in workloads {
        let env = chart_support::container_env(container(rendered.get(kind, name)));
        assert!(!env.contains_key("RUST_LOG"), "{name}: {env:?}");
    }
    let rendered = render(&helm, &["logLevel=info\\,koordlet=debug"]);
    for (kind, name) in workloads {
        let env = chart_support::container_env(container(rendered.get(kind, name)));
        assert_eq!(
            env.get("RUST_LOG").map(String::as_str),
            Some("info,koordlet=debug"),
            "{name}"
        );
    }
}
