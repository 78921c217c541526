//! The resctrl (RDT) class of a container being created (gate `RdtResctrl`): the container
//! starts in the class group the resctrl round would move its pod's tasks to, instead of in
//! the root group until the next round.
//!
//! The group comes from [`ResctrlClasses::pod_group`], the rule the round itself uses, with the
//! pod's class resolved as the round resolves it (the `koordinator.sh/qosClass` label, else the
//! Kubernetes QoS class of the pod's cgroup). The runtime turns the class into the OCI spec's
//! `linux.intelRdt.closID`; runc then writes the container's first process into
//! `<resctrl root>/<class>/tasks` before it runs, and its threads and children inherit the
//! group. The round finds those tasks already in their group and writes nothing for them.
//!
//! A class naming a group that does not exist makes runc fail the container (runc 1.1 refuses
//! a `closID` without schemata whose directory is missing; runtimes that create it instead
//! would make a group koordlet does not configure), so the class is set only when the group's
//! `tasks` file exists under the resctrl root koordlet found at start.
//! The round creates the groups on its first pass; containers created before that, or on a
//! node where any condition below fails, get no class and are moved by the round as before.

use std::path::{Path, PathBuf};

use koord_api::QoSClass;
use koordlet_core::resctrl::ResctrlGroup;
use koordlet_core::strategies::resctrl::{ResctrlClasses, group_of};

/// Whether the hook may name resctrl classes on this node, as the agent found resctrl at start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RdtAvailability {
    /// Feature gate `RdtResctrl` is off (the default for hooks built without the agent).
    #[default]
    GateOff,
    /// The node has no resctrl the round can use (why, as logged at start).
    Unsupported(String),
    /// koordlet runs in dry-run: the round moves no task, so the hook names no class either.
    DryRun,
    /// resctrl is mounted here (koordlet's view of the runtime's `/sys/fs/resctrl`).
    Mounted(PathBuf),
}

/// Why a container gets no resctrl class (logged at debug; the round still moves its tasks
/// if the pod belongs in a group).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoRdtClass {
    /// Gate off.
    #[error("feature gate RdtResctrl is off")]
    GateOff,
    /// resctrl not in use.
    #[error("resctrl is not in use on this node: {0}")]
    Unsupported(String),
    /// Dry-run.
    #[error("dry-run: the resctrl round moves no task")]
    DryRun,
    /// The pod's class could not be resolved (no label, no usable cgroup parent).
    #[error("the pod's QoS class is unknown: {0}")]
    UnknownQos(String),
    /// The class has no group (SYSTEM).
    #[error("QoS class {0} has no resctrl group")]
    NoGroup(QoSClass),
    /// The class's group is not enabled in the NodeSLO (or there is no NodeSLO yet).
    #[error("resctrlQOS of the {0} group is not enabled in the NodeSLO")]
    ClassDisabled(ResctrlGroup),
    /// The group's directory is not there yet: naming it would fail the container.
    #[error(
        "{0} does not exist yet (the resctrl round creates it); a class naming a missing group fails the container"
    )]
    GroupMissing(PathBuf),
}

/// The resctrl class of a container of a pod of class `qos`: the group the round puts the pod
/// in, when the gate is on, resctrl is mounted, the class is enabled in the NodeSLO
/// (`classes`) and the group exists under the root (its `tasks` file, which runc writes to).
/// `qos` is asked only when resctrl is in use; the one filesystem access is the last check.
pub fn rdt_class(
    availability: &RdtAvailability,
    classes: ResctrlClasses,
    qos: impl FnOnce() -> Result<QoSClass, String>,
) -> Result<ResctrlGroup, NoRdtClass> {
    let root = match availability {
        RdtAvailability::GateOff => return Err(NoRdtClass::GateOff),
        RdtAvailability::Unsupported(why) => return Err(NoRdtClass::Unsupported(why.clone())),
        RdtAvailability::DryRun => return Err(NoRdtClass::DryRun),
        RdtAvailability::Mounted(root) => root,
    };
    let qos = qos().map_err(NoRdtClass::UnknownQos)?;
    let Some(group) = classes.pod_group(qos) else {
        // Only the reason: the decision is pod_group's.
        return Err(match group_of(qos) {
            Some(group) => NoRdtClass::ClassDisabled(group),
            None => NoRdtClass::NoGroup(qos),
        });
    };
    let tasks = group_tasks_file(root, group);
    if !tasks.is_file() {
        return Err(NoRdtClass::GroupMissing(tasks));
    }
    Ok(group)
}

