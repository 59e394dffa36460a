//! Memory and open files of the cluster's own processes (etcd members,
//! replicas, agents), sampled through /proc during a run: a soak's figures.
//! Growth is measured over one process's life (a restart starts afresh),
//! from its first sample after the warm-up to its last.

use serde::Serialize;

/// One sample of one process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// From the start of the run, s.
    pub at_s: f64,
    /// The process.
    pub pid: u32,
    /// Resident memory, KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Open file descriptors.
    pub fds: usize,
}

/// Reads `pid`'s resident memory and open descriptors; None once it is gone.
pub fn read(pid: u32) -> Option<(u64, usize)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.split_whitespace().next()?.parse().ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some((rss, fds))
}

/// What one member used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Usage {
    /// The member.
    pub member: String,
    /// Samples of its last process after the warm-up.
    pub samples: usize,
    /// Resident memory at the first of them, MiB.
    pub rss_mib_first: f64,
    /// At the last, MiB.
    pub rss_mib_last: f64,
    /// Most, MiB.
    pub rss_mib_max: f64,
    /// Open descriptors at the first.
    pub fds_first: usize,
    /// At the last.
    pub fds_last: usize,
    /// Most.
    pub fds_max: usize,
    /// last / first − 1 of the resident memory.
    pub rss_growth: f64,
    /// last / first − 1 of the open descriptors.
    pub fds_growth: f64,
}

/// The usage of `member` from its samples (in time order): those of its
/// last process taken at or after `after_s`. None without any. O(samples).
pub fn summarize(member: &str, samples: &[Sample], after_s: f64) -> Option<Usage> {
    let last_pid = samples.last()?.pid;
    let life: Vec<&Sample> = samples.iter().filter(|s| s.pid == last_pid && s.at_s >= after_s).collect();
    let (first, last) = (life.first()?, life.last()?);
    let mib = |kib: u64| kib as f64 / 1024.0;
    let growth = |a: f64, b: f64| if a > 0.0 { b / a - 1.0 } else { 0.0 };
    Some(Usage {
        member: member.to_string(),
        samples: life.len(),
        rss_mib_first: mib(first.rss_kib),
        rss_mib_last: mib(last.rss_kib),
        rss_mib_max: life.iter().map(|s| mib(s.rss_kib)).fold(0.0, f64::max),
        fds_first: first.fds,
        fds_last: last.fds,
        fds_max: life.iter().map(|s| s.fds).max().unwrap_or(0),
        rss_growth: growth(first.rss_kib as f64, last.rss_kib as f64),
        fds_growth: growth(first.fds as f64, last.fds as f64),
    })
}

/// Every sample as CSV (`member,pid,at_s,rss_kib,fds`), for reading a
/// run again (growth across a member's restarts, other windows).
pub fn write_csv(path: &std::path::Path, samples: &[(String, Vec<Sample>)]) -> std::io::Result<()> {
    let mut out = String::from("member,pid,at_s,rss_kib,fds\n");
    for (member, list) in samples {
        for s in list {
            out.push_str(&format!("{member},{},{:.1},{},{}\n", s.pid, s.at_s, s.rss_kib, s.fds));
        }
    }
    std::fs::write(path, out)
}

/// The figures of a run's samples: each process's resident memory and
/// open files over time, a panel per kind (etcd, replicas, agents), written
/// as `resources-memory.{svg,png}` and `resources-files.{svg,png}` in `dir`.
/// A restarted process's curve goes on from its new process. O(samples).
pub fn figures(dir: &std::path::Path, samples: &[(String, Vec<Sample>)]) -> anyhow::Result<()> {
    use orrery_lab::plot::{Figure, Series};
    let facet = |member: &str| match member.trim_end_matches(|c: char| c.is_ascii_digit()) {
        "etcd" => "etcd members",
        "replica" => "service replicas",
        _ => "node agents",
    };
    let curves = |value: fn(&Sample) -> f64| -> Vec<Series<(f64, f64)>> {
        samples
            .iter()
            .map(|(m, ss)| Series::in_facet(m.clone(), facet(m), ss.iter().map(|s| (s.at_s, value(s))).collect()))
            .collect()
    };
    let memory = Figure::Lines {
        title: "Resident memory of each process over the run".into(),
        y_label: "resident memory, MiB".into(),
        series: curves(|s| s.rss_kib as f64 / 1024.0),
    };
    memory.save(dir, "resources-memory")?;
    let files = Figure::Lines {
        title: "Open file descriptors of each process over the run".into(),
        y_label: "open file descriptors".into(),
        series: curves(|s| s.fds as f64),
    };
    files.save(dir, "resources-files")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at_s: f64, pid: u32, rss_kib: u64, fds: usize) -> Sample {
        Sample { at_s, pid, rss_kib, fds }
    }

    #[test]
    fn growth_is_over_the_last_life_after_the_warm_up() {
        let samples = [
            s(5.0, 10, 1024, 8),   // warm-up
            s(20.0, 10, 2048, 12), // first life
            s(40.0, 10, 9999, 99), // first life, gone by a restart
            s(60.0, 11, 4096, 20), // the restart: its first sample
            s(80.0, 11, 5120, 22),
            s(100.0, 11, 4608, 21),
        ];
        let u = summarize("replica0", &samples, 15.0).expect("samples");
        assert_eq!(u.samples, 3);
        assert_eq!((u.rss_mib_first, u.rss_mib_last, u.rss_mib_max), (4.0, 4.5, 5.0));
        assert_eq!((u.fds_first, u.fds_last, u.fds_max), (20, 21, 22));
        assert!((u.rss_growth - 0.125).abs() < 1e-12 && (u.fds_growth - 0.05).abs() < 1e-12);
        assert_eq!(summarize("x", &[], 0.0), None);
        assert_eq!(summarize("x", &samples[..1], 15.0), None, "nothing after the warm-up");
    }

    #[test]
    fn the_figures_have_a_panel_per_kind_and_a_curve_per_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let samples = vec![
            ("etcd0".to_string(), vec![s(0.0, 1, 40_960, 30), s(5.0, 1, 43_008, 31)]),
            ("replica1".to_string(), vec![s(0.0, 2, 26_624, 20), s(5.0, 2, 26_624, 20)]),
            ("h3".to_string(), vec![s(0.0, 3, 22_528, 16), s(5.0, 3, 22_528, 15)]),
        ];
        figures(dir.path(), &samples).expect("drawn");
        let svg = std::fs::read_to_string(dir.path().join("resources-memory.svg")).expect("svg");
        for text in ["etcd members", "service replicas", "node agents", "etcd0", "replica1", "h3", "MiB"] {
            assert!(svg.contains(text), "{text} missing from the memory figure");
        }
        assert!(std::fs::read_to_string(dir.path().join("resources-files.svg")).expect("svg").contains("descriptors"));
        assert!(dir.path().join("resources-memory.png").exists());
    }

    #[test]
    fn this_process_can_be_read() {
        let (rss, fds) = read(std::process::id()).expect("our own /proc entry");
        assert!(rss > 0 && fds >= 3, "{rss} KiB, {fds} descriptors");
        assert_eq!(read(u32::MAX), None);
    }
}
