//! The koordlet command line for one simulated node.

use std::path::Path;

use super::fleet::NodeInfo;

impl NodeInfo {
    /// The argv (program name first) of a koordlet that runs this node: its name, the
    /// kubeconfig, the node's cgroup and proc roots, the cgroupfs driver and the node's kubelet
    /// `/pods` endpoint as the pod source. Callers append what their run needs (admin addresses,
    /// intervals, feature gates) and none of these flags again: clap refuses a repeated flag.
    pub fn koordlet_args(&self, kubeconfig: &Path) -> Vec<String> {
        vec![
            "koordlet".to_string(),
            format!("--node-name={}", self.name),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--cgroup-root={}", self.cgroup_root.display()),
            format!("--proc-root={}", self.proc_root.display()),
            "--cgroup-driver=cgroupfs".into(),
            "--pods-source=kubelet".into(),
            // koordlet asks `<base>/pods`; `pods_url` is that full URL.
            format!("--kubelet-url=http://127.0.0.1:{}", self.kubelet_port),
            // A simulated node has no container runtime of its own: never hook the host's.
            "--enable-nri-runtime-hook=false".into(),
            // Nodes of one host must not share (or load each other's) prediction models.
            format!(
                "--prediction-checkpoint-filepath={}",
                std::env::temp_dir()
                    .join(format!("koord-prediction-{}", self.name))
                    .display()
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn names_the_node_its_roots_and_its_kubelet() {
        let node = NodeInfo {
            name: "n1".into(),
            cgroup_root: PathBuf::from("/tmp/run/n1"),
            proc_root: PathBuf::from("/proc"),
            pods_url: "http://127.0.0.1:10250/pods/".into(),
            kubelet_port: 10250,
        };
        assert_eq!(
            node.koordlet_args(Path::new("/tmp/kubeconfig")),
            [
                "koordlet",
                "--node-name=n1",
                "--kubeconfig=/tmp/kubeconfig",
                "--cgroup-root=/tmp/run/n1",
                "--proc-root=/proc",
                "--cgroup-driver=cgroupfs",
                "--pods-source=kubelet",
                "--kubelet-url=http://127.0.0.1:10250",
                "--enable-nri-runtime-hook=false",
                &format!(
                    "--prediction-checkpoint-filepath={}",
                    std::env::temp_dir().join("koord-prediction-n1").display()
                ),
            ]
        );
    }
}
