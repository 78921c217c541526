//! Whole-process memory figures: what `/proc/<pid>/status` says of a process (resident and
//! peak resident set) and what its own cgroup v1 memory controller charged to it, kernel memory
//! included (the page tables, socket buffers, and the dentries, inodes and open files of cgroup
//! files it keeps open: memory RSS does not show).
//!
//! A benchmark starts the component with [`CgroupV1Tree::command_in`] so that every page it
//! ever touches is charged to its cgroup from its first instruction.

use std::io;
use std::path::Path;
use std::process::Command;

use crate::cgroup::CgroupV1Tree;

/// `/proc/<pid>/status` memory lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessMemory {
    /// `VmRSS`, bytes.
    pub rss: u64,
    /// `VmHWM`: the peak resident set, bytes.
    pub peak_rss: u64,
}

impl ProcessMemory {
    /// Reads `/proc/<pid>/status`.
    pub fn of(pid: u32) -> io::Result<Self> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let kib = |name: &str| -> io::Result<u64> {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|value| value.parse::<u64>().ok())
                .map(|value| value * 1024)
                .ok_or_else(|| io::Error::other(format!("/proc/{pid}/status has no {name}")))
        };
        Ok(ProcessMemory {
            rss: kib("VmRSS:")?,
            peak_rss: kib("VmHWM:")?,
        })
    }
}

/// A cgroup v1 memory controller's charge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupMemory {
    /// `memory.usage_in_bytes`: everything charged, user and kernel memory and page cache.
    pub usage: u64,
    /// `memory.max_usage_in_bytes`: its peak.
    pub peak_usage: u64,
    /// `memory.kmem.usage_in_bytes`: the kernel memory part (0 where the kernel does not
    /// account it separately).
    pub kernel: u64,
    /// `memory.stat` `rss` + `rss_huge`: anonymous memory.
    pub anonymous: u64,
    /// `memory.stat` `cache`: page cache (files read, the binary's pages it faulted first).
    pub cache: u64,
}

impl CgroupMemory {
    /// Reads the memory controller files of `dir`.
    pub fn of(dir: &Path) -> io::Result<Self> {
        let number = |file: &str| -> io::Result<u64> {
            let text = std::fs::read_to_string(dir.join(file))?;
            text.trim().parse().map_err(|_| {
                io::Error::other(format!("{}: not a number: {text:?}", dir.join(file).display()))
            })
        };
        let stat = std::fs::read_to_string(dir.join("memory.stat"))?;
        let stat_value = |key: &str| -> u64 {
            stat.lines()
                .find_map(|line| line.strip_prefix(key).and_then(|rest| rest.strip_prefix(' ')))
                .and_then(|value| value.trim().parse().ok())
                .unwrap_or(0)
        };
        Ok(CgroupMemory {
            usage: number("memory.usage_in_bytes")?,
            peak_usage: number("memory.max_usage_in_bytes")?,
            kernel: number("memory.kmem.usage_in_bytes").unwrap_or(0),
            anonymous: stat_value("rss") + stat_value("rss_huge"),
            cache: stat_value("cache"),
        })
    }
}

impl CgroupV1Tree {
    /// A command that runs `program` inside `rel` of every controller of the tree from its first
    /// instruction: a shell writes its own pid into each `cgroup.procs`, then execs `program`
    /// (the caller adds the program's arguments, environment and stdio, then spawns it and hands
    /// the child to [`CgroupV1Tree::adopt`]).
    pub fn command_in(&self, rel: &str, program: &Path) -> Command {
        let mut script = String::new();
        for (index, _) in self.controllers().enumerate() {
            script.push_str(&format!("echo $$ > \"${}\"/cgroup.procs || exit 97; ", index + 1));
        }
        let count = self.controllers().count();
        script.push_str(&format!("shift {count}; exec \"$@\""));
        let mut command = Command::new("sh");
        command.arg("-c").arg(script).arg("sh");
        for controller in self.controllers() {
            command.arg(self.path(controller, rel));
        }
        command.arg(program);
        command
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_resident_set() {
        let memory = ProcessMemory::of(std::process::id()).unwrap();
        assert!(memory.rss > 0);
        assert!(memory.peak_rss >= memory.rss);
    }

    #[test]
    fn a_command_runs_inside_its_memory_cgroup_and_is_charged_there() {
        let Some(mut tree) = CgroupV1Tree::or_skip(&["memory"]) else {
            return;
        };
        tree.mkdir("proc").unwrap();
        let child = tree
            .command_in("proc", Path::new("sleep"))
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id().to_string();
        tree.adopt(child);
        crate::poll::wait_for_blocking(
            "the child in its cgroup",
            std::time::Duration::from_secs(5),
            || {
                let procs = tree.read("memory", "proc", "cgroup.procs").ok()?;
                procs.lines().any(|line| line.trim() == pid).then_some(())
            },
        );
        let memory = CgroupMemory::of(&tree.path("memory", "proc")).unwrap();
        assert!(memory.usage > 0, "{memory:?}");
        assert!(memory.peak_usage >= memory.usage, "{memory:?}");
    }
}
