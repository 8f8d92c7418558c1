//! Retention (`flipside serve --retention`): uploads and finished jobs older than the period
//! are deleted with their files, checked every minute (more often for periods under ten
//! minutes). A job counts from when it finished; a dataset from its upload, and it stays while
//! a queued or running job reads it. Without `--retention` everything stays until deleted.

use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::AppState;
use super::db::now_plus;
use super::{datasets, jobs};

/// Reads a period such as `30d`, `12h`, `45m` or `90s`.
pub fn parse_period(text: &str) -> Result<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .context("a period needs a unit: 30d, 12h, 45m or 90s")?;
    let (count, unit) = text.split_at(split);
    let count: u64 = count
        .parse()
        .with_context(|| format!("{text:?} does not start with a whole number"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        other => bail!("unknown unit {other:?} in {text:?}: use d, h, m or s"),
    };
    let period = Duration::from_secs(count.saturating_mul(seconds));
    anyhow::ensure!(
        !period.is_zero(),
        "a period of zero: give one of at least a second"
    );
    Ok(period)
}

/// Deletes what is older than `period` now and then, until the server stops.
pub async fn keep_for(state: AppState, period: Duration) {
    let every = (period / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        match sweep(&state, period).await {
            Ok((0, 0)) => {}
            Ok((jobs, datasets)) => tracing::info!(
                "retention: deleted {jobs} finished job(s) and {datasets} upload(s) older than \
                 {} s",
                period.as_secs()
            ),
            Err(error) => tracing::warn!("retention: {error:#}"),
        }
        tokio::select! {
            _ = state.shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// One pass: deletes finished jobs, then unused uploads, older than `period`; how many of each.
async fn sweep(state: &AppState, period: Duration) -> Result<(usize, usize)> {
    let cutoff = now_plus(-(period.as_secs().min(i64::MAX as u64) as i64));
    let mut removed_jobs = 0;
    for id in state.db.jobs_finished_before(&cutoff).await? {
        removed_jobs += usize::from(jobs::remove_finished(state, &id).await?);
    }
    let mut removed_datasets = 0;
    for stored in state.db.datasets_before(&cutoff).await? {
        let Some(team) = &stored.team else { continue };
        if datasets::remove_unused(state, team, &stored)
            .await?
            .is_none()
        {
            removed_datasets += 1;
        }
    }
    Ok((removed_jobs, removed_datasets))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_read_with_their_units() {
        assert_eq!(
            parse_period("30d").unwrap(),
            Duration::from_secs(30 * 86_400)
        );
        assert_eq!(parse_period("12h").unwrap(), Duration::from_secs(12 * 3600));
        assert_eq!(parse_period("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_period("45m").unwrap(), Duration::from_secs(2700));
        for bad in ["30", "d", "3w", "0d", "-1d", "1.5d"] {
            assert!(parse_period(bad).is_err(), "{bad}");
        }
    }
}
