//! A one-line progress bar on stderr, shown only when stderr is a terminal
//! (stdout stays one JSON document).

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use stow_checkpoint::progress::Progress;

/// Redraws at most every 100 ms; clears its line when dropped.
pub struct TerminalBar {
    last: Mutex<Option<Instant>>,
    drawn: Mutex<bool>,
}

impl TerminalBar {
    /// A bar if stderr is a terminal, else `None`.
    pub fn for_stderr() -> Option<TerminalBar> {
        std::io::stderr().is_terminal().then(|| TerminalBar {
            last: Mutex::new(None),
            drawn: Mutex::new(false),
        })
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl Progress for TerminalBar {
    fn update(&self, phase: &str, done: u64, total: u64) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if last.is_some_and(|t| now - t < Duration::from_millis(100)) && done < total {
            return;
        }
        *last = Some(now);
        const WIDTH: u64 = 30;
        let filled = (done.min(total) * WIDTH)
            .checked_div(total)
            .unwrap_or(WIDTH);
        let bar: String = (0..WIDTH)
            .map(|i| if i < filled { '#' } else { '-' })
            .collect();
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[K{phase} [{bar}] {:.1}/{:.1} MiB",
            mib(done),
            mib(total)
        );
        let _ = err.flush();
        *self.drawn.lock().unwrap_or_else(|e| e.into_inner()) = true;
    }
}

impl Drop for TerminalBar {
    fn drop(&mut self) {
        if *self.drawn.lock().unwrap_or_else(|e| e.into_inner()) {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}
