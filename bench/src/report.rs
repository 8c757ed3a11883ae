//! The result of a suite run: a table for people, JSON for machines.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::harness::{num, Figure, Result, Stat};
use crate::machine::Machine;

/// Everything one suite run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub suite: String,
    /// `quick` or `full`.
    pub mode: String,
    pub started_unix: u64,
    pub duration_s: f64,
    pub machine: Machine,
    /// Load averages (1, 5, 15 min) when the run started and ended: other
    /// work on the machine while it ran.
    pub loadavg_start: Option<[f64; 3]>,
    pub loadavg_end: Option<[f64; 3]>,
    /// How the figures were taken (schedule, repetitions, inputs).
    pub method: Vec<String>,
    pub figures: Vec<Figure>,
    /// Figures outside the comparison (setup times, cleanup).
    pub info: Vec<Info>,
    /// Peak RSS of the bench process over the whole run (KiB).
    pub peak_rss_kib: Option<u64>,
    pub notes: Vec<String>,
}

/// A figure outside the comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Info {
    pub name: String,
    pub value: f64,
    pub unit: String,
}

impl Report {
    /// Writes the report as pretty JSON.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(())
    }

    /// The human-readable table. Long because it lays out every section
    /// (figures, spreads, ratios, info, notes) in one pass over the report.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "stow-bench {} suite ({}), {:.0} s",
            self.suite, self.mode, self.duration_s
        );
        let _ = writeln!(out, "machine: {}", self.machine.summary());
        let load = |l: &Option<[f64; 3]>| {
            l.map_or_else(
                || "?".into(),
                |l| format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2]),
            )
        };
        let _ = writeln!(
            out,
            "load average (1/5/15 min): {} at start, {} at end (other work on the machine)",
            load(&self.loadavg_start),
            load(&self.loadavg_end)
        );
        for m in &self.method {
            let _ = writeln!(out, "method: {m}");
        }
        // One peer name in the header, or "peer" when figures have several.
        let peer = match self.figures.first() {
            Some(f) if self.figures.iter().all(|g| g.peer.name == f.peer.name) => {
                f.peer.name.as_str()
            }
            _ => "peer",
        };
        let ours = self
            .figures
            .first()
            .map_or("ours", |f| f.ours.name.as_str());
        let header = vec![
            "#".to_string(),
            "figure".into(),
            "thr".into(),
            "state".into(),
            "unit".into(),
            "better".into(),
            format!("{ours} median [min–max]"),
            format!("{peer} median [min–max]"),
            "ours/peer".into(),
            "verdict".into(),
            "cpu µs/op ours | peer".into(),
        ];
        let mut rows = vec![header];
        for (i, f) in self.figures.iter().enumerate() {
            let cpu = |s: &Option<Stat>| s.as_ref().map_or_else(|| "-".into(), |s| num(s.median));
            rows.push(vec![
                (i + 1).to_string(),
                f.title.clone(),
                f.threads.to_string(),
                f.cache.label().into(),
                f.unit.label().into(),
                f.better.label().into(),
                spread(&f.ours.value),
                spread(&f.peer.value),
                ratio(f.ratio),
                f.verdict(),
                format!(
                    "{} | {}",
                    cpu(&f.ours.cpu_us_per_op),
                    cpu(&f.peer.cpu_us_per_op)
                ),
            ]);
        }
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        let _ = writeln!(out);
        for (n, row) in rows.iter().enumerate() {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                let pad = widths[c] - cell.chars().count();
                // Text columns left-aligned, numbers right-aligned.
                if matches!(c, 1 | 3 | 4 | 5 | 9) || n == 0 {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                }
                line.push_str("  ");
            }
            let _ = writeln!(out, "{}", line.trim_end());
            if n == 0 {
                let total: usize = widths.iter().map(|w| w + 2).sum();
                let _ = writeln!(out, "{}", "-".repeat(total.saturating_sub(2)));
            }
        }
        let notes: Vec<String> = self
            .figures
            .iter()
            .enumerate()
            .filter(|(_, f)| !f.note.is_empty())
            .map(|(i, f)| format!("  {}. {}", i + 1, f.note))
            .collect();
        if !notes.is_empty() {
            let _ = writeln!(out, "\nfigure notes:");
            for n in notes {
                let _ = writeln!(out, "{n}");
            }
        }
        if !self.info.is_empty() {
            let _ = writeln!(out, "\nother measurements:");
            for i in &self.info {
                let _ = writeln!(out, "  {}: {} {}", i.name, num(i.value), i.unit);
            }
        }
        let _ = writeln!(
            out,
            "\npeak RSS of the bench process (VmHWM): {}",
            self.peak_rss_kib.map_or_else(
                || "unknown".into(),
                |k| format!("{} MiB", num(k as f64 / 1024.0))
            )
        );
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        out
    }
}

/// A ratio with three significant digits, however small.
fn ratio(r: f64) -> String {
    if r.is_finite() && r > 0.0 && r < 0.01 {
        format!("{r:.2e}")
    } else {
        format!("{r:.3}")
    }
}

fn spread(s: &Stat) -> String {
    format!("{} [{}–{}]", num(s.median), num(s.min), num(s.max))
}
