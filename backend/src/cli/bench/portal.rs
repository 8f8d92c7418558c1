//! `flipside bench portal`: the review portal's hot path — record a verdict and lease the next
//! item — with a large queue, on SQLite and (given a database) Postgres. It times the database
//! work of the two requests (the same library functions the handlers call; HTTP, JSON and the
//! membership check are not included) and prints p50/p95 against the goal p95 ≤ 50 ms.

use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use flipside_shared::portal::{Decision, QueueRequest, Role, Verdict, VerdictRequest};

use super::cpu_features;
use crate::server::db::Db;
use crate::server::portal::items::{StoredItem, insert_items};
use crate::server::portal::queue::{Checked, insert_queue, lease_next, record_verdict};
use crate::server::portal::{accounts, new_secret};

#[derive(Debug, Args)]
pub struct PortalBenchArgs {
    /// Items in the queue
    #[arg(long, default_value_t = 100_000)]
    pub items: usize,
    /// Decide-and-fetch-next rounds timed (after 50 untimed ones)
    #[arg(long, default_value_t = 2_000)]
    pub rounds: usize,
    /// Also run on this Postgres database (a throwaway one: the portal's tables are made in it)
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
}

pub fn bench_portal(args: PortalBenchArgs) -> Result<()> {
    println!("CPU: {}", cpu_features());
    let runtime = tokio::runtime::Runtime::new()?;
    let dir = tempfile::tempdir()?;
    let sqlite = dir.path().join("bench.db").display().to_string();
    let mut databases = vec![("SQLite", sqlite)];
    if let Some(url) = &args.postgres {
        databases.push(("Postgres", url.clone()));
    }
    println!(
        "{:<9} {:>8} {:>7} {:>9} {:>9} {:>9}  goal p95 ≤ 50 ms",
        "database", "items", "rounds", "p50 ms", "p95 ms", "max ms"
    );
    for (name, url) in databases {
        let times = runtime.block_on(rounds(&url, args.items, args.rounds))?;
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        println!(
            "{name:<9} {:>8} {:>7} {:>9.2} {:>9.2} {:>9.2}  {}",
            args.items,
            times.len(),
            at(0.5),
            at(0.95),
            at(1.0),
            if at(0.95) <= 50.0 { "met" } else { "NOT met" }
        );
    }
    Ok(())
}

/// Fills a queue with `items` and times `rounds` decide-and-fetch-next rounds (sorted, ms).
async fn rounds(url: &str, items: usize, rounds: usize) -> Result<Vec<f64>> {
    let db = Db::connect(url).await?;
    let suffix = &new_secret()[..8];
    let user = accounts::create_user(
        &db,
        &format!("bench-{suffix}@flipside.invalid"),
        "bench",
        &new_secret(),
    )
    .await?;
    let team = accounts::ensure_team(&db, &format!("bench-{suffix}")).await?;
    accounts::set_membership(&db, &team, &user.id, Role::Annotator).await?;
    let request = QueueRequest {
        name: "bench".into(),
        overlap: 1,
        job: None,
        lease_seconds: 600,
    };
    let queue = insert_queue(&db, &team, &request, "bench").await?;
    let started = Instant::now();
    let item = |i: usize| StoredItem {
        original: format!("Review {i}: the film was lovely and the cast superb."),
        label: "positive".into(),
        counterfactual: Some(format!(
            "Review {i}: the film was dull and the cast wooden."
        )),
        target: "negative".into(),
        method: "bench".into(),
        flipped: Some(true),
        target_probability: Some(0.9),
        record: None,
    };
    for start in (0..items).step_by(10_000) {
        let batch = (start..items.min(start + 10_000)).map(item).collect();
        insert_items(&db, &queue.id, batch)
            .await
            .map_err(|e| anyhow::anyhow!(e.message))?;
    }
    eprintln!(
        "{} items queued in {:.1} s",
        items,
        started.elapsed().as_secs_f64()
    );
    let mut times = Vec::with_capacity(rounds);
    let mut held = lease_next(&db, &queue, &user.id)
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?
        .context("the queue is empty")?;
    for round in 0..rounds + 50 {
        let started = Instant::now();
        let lease = held
            .view(&db, &queue.id, &user.id, None)
            .await
            .map_err(|e| anyhow::anyhow!(e.message))?;
        let verdict = VerdictRequest {
            lease: held.lease.clone(),
            request_id: format!("bench-{round}"),
            decision: Decision {
                verdict: Verdict::Accept,
                text: None,
                label: None,
                override_classifier: false,
            },
            excerpts: Vec::new(),
        };
        record_verdict(
            &db,
            &queue,
            &user.id,
            &lease.item,
            &verdict,
            &Checked::as_is(),
        )
        .await
        .map_err(|e| anyhow::anyhow!(e.message))?;
        held = lease_next(&db, &queue, &user.id)
            .await
            .map_err(|e| anyhow::anyhow!(e.message))?
            .context("the queue ran out: use fewer rounds")?;
        if round >= 50 {
            times.push(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}