/// `<root>/<group>/tasks`.
fn group_tasks_file(root: &Path, group: ResctrlGroup) -> PathBuf {
    root.join(group.name()).join("tasks")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const LS_ONLY: ResctrlClasses = ResctrlClasses {
        lsr: false,
        ls: true,
        be: false,
    };

    fn tree(groups: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("schemata"), "L3:0=7ff\n").unwrap();
        for g in groups {
            std::fs::create_dir(dir.path().join(g)).unwrap();
            std::fs::write(dir.path().join(g).join("tasks"), "").unwrap();
        }
        dir
    }

    #[test]
    fn class_is_the_rounds_group_when_every_condition_holds() {
        let dir = tree(&["LSR", "LS", "BE"]);
        let mounted = RdtAvailability::Mounted(dir.path().to_path_buf());
        assert_eq!(
            rdt_class(&mounted, LS_ONLY, || Ok(QoSClass::Ls)),
            Ok(ResctrlGroup::Ls)
        );
        // LSE pods share the LSR group.
        let lsr = ResctrlClasses { lsr: true, ..LS_ONLY };
        assert_eq!(
            rdt_class(&mounted, lsr, || Ok(QoSClass::Lse)),
            Ok(ResctrlGroup::Lsr)
        );
    }

    #[test]
    fn each_condition_alone_leaves_the_class_unset() {
        let dir = tree(&["LSR", "LS", "BE"]);
        let mounted = RdtAvailability::Mounted(dir.path().to_path_buf());
        // The gate, support and dry-run.
        assert_eq!(
            rdt_class(&RdtAvailability::GateOff, LS_ONLY, || Ok(QoSClass::Ls)),
            Err(NoRdtClass::GateOff)
        );
        // No lookup of the pod's class when resctrl is not in use.
        assert_eq!(
            rdt_class(&RdtAvailability::GateOff, LS_ONLY, || panic!("class looked up")),
            Err(NoRdtClass::GateOff)
        );
        let unsupported = RdtAvailability::Unsupported("no cat_l3 or mba".into());
        assert!(matches!(
            rdt_class(&unsupported, LS_ONLY, || Ok(QoSClass::Ls)),
            Err(NoRdtClass::Unsupported(_))
        ));
        assert_eq!(
            rdt_class(&RdtAvailability::DryRun, LS_ONLY, || Ok(QoSClass::Ls)),
            Err(NoRdtClass::DryRun)
        );
        // The class not enabled in the NodeSLO (or no NodeSLO: nothing enabled).
        assert_eq!(
            rdt_class(&mounted, LS_ONLY, || Ok(QoSClass::Be)),
            Err(NoRdtClass::ClassDisabled(ResctrlGroup::Be))
        );
        assert_eq!(
            rdt_class(&mounted, ResctrlClasses::default(), || Ok(QoSClass::Ls)),
            Err(NoRdtClass::ClassDisabled(ResctrlGroup::Ls))
        );
        // A class without a group, and a pod whose class is unknown.
        assert_eq!(
            rdt_class(&mounted, LS_ONLY, || Ok(QoSClass::System)),
            Err(NoRdtClass::NoGroup(QoSClass::System))
        );
        assert!(matches!(
            rdt_class(&mounted, LS_ONLY, || Err("no cgroup".into())),
            Err(NoRdtClass::UnknownQos(_))
        ));
    }

    #[test]
    fn a_missing_group_is_never_named() {
        // The round has not created LS yet: runc would fail the container.
        let dir = tree(&["BE"]);
        let mounted = RdtAvailability::Mounted(dir.path().to_path_buf());
        assert_eq!(
            rdt_class(&mounted, LS_ONLY, || Ok(QoSClass::Ls)),
            Err(NoRdtClass::GroupMissing(dir.path().join("LS/tasks")))
        );
        // A directory without a tasks file is not a resctrl group.
        std::fs::create_dir(dir.path().join("LS")).unwrap();
        assert!(matches!(
            rdt_class(&mounted, LS_ONLY, || Ok(QoSClass::Ls)),
            Err(NoRdtClass::GroupMissing(_))
        ));
        std::fs::write(dir.path().join("LS/tasks"), "").unwrap();
        assert_eq!(
            rdt_class(&mounted, LS_ONLY, || Ok(QoSClass::Ls)),
            Ok(ResctrlGroup::Ls)
        );
        // The root itself gone (resctrl unmounted since start).
        let gone = RdtAvailability::Mounted(dir.path().join("unmounted"));
        assert!(matches!(
            rdt_class(&gone, LS_ONLY, || Ok(QoSClass::Ls)),
            Err(NoRdtClass::GroupMissing(_))
        ));
    }
}
