//! Facts about the machine a run was taken on.

use std::path::Path;

use serde::Serialize;

/// The 1, 5 and 15 minute load averages: other work on a shared machine.
pub fn loadavg() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut f = text.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([f.next()??, f.next()??, f.next()??])
}

/// Facts about the machine and the data directory.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: Option<String>,
    pub mem_total_mib: Option<u64>,
    pub kernel: Option<String>,
    pub data_dir: String,
    pub fs_type: Option<String>,
    pub fs_device: Option<String>,
    pub mount_point: Option<String>,
    pub mount_options: Option<String>,
}

impl Machine {
    /// Probes `/proc` for the machine and the filesystem holding `data_dir`.
    pub fn probe(data_dir: &Path) -> Machine {
        let dir = data_dir
            .canonicalize()
            .unwrap_or_else(|_| data_dir.to_path_buf());
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string());
        let mem_total_mib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                let line = m.lines().find(|l| l.starts_with("MemTotal:"))?.to_string();
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map(|kib| kib / 1024);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_string());
        // The mount with the longest mount point that contains the dir.
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mount = mounts
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 4).then(|| (f[0], f[1].replace("\\040", " "), f[2], f[3]))
            })
            .filter(|(_, mnt, _, _)| dir.starts_with(mnt))
            .max_by_key(|(_, mnt, _, _)| mnt.len());
        Machine {
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            mem_total_mib,
            kernel,
            data_dir: dir.display().to_string(),
            fs_type: mount.as_ref().map(|m| m.2.to_string()),
            fs_device: mount.as_ref().map(|m| m.0.to_string()),
            mount_point: mount.as_ref().map(|m| m.1.clone()),
            mount_options: mount.as_ref().map(|m| m.3.to_string()),
        }
    }

    /// One-line summary.
    pub fn summary(&self) -> String {
        let opt = |o: &Option<String>| o.clone().unwrap_or_else(|| "?".into());
        format!(
            "{} cores ({}), {} MiB RAM, Linux {}; data dir {} on {} ({} at {}, {})",
            self.nproc,
            opt(&self.cpu_model),
            self.mem_total_mib
                .map_or_else(|| "?".into(), |m| m.to_string()),
            opt(&self.kernel),
            self.data_dir,
            opt(&self.fs_type),
            opt(&self.fs_device),
            opt(&self.mount_point),
            opt(&self.mount_options),
        )
    }
}
