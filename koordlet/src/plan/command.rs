//! The `koordlet plan` command: the offline edge around [`super::plan`].

use std::sync::Arc;

use koordlet_core::FeatureGates;

use super::{PlanOptions, parse_input, plan_with_resctrl};
use crate::cli::{DriverArg, PlanArgs, VersionArg};

/// Runs `koordlet plan`: reads the input, decides with the same core as the agent and prints
/// the plan as JSON. Returns the process exit code (2 for bad input).
pub fn run(args: &PlanArgs) -> i32 {
    let file = args.file.as_str();
    let gates = match FeatureGates::parse(&args.feature_gates) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("koordlet plan: {e}");
            return 2;
        }
    };
    let text = match koord_runtime::read_file_or_stdin(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("koordlet plan: {e}");
            return 2;
        }
    };
    let input = match parse_input(&text) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("koordlet plan: {file}: {e}");
            return 2;
        }
    };
    let version = match args.cgroup_version {
        VersionArg::V1 => crate::system::CgroupVersion::V1,
        VersionArg::V2 => crate::system::CgroupVersion::V2,
    };
    let driver = match args.cgroup_driver {
        DriverArg::Systemd => crate::system::CgroupDriver::Systemd,
        _ => crate::system::CgroupDriver::Cgroupfs,
    };
    let cgroups = args.cgroup_root.clone().map(|r| {
        let layout = match version {
            crate::system::CgroupVersion::V1 => crate::system::CgroupLayout::v1(),
            crate::system::CgroupVersion::V2 => crate::system::CgroupLayout::v2(),
        };
        Arc::new(crate::system::Cgroups::new(r, layout))
    });
    let out = plan_with_resctrl(
        &input,
        &PlanOptions {
            version,
            driver,
            cgroups,
            gates,
            collect_interval_seconds: 1.0,
            system_files: args
                .proc_sys_root
                .clone()
                .map(|proc_sys| crate::system_config::SystemFiles {
                    proc_sys,
                    sys: args.sys_root.clone().unwrap_or_default(),
                }),
        },
        args.resctrl_root.as_deref(),
    );
    match serde_json::to_string_pretty(&out) {
        Ok(s) => match koord_runtime::print_stdout(&s) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("koordlet plan: cannot write the output: {e}");
                1
            }
        },
        Err(e) => {
            eprintln!("koordlet plan: {e}");
            1
        }
    }
}
