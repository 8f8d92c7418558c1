//! Progress bars for long-running work (hidden automatically when stderr is not a terminal).
//! Every bar joins one display, so that nested work (an experiment's units, each unit's
//! training) shows its bars stacked instead of overwriting each other.

use std::sync::LazyLock;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

static BARS: LazyLock<MultiProgress> = LazyLock::new(MultiProgress::new);

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
    bar
}

/// A spinner with a message, for steps of unknown length.
pub fn spinner(message: impl Into<String>) -> ProgressBar {
    let bar = BARS.add(ProgressBar::new_spinner().with_message(message.into()));
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}
