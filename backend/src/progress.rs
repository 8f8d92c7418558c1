//! Progress bars for long-running work (hidden automatically when stderr is not a terminal).
//! Every bar joins one display, so that nested work (an experiment's units, each unit's
//! training) shows its bars stacked instead of overwriting each other; [`latest`] reads the
//! newest unfinished bar back (the server shows it in the page while it prepares its models).

use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle, WeakProgressBar};

static BARS: LazyLock<MultiProgress> = LazyLock::new(MultiProgress::new);

/// The bars made so far that may still run, oldest first.
static LIVE: Mutex<Vec<WeakProgressBar>> = Mutex::new(Vec::new());

/// A bar over `len` items with rate and ETA, labelled `what`.
pub fn items(len: u64, what: &str) -> ProgressBar {
    let bar = BARS.add(ProgressBar::new(len).with_message(what.to_string()));
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>12} [{bar:32}] {human_pos}/{human_len} ({per_sec}, ETA {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    keep_track(&bar);
    bar
}

/// A spinner with a message, for steps of unknown length.
pub fn spinner(message: impl Into<String>) -> ProgressBar {
    let bar = BARS.add(ProgressBar::new_spinner().with_message(message.into()));
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    keep_track(&bar);
    bar
}

fn keep_track(bar: &ProgressBar) {
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|weak| weak.upgrade().is_some_and(|bar| !bar.is_finished()));
    live.push(bar.downgrade());
}

/// The newest bar that is still running, in words: its label, and how far it is when it counts
/// items (e.g. `"train 120/400"`).
pub fn latest() -> Option<String> {
    newest_running(&LIVE.lock().unwrap_or_else(|e| e.into_inner()))
}

fn newest_running(bars: &[WeakProgressBar]) -> Option<String> {
    let bar = bars
        .iter()
        .rev()
        .filter_map(WeakProgressBar::upgrade)
        .find(|bar| !bar.is_finished())?;
    let message = bar.message();
    Some(match bar.length() {
        Some(len) => format!("{message} {}/{len}", bar.position()),
        None => message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_the_newest_running_bar() {
        let outer = ProgressBar::hidden().with_message("train");
        outer.set_length(10);
        outer.inc(3);
        let inner = ProgressBar::hidden().with_message("indexing");
        let bars = [outer.downgrade(), inner.downgrade()];
        assert_eq!(newest_running(&bars).as_deref(), Some("indexing"));
        inner.finish();
        assert_eq!(newest_running(&bars).as_deref(), Some("train 3/10"));
        drop(outer);
        assert_eq!(newest_running(&bars), None);
    }
}
