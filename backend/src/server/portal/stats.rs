//! A queue's dashboard: progress, verdicts, per-person throughput and acceptance, the share the
//! classifier says flips, and agreement on the items several people decided.

use flipside_shared::api::ApiError as ErrorBody;
use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use flipside_shared::metrics::agreement::{cohen_kappa, krippendorff_alpha};
use flipside_shared::portal::{Outcome, PersonStats, QueueStats, Verdict};

use super::auth::{Caller, READ};
use super::queue::queue_for;
use crate::server::AppState;
use crate::server::db::{now, with_pool};
use crate::server::error::ApiResult;

/// A live first-pass verdict: who, on what, which, when.
struct Given {
    user: String,
    item: String,
    verdict: Verdict,
    at: String,
}

/// `GET …/queues/{queue}/stats`.
#[utoipa::path(get, path = "/teams/{team}/queues/{queue}/stats", tag = "review", params(("team" = String, Path), ("queue" = String, Path)), security(("session" = []), ("token" = ["read"])), responses((status = 200, body = QueueStats), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path((team, queue)): Path<(String, String)>,
) -> ApiResult<Json<QueueStats>> {
    let (queue, _) = queue_for(&state.db, &caller, &team, &queue, READ).await?;
    let db = &state.db;
    let items: Vec<(Option<i64>, Option<String>, i64)> = with_pool!(db, |pool| sqlx::query_as(
        "SELECT flipped, outcome, stage FROM items WHERE queue_id = $1"
    )
    .bind(&queue.id)
    .fetch_all(pool)
    .await)?;
    let rows: Vec<(String, String, String, String)> = with_pool!(db, |pool| sqlx::query_as(
        "SELECT u.name, v.item_id, v.verdict, v.created_at FROM verdicts v \
         JOIN users u ON u.id = v.user_id WHERE v.queue_id = $1 AND v.pass = 1 \
         AND v.undone_at IS NULL ORDER BY v.created_at"
    )
    .bind(&queue.id)
    .fetch_all(pool)
    .await)?;
    let (leased, overrides): (i64, i64) = with_pool!(db, |pool| sqlx::query_as(
        "SELECT (SELECT COUNT(*) FROM assignments WHERE queue_id = $1 AND state = 'leased' \
         AND expires_at > $2), (SELECT COUNT(*) FROM verdicts WHERE queue_id = $1 \
         AND override_classifier = 1 AND undone_at IS NULL)"
    )
    .bind(&queue.id)
    .bind(now())
    .fetch_one(pool)
    .await)?;
    let given: Vec<Given> = rows
        .into_iter()
        .filter_map(|(user, item, verdict, at)| {
            Some(Given {
                user,
                item,
                verdict: Verdict::parse(&verdict)?,
                at,
            })
        })
        .collect();
    let outcomes: Vec<Outcome> = items
        .iter()
        .filter_map(|(_, outcome, _)| serde_json::from_str(outcome.as_deref()?).ok())
        .collect();
    let kept = outcomes.iter().filter(|o| o.verdict.keeps()).count();
    let scored: Vec<bool> = items
        .iter()
        .filter_map(|(f, _, _)| f.map(|f| f == 1))
        .collect();
    let (cohen_kappa, krippendorff_alpha) = agreement(&given);
    Ok(Json(QueueStats {
        items: items.len(),
        decided: outcomes.len(),
        reviewed: items.iter().filter(|(_, _, stage)| *stage >= 2).count(),
        leased: leased as usize,
        kept,
        acceptance_rate: share(kept, outcomes.len()),
        flip_share: share(scored.iter().filter(|f| **f).count(), scored.len()),
        verdicts: Verdict::ALL
            .into_iter()
            .map(|v| (v, given.iter().filter(|g| g.verdict == v).count()))
            .filter(|(_, n)| *n > 0)
            .collect(),
        people: people(&given),
        cohen_kappa,
        krippendorff_alpha,
        overrides: overrides as usize,
    }))
}

fn share(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Each person's verdicts, rate and acceptance, busiest first.
fn people(given: &[Given]) -> Vec<PersonStats> {
    let mut by_person: BTreeMap<&str, Vec<&Given>> = BTreeMap::new();
    for g in given {
        by_person.entry(&g.user).or_default().push(g);
    }
    let mut people: Vec<PersonStats> = by_person
        .into_iter()
        .map(|(name, verdicts)| {
            let decided: Vec<&&Given> = verdicts
                .iter()
                .filter(|g| g.verdict != Verdict::Skip)
                .collect();
            let kept = decided.iter().filter(|g| g.verdict.keeps()).count();
            let hours = match (verdicts.first(), verdicts.last()) {
                (Some(first), Some(last)) => seconds_between(&first.at, &last.at) / 3600.0,
                _ => 0.0,
            };
            PersonStats {
                name: name.to_string(),
                verdicts: verdicts.len(),
                per_hour: (verdicts.len() >= 2 && hours > 0.0)
                    .then(|| (verdicts.len() - 1) as f64 / hours),
                acceptance: share(kept, decided.len()),
            }
        })
        .collect();
    people.sort_by(|a, b| b.verdicts.cmp(&a.verdicts).then(a.name.cmp(&b.name)));
    people
}

fn seconds_between(from: &str, to: &str) -> f64 {
    let parse = |t: &str| {
        time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
    };
    match (parse(from), parse(to)) {
        (Some(a), Some(b)) => (b - a).as_seconds_f64(),
        _ => 0.0,
    }
}

/// Cohen's κ (when exactly two people decided the shared items) and Krippendorff's α over the
/// items decided by two or more, on the verdicts' agreement classes (skips left out).
fn agreement(given: &[Given]) -> (Option<f64>, Option<f64>) {
    let mut units: BTreeMap<&str, Vec<(&str, Verdict)>> = BTreeMap::new();
    for g in given.iter().filter(|g| g.verdict != Verdict::Skip) {
        units
            .entry(&g.item)
            .or_default()
            .push((&g.user, g.verdict.agreement_class()));
    }
    let shared: Vec<&Vec<(&str, Verdict)>> = units.values().filter(|u| u.len() >= 2).collect();
    let alpha = krippendorff_alpha(
        &shared
            .iter()
            .map(|u| u.iter().map(|(_, v)| *v).collect())
            .collect::<Vec<Vec<Verdict>>>(),
    );
    let mut annotators: Vec<&str> = shared
        .iter()
        .flat_map(|u| u.iter().map(|(p, _)| *p))
        .collect();
    annotators.sort();
    annotators.dedup();
    let kappa = match annotators[..] {
        [first, second] => {
            let pairs: Vec<(Verdict, Verdict)> = shared
                .iter()
                .filter_map(|u| {
                    let of = |p: &str| u.iter().find(|(q, _)| *q == p).map(|(_, v)| *v);
                    Some((of(first)?, of(second)?))
                })
                .collect();
            let (a, b): (Vec<Verdict>, Vec<Verdict>) = pairs.into_iter().unzip();
            cohen_kappa(&a, &b)
        }
        _ => None,
    };
    (kappa, alpha)
}
