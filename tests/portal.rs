//! The team portal against real `flipside serve` processes on loopback: the first admin made by
//! the CLI, invitations, sessions with CSRF, throttled sign-in, scoped and revocable API
//! tokens; review queues from a job and from uploads with leases, verdicts, replays, stale
//! saves, drafts, undo, the second pass and classifier overrides; exports that `classifier
//! train` reads; every endpoint (datasets and jobs too) × role × another team's ids; and 50
//! reviewers at once on SQLite and on two servers sharing Postgres.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::accounts::{
    ADMIN_PASSWORD, Account, Auth, add_user, api_token, follow, items_dataset, login, session_of,
    sign_in, team_of,
};
use crate::common::{EditingSetup, editing_setup, flipside, success, success_stderr};
use crate::datasets::check_parquet_matches_jsonl;
use crate::server::{Postgres, Server, check_error, json_of, postgres_bin_dir};

const PASSWORD: &str = "a long enough password";

/// Invites `email` with `role` and accepts the invitation: the newcomer's session.
fn invite(admin: &Account, team: &str, email: &str, name: &str, role: &str) -> Account {
    let invite = json_of(
        admin.post(
            &format!("/teams/{team}/invites"),
            &json!({"email": email, "role": role}),
        ),
        201,
    );
    assert!(invite["path"].as_str().unwrap().starts_with("/#/invite/"));
    let accepted = admin
        .http
        .post(format!("{}api/invites/accept", admin.base))
        .json(&json!({"token": invite["token"], "name": name, "password": PASSWORD}));
    let account = session_of(&admin.base, accepted.send().unwrap());
    // An invitation works once.
    let again = admin
        .http
        .post(format!("{}api/invites/accept", admin.base))
        .json(&json!({"token": invite["token"], "name": name, "password": PASSWORD}))
        .send()
        .unwrap();
    assert_eq!(again.status(), 404);
    account
}

/// A finished generation job of 3 items of [`ITEMS`](crate::common::ITEMS): its id and how many records it wrote
/// (at least one).
pub(crate) fn finished_job(admin: &Account, team: &str) -> (String, u64) {
    let dataset = items_dataset(admin, team);
    let job = json_of(
        admin.post(
            &format!("/teams/{team}/jobs"),
            &json!({"dataset": dataset, "limit": 3, "seed": 1}),
        ),
        202,
    );
    let job_id = job["id"].as_str().unwrap().to_string();
    let events = follow(admin, team, &job_id, |j| j["status"] == "done");
    let written = events.last().unwrap()["written"].as_u64().unwrap();
    assert!(written >= 1, "the job wrote nothing: {:?}", events.last());
    (job_id, written)
}

/// Items made elsewhere: sentences and their flips, half of each direction.
fn uploaded_items(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| {
                let (label, target, word) = if i % 2 == 0 {
                    ("positive", "negative", "dull")
                } else {
                    ("negative", "positive", "lovely")
                };
                json!({
                    "original": format!("Review {i}: the film was {}.", if i % 2 == 0 { "lovely" } else { "dull" }),
                    "label": label,
                    "target": target,
                    "counterfactual": format!("Review {i}: the film was {word}."),
                })
            })
            .collect(),
    )
}

pub(crate) fn new_queue(admin: &Account, team: &str, body: Value) -> String {
    let queue = json_of(admin.post(&format!("/teams/{team}/queues"), &body), 201);
    queue["id"].as_str().unwrap().to_string()
}

pub(crate) fn add_items(admin: &Account, team: &str, queue: &str, items: &Value) {
    json_of(
        admin.post(&format!("/teams/{team}/queues/{queue}/items"), items),
        200,
    );
}

/// A verdict on a lease, with a fresh request id.
fn verdict(lease: &Value, verdict: &str) -> Value {
    json!({
        "lease": lease["id"],
        "request_id": format!("{}-{}", lease["id"].as_str().unwrap(), verdict),
        "verdict": verdict,
    })
}

#[test]
fn team_portal_accounts_review_and_export_on_sqlite() {
    let setup = editing_setup();
    let secrets = portal_scenario(&setup, &[]);
    // The database holds no usable password, session or token.
    let mut dump = Vec::new();
    for entry in std::fs::read_dir(setup.dir.path().join("server"))
        .unwrap()
        .flatten()
    {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("flipside.db")
        {
            dump.extend(std::fs::read(entry.path()).unwrap());
        }
    }
    holds_none_of(&String::from_utf8_lossy(&dump), &secrets);
}

#[test]
fn team_portal_accounts_review_and_export_on_postgres() {
    let Some(postgres) = Postgres::start() else {
        return;
    };
    let setup = editing_setup();
    let secrets = portal_scenario(&setup, &["--database-url", &postgres.url]);
    // Beside initdb in Debian's versioned directory, else Debian's wrapper on PATH.
    let beside = postgres_bin_dir().map(|bin| bin.join("pg_dump"));
    let pg_dump = beside
        .filter(|p| p.is_file())
        .unwrap_or_else(|| "pg_dump".into());
    let dump = Command::new(pg_dump)
        .args(["--dbname", &postgres.url])
        .output()
        .unwrap();
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    holds_none_of(&String::from_utf8_lossy(&dump.stdout), &secrets);
}

fn holds_none_of(dump: &str, secrets: &[String]) {
    assert!(
        dump.contains("argon2id"),
        "not a dump of the portal's tables"
    );
    for secret in secrets {
        assert!(
            !dump.contains(secret.as_str()),
            "the database holds {secret:?}"
        );
    }
}

/// The portal from the CLI-made admin to the export, on the database `extra` names; returns
/// the passwords, token and session secret used, which the database must not hold.
fn portal_scenario(setup: &EditingSetup, extra: &[&str]) -> Vec<String> {
    let data = setup.dir.path().join("server");
    let said = add_user(&data, extra, "Ada@Lab.org", "lab", "admin");
    assert!(
        said.contains("ada@lab.org") && said.contains("admin"),
        "{said}"
    );
    add_user(&data, extra, "eve@other.org", "other", "admin");
    let server = Server::start(setup, &data, extra);
    let ada = sign_in(&server, "ada@lab.org", ADMIN_PASSWORD);
    let team = team_of(&ada);
    let eve = sign_in(&server, "eve@other.org", ADMIN_PASSWORD);
    let other_team = team_of(&eve);

    // No session, no portal; a session without its CSRF header cannot change anything.
    check_error(
        server.get(&format!("/teams/{team}/queues")),
        401,
        "unauthorized",
    );
    let Auth::Session { cookie, .. } = &ada.auth else {
        unreachable!()
    };
    let forged = server
        .http
        .post(server.url(&format!("/teams/{team}/queues")))
        .header("cookie", cookie)
        .json(&json!({"name": "forged"}))
        .send()
        .unwrap();
    check_error(forged, 403, "csrf");

    let bob = invite(&ada, &team, "bob@lab.org", "Bob", "annotator");
    let cleo = invite(&ada, &team, "cleo@lab.org", "Cleo", "reviewer");
    let dan = invite(&ada, &team, "dan@lab.org", "Dan", "viewer");
    let members = json_of(dan.get(&format!("/teams/{team}/members")), 200);
    assert_eq!(members.as_array().unwrap().len(), 4);

    // Throttled sign-in: after five failures even the right password waits.
    for _ in 0..5 {
        check_error(
            login(&server, "dan@lab.org", "wrong password!"),
            401,
            "unauthorized",
        );
    }
    let throttled = login(&server, "dan@lab.org", PASSWORD);
    assert!(throttled.headers().get("retry-after").is_some());
    check_error(throttled, 429, "throttled");

    // API tokens: scoped, listed without their secret, revoked at once.
    let token = json_of(
        ada.post(
            "/tokens",
            &json!({"name": "ci", "scopes": ["read", "export"]}),
        ),
        201,
    );
    let secret = token["token"].as_str().unwrap().to_string();
    let script = Account {
        auth: Auth::Token(secret.clone()),
        ..ada.clone()
    };
    json_of(script.get(&format!("/teams/{team}/queues")), 200);
    let listed = json_of(ada.get("/tokens"), 200);
    assert!(listed[0].get("token").is_none(), "{listed}");

    // A queue of a job's counterfactuals, each decided by two people.
    let (job_id, written) = finished_job(&ada, &team);
    let job_id = job_id.as_str();
    // Another team can neither see the job nor make a queue of it.
    check_error(
        eve.post(
            &format!("/teams/{other_team}/queues"),
            &json!({"name": "stolen", "job": job_id}),
        ),
        404,
        "not_found",
    );
    assert_eq!(
        json_of(eve.get(&format!("/teams/{other_team}/jobs")), 200),
        json!([])
    );
    let queue = new_queue(
        &ada,
        &team,
        json!({"name": "job review", "job": job_id, "overlap": 2}),
    );
    let q = format!("/teams/{team}/queues/{queue}");
    assert_eq!(json_of(dan.get(&q), 200)["items"], written);
    let mut first_verdict = None;
    // Both reviewers give each item the same verdict, rejecting and flagging items in turn (not
    // by what the model wrote), so that agreement is measurable with two items or more.
    let mut verdicts_by_item = HashMap::new();
    for reviewer in [&bob, &cleo] {
        while let Some(lease) = Some(json_of(
            reviewer.post(&format!("{q}/next"), &json!({})),
            200,
        ))
        .filter(|l| !l.is_null())
        {
            let item = &lease["item"];
            assert!(item["counterfactual"].is_string() && item["provenance"].is_object());
            let seen = verdicts_by_item.len();
            let choice = *verdicts_by_item
                .entry(item["id"].to_string())
                .or_insert(if seen % 2 == 0 { "reject" } else { "flag" });
            let body = verdict(&lease, choice);
            let decided = reviewer.post(&format!("{q}/verdicts"), &body);
            json_of(decided, 200);
            first_verdict.get_or_insert((reviewer.clone(), body, item["id"].clone()));
        }
    }
    // A replayed submit records nothing more; the audit log has one verdict from it.
    let (who, body, item) = first_verdict.unwrap();
    json_of(who.post(&format!("{q}/verdicts"), &body), 200);
    let history = json_of(
        dan.get(&format!("{q}/items/{}/history", item.as_str().unwrap())),
        200,
    );
    let verdicts = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["action"] == "verdict")
        .count();
    assert_eq!(verdicts, 2, "two people, one verdict each: {history}");
    let stats = json_of(dan.get(&format!("{q}/stats")), 200);
    assert_eq!(stats["decided"], written, "{stats}");
    if written >= 2 {
        // Two reviewers who agree on every item, over both verdicts.
        assert_eq!(stats["krippendorff_alpha"].as_f64(), Some(1.0), "{stats}");
    }

    // Files of items: the job's records as JSON lines, and a CSV; a bad row adds nothing.
    let records = ada
        .get(&format!("/teams/{team}/jobs/{job_id}/records.jsonl"))
        .bytes()
        .unwrap()
        .to_vec();
    // The same records as Parquet: every row and value, as datasets and pyarrow load them.
    let table = ada.get(&format!("/teams/{team}/jobs/{job_id}/records.parquet"));
    assert_eq!(
        table.headers()["content-disposition"],
        format!("attachment; filename=\"{job_id}.parquet\"")
    );
    let both = tempfile::tempdir().unwrap();
    let (jsonl, parquet) = (
        both.path().join("job.jsonl"),
        both.path().join("job.parquet"),
    );
    std::fs::write(&jsonl, &records).unwrap();
    std::fs::write(&parquet, table.bytes().unwrap()).unwrap();
    check_parquet_matches_jsonl(&parquet, &jsonl);
    let files = new_queue(&ada, &team, json!({"name": "files"}));
    let f = format!("/teams/{team}/queues/{files}");
    let added = json_of(
        ada.upload(&format!("{f}/upload"), "job.jsonl", records, &[]),
        200,
    );
    assert_eq!(added["items"], written);
    let csv = "original,label,target,counterfactual\nGood film.,positive,negative,Bad film.\n\
               Dull plot.,negative,positive,\n";
    let added = json_of(
        ada.upload(&format!("{f}/upload"), "more.csv", csv.into(), &[]),
        200,
    );
    assert_eq!(added["items"], written + 2);
    let bad = "original,label,target\nGood film.,positive,negative\n,negative,positive\n";
    let message = check_error(
        ada.upload(&format!("{f}/upload"), "bad.csv", bad.into(), &[]),
        400,
        "bad_request",
    );
    assert!(message.contains("item 2"), "{message}");
    assert_eq!(json_of(dan.get(&f), 200)["items"], written + 2);
    check_error(
        bob.upload(&format!("{f}/upload"), "more.csv", csv.into(), &[]),
        403,
        "forbidden",
    );

    // Uploaded counterfactuals: leases, drafts, undo, an override and the second pass.
    let upload_queue = new_queue(&ada, &team, json!({"name": "uploads", "lease_seconds": 5}));
    let u = format!("/teams/{team}/queues/{upload_queue}");
    add_items(&ada, &team, &upload_queue, &uploaded_items(8));
    let lease = json_of(bob.post(&format!("{u}/next"), &json!({})), 200);
    let draft = json!({"text": "half-written fix"});
    let saved = bob.send(
        Method::PUT,
        &format!("{u}/leases/{}/draft", lease["id"].as_str().unwrap()),
        Some(&draft),
    );
    assert_eq!(saved.status(), 204);
    let again = json_of(bob.post(&format!("{u}/next"), &json!({})), 200);
    assert_eq!(again["id"], lease["id"], "a reload gets the same lease");
    assert_eq!(again["draft"], "half-written fix");
    // The lease runs out: the item goes to someone else and a late save changes nothing.
    std::thread::sleep(Duration::from_secs(6));
    let taken = json_of(cleo.post(&format!("{u}/next"), &json!({})), 200);
    assert_eq!(taken["item"]["id"], lease["item"]["id"]);
    check_error(
        bob.post(&format!("{u}/verdicts"), &verdict(&lease, "accept")),
        409,
        "conflict",
    );
    // The first upload's target is negative: a fix with a positive text does not flip, so it
    // needs a reviewer's override, which an annotator cannot give.
    assert_eq!(taken["item"]["target"], "negative");
    let mut fix = verdict(&taken, "fix");
    fix["text"] = json!("The film was wonderful and the cast superb.");
    check_error(
        cleo.post(&format!("{u}/verdicts"), &fix),
        409,
        "needs_override",
    );
    fix["override_classifier"] = json!(true);
    let fixed = json_of(cleo.post(&format!("{u}/verdicts"), &fix), 200);
    assert_eq!(fixed["outcome"]["verdict"], "fix", "{fixed}");
    let bob_lease = json_of(bob.post(&format!("{u}/next"), &json!({})), 200);
    let mut overriding = verdict(&bob_lease, "accept");
    overriding["override_classifier"] = json!(true);
    check_error(
        bob.post(&format!("{u}/verdicts"), &overriding),
        403,
        "forbidden",
    );
    json_of(
        bob.post(&format!("{u}/verdicts"), &verdict(&bob_lease, "accept")),
        200,
    );
    // Undo gives the last verdict back as a lease.
    let lease = json_of(bob.post(&format!("{u}/next"), &json!({})), 200);
    json_of(
        bob.post(&format!("{u}/verdicts"), &verdict(&lease, "reject")),
        200,
    );
    let undone = json_of(bob.post(&format!("{u}/undo"), &json!({})), 200);
    assert_eq!(undone["item"]["id"], lease["item"]["id"]);
    assert_eq!(undone["previous"], "reject");
    let mut accept = verdict(&undone, "accept");
    accept["request_id"] = json!("after-undo");
    json_of(bob.post(&format!("{u}/verdicts"), &accept), 200);
    // Bob decides the rest by accepting.
    while let Some(lease) =
        Some(json_of(bob.post(&format!("{u}/next"), &json!({})), 200)).filter(|l| !l.is_null())
    {
        json_of(
            bob.post(&format!("{u}/verdicts"), &verdict(&lease, "accept")),
            200,
        );
    }
    // Second pass: two reviewers load the same item; the second save is stale.
    let task = json_of(cleo.get(&format!("{u}/review/next")), 200);
    let item = task["item"]["id"].as_str().unwrap();
    let version = task["item"]["version"].clone();
    assert!(!task["verdicts"].as_array().unwrap().is_empty());
    let review = |who: &Account, verdict: &str| {
        who.post(
            &format!("{u}/items/{item}/review"),
            &json!({"version": version, "verdict": verdict}),
        )
    };
    json_of(review(&cleo, "reject"), 200);
    check_error(review(&ada, "accept"), 409, "conflict");
    let kept = json_of(dan.get(&format!("{u}/items/{item}")), 200);
    assert_eq!(kept["outcome"]["verdict"], "reject");
    assert_eq!(kept["outcome"]["reviewed"], true);
    check_error(bob.get(&format!("{u}/review/next")), 403, "forbidden");
    let stats = json_of(dan.get(&format!("{u}/stats")), 200);
    assert_eq!(
        (stats["items"].as_u64(), stats["decided"].as_u64()),
        (Some(8), Some(8))
    );
    assert_eq!(stats["reviewed"], 1);
    assert_eq!(stats["overrides"], 1, "{stats}");

    // Export with the API token from the CLI, and train a classifier on it.
    let exported = setup.dir.path().join("reviewed.jsonl");
    success(
        flipside()
            .args(["portal", "export", "--server", &server.url, "--team", &team])
            .args(["--queue", &upload_queue, "--originals", "--out"])
            .arg(&exported)
            .env("FLIPSIDE_TOKEN", &secret),
    );
    let lines: Vec<Value> = std::fs::read_to_string(&exported)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // 7 kept counterfactuals (one was rejected on review) and their 7 originals.
    assert_eq!(lines.len(), 14, "{lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| l["text"].is_string() && l["label"].is_string())
    );
    // The same export as Parquet (from --out's extension), and the records as Parquet.
    let table = setup.dir.path().join("reviewed.parquet");
    let said = success_stderr(
        flipside()
            .args(["portal", "export", "--server", &server.url, "--team", &team])
            .args(["--queue", &upload_queue, "--originals", "--out"])
            .arg(&table)
            .env("FLIPSIDE_TOKEN", &secret),
    );
    assert!(said.contains("(14 rows)"), "{said}");
    check_parquet_matches_jsonl(&table, &exported);
    let shown = success(flipside().args(["data", "show"]).arg(&table));
    assert!(shown.contains("examples 14"), "{shown}");
    let records = script.get(&format!("{u}/export?format=records&as=parquet"));
    assert_eq!(
        records.headers()["content-type"],
        "application/vnd.apache.parquet"
    );
    let records_file = setup.dir.path().join("records.parquet");
    std::fs::write(&records_file, records.bytes().unwrap()).unwrap();
    let shown = success(flipside().args(["data", "show"]).arg(&records_file).args([
        "--text-col",
        "edited",
        "--label-col",
        "target",
    ]));
    assert!(shown.contains("examples 7"), "{shown}");
    let pairs = script
        .get(&format!("{u}/export?format=pairs"))
        .text()
        .unwrap();
    assert_eq!(pairs.lines().count(), 7);
    let model = setup.dir.path().join("reviewed-classifier");
    success(
        flipside()
            .args(["classifier", "train", "--data"])
            .arg(&exported)
            .arg("--out")
            .arg(&model)
            .args(["--epochs", "1", "--batch-size", "8", "--max-len", "24"]),
    );
    assert!(model.join("config.json").is_file());

    // A revoked token fails from the next request on.
    let revoked = ada.send(
        Method::DELETE,
        &format!("/tokens/{}", token["id"].as_str().unwrap()),
        None,
    );
    assert_eq!(revoked.status(), 204);
    check_error(
        script.get(&format!("/teams/{team}/queues")),
        401,
        "unauthorized",
    );

    the_access_table_is_the_servers(&server);
    every_endpoint_role_and_team(
        &ada,
        &[&dan, &bob, &cleo, &ada],
        &eve,
        &team,
        &other_team,
        job_id,
    );

    vec![
        ADMIN_PASSWORD.to_string(),
        PASSWORD.to_string(),
        secret,
        cookie.split('=').nth(1).unwrap().to_string(),
    ]
}

/// The team roles, least first, as the access table names them.
const ROLES: [&str; 4] = ["viewer", "annotator", "reviewer", "admin"];

/// A row of the route table of docs/src/access.md.
struct AccessRow {
    method: String,
    /// As the server sees it: `/api/…` or `/v1/…`.
    path: String,
    /// One of [`ROLES`], or `user` (any signed-in account).
    role: String,
    scope: String,
}

/// The route table of docs/src/access.md, the account model the book documents.
fn access_table() -> Vec<AccessRow> {
    let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/access.md");
    let page = std::fs::read_to_string(page).unwrap();
    let rows: Vec<AccessRow> = page
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let route = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let (method, path) = route.split_once(' ')?;
            let (role, scope) = (*cells.get(2)?, *cells.get(3)?);
            (role == "user" || ROLES.contains(&role)).then(|| AccessRow {
                method: method.into(),
                path: path.into(),
                role: role.into(),
                scope: scope.into(),
            })
        })
        .collect();
    assert!(rows.len() > 30, "{} rows", rows.len());
    rows
}

/// Every route the OpenAPI document gives a token scope is in the access table with that scope,
/// and every route of the table is served.
fn the_access_table_is_the_servers(server: &Server) {
    let openapi = json_of(server.get("/openapi.json"), 200);
    let mut served = Vec::new();
    for (path, operations) in openapi["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            let scopes: Vec<&str> = operation["security"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|requirement| requirement["token"].as_array())
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if let [scope] = scopes[..] {
                let path = match path.starts_with("/v1/") {
                    true => path.clone(),
                    false => format!("/api{path}"),
                };
                served.push(format!("{} {path} {scope}", method.to_uppercase()));
            } else {
                assert!(scopes.is_empty(), "{method} {path}: {scopes:?}");
            }
        }
    }
    let mut documented: Vec<String> = access_table()
        .iter()
        .map(|row| format!("{} {} {}", row.method, row.path, row.scope))
        .collect();
    served.sort();
    documented.sort();
    assert_eq!(
        documented, served,
        "docs/src/access.md against /api/openapi.json"
    );
}

/// Every portal endpoint as a viewer, annotator, reviewer and admin of the team, as the admin
/// with a token lacking the route's scope, and as the admin of another team: allowed, 403, or
/// 404 — and the other team's admin never sees data. Roles and scopes as the access table says.
fn every_endpoint_role_and_team(
    admin: &Account,
    members: &[&Account],
    outsider: &Account,
    team: &str,
    other_team: &str,
    job: &str,
) {
    let queue = new_queue(admin, team, json!({"name": "matrix queue"}));
    add_items(admin, team, &queue, &uploaded_items(40));
    let item = json_of(
        admin.get(&format!("/teams/{team}/queues/{queue}/stats")),
        200,
    );
    assert_eq!(item["items"], 40);
    let first = json_of(
        admin.get(&format!("/teams/{team}/queues/{queue}/review/next")),
        200,
    );
    assert!(first.is_null(), "nothing decided yet");
    // An item id, through the admin's lease (then decided so the item is reviewable).
    let lease = json_of(
        admin.post(&format!("/teams/{team}/queues/{queue}/next"), &json!({})),
        200,
    );
    let item = lease["item"]["id"].as_str().unwrap().to_string();
    json_of(
        admin.post(
            &format!("/teams/{team}/queues/{queue}/verdicts"),
            &verdict(&lease, "accept"),
        ),
        200,
    );
    // (method, path under the team as the access table writes it, the path, body); the least
    // role and the token's scope come from the table (docs/src/access.md).
    let q = format!("queues/{queue}");
    let endpoints: Vec<(Method, &str, String, Value)> = vec![
        (Method::GET, "members", "members".into(), Value::Null),
        (
            Method::POST,
            "invites",
            "invites".into(),
            json!({"email": "x@y.z", "role": "viewer"}),
        ),
        (Method::GET, "queues", "queues".into(), Value::Null),
        (
            Method::POST,
            "queues",
            "queues".into(),
            json!({"name": "made in the matrix"}),
        ),
        (Method::GET, "queues/{queue}", q.clone(), Value::Null),
        (
            Method::POST,
            "queues/{queue}/items",
            format!("{q}/items"),
            uploaded_items(1),
        ),
        (
            Method::POST,
            "queues/{queue}/upload",
            format!("{q}/upload"),
            json!({}),
        ),
        (
            Method::POST,
            "queues/{queue}/next",
            format!("{q}/next"),
            json!({}),
        ),
        (
            Method::POST,
            "queues/{queue}/verdicts",
            format!("{q}/verdicts"),
            json!({"lease": "lease-0", "request_id": "r", "verdict": "accept"}),
        ),
        (
            Method::POST,
            "queues/{queue}/undo",
            format!("{q}/undo"),
            json!({}),
        ),
        (
            Method::PUT,
            "queues/{queue}/leases/{lease}/draft",
            format!("{q}/leases/lease-0/draft"),
            json!({"text": "x"}),
        ),
        (
            Method::GET,
            "queues/{queue}/review/next",
            format!("{q}/review/next"),
            Value::Null,
        ),
        (
            Method::GET,
            "queues/{queue}/items/{item}",
            format!("{q}/items/{item}"),
            Value::Null,
        ),
        (
            Method::POST,
            "queues/{queue}/items/{item}/review",
            format!("{q}/items/{item}/review"),
            json!({"version": 999, "verdict": "accept"}),
        ),
        (
            Method::GET,
            "queues/{queue}/items/{item}/history",
            format!("{q}/items/{item}/history"),
            Value::Null,
        ),
        (
            Method::GET,
            "queues/{queue}/stats",
            format!("{q}/stats"),
            Value::Null,
        ),
        (
            Method::GET,
            "queues/{queue}/export",
            format!("{q}/export"),
            Value::Null,
        ),
        (Method::GET, "datasets", "datasets".into(), Value::Null),
        (Method::POST, "datasets", "datasets".into(), json!({})),
        (Method::GET, "jobs", "jobs".into(), Value::Null),
        (
            Method::POST,
            "jobs",
            "jobs".into(),
            json!({"dataset": "nope"}),
        ),
        (Method::GET, "jobs/{id}", format!("jobs/{job}"), Value::Null),
        (
            Method::GET,
            "jobs/{id}/events",
            format!("jobs/{job}/events"),
            Value::Null,
        ),
        (
            Method::GET,
            "jobs/{id}/records",
            format!("jobs/{job}/records"),
            Value::Null,
        ),
        (
            Method::GET,
            "jobs/{id}/records.jsonl",
            format!("jobs/{job}/records.jsonl"),
            Value::Null,
        ),
        (
            Method::GET,
            "jobs/{id}/records.parquet",
            format!("jobs/{job}/records.parquet"),
            Value::Null,
        ),
        (
            Method::POST,
            "jobs/{id}/cancel",
            format!("jobs/{job}/cancel"),
            json!({}),
        ),
        (
            Method::POST,
            "jobs/{id}/resume",
            format!("jobs/{job}/resume"),
            json!({}),
        ),
        (
            Method::DELETE,
            "jobs/{id}",
            "jobs/job-0".into(),
            Value::Null,
        ),
        (
            Method::DELETE,
            "datasets/{id}",
            "datasets/ds-0".into(),
            Value::Null,
        ),
    ];
    let table = access_table();
    let team_routes = table
        .iter()
        .filter(|row| row.path.starts_with("/api/teams/{team}/"))
        .count();
    assert_eq!(
        endpoints.len(),
        team_routes,
        "every team route of the table is called"
    );
    // Tokens of the admin, each with every scope but one.
    let lacking = |scope: &str| {
        let scopes: Vec<&str> = ["read", "review", "export", "manage", "generate"]
            .into_iter()
            .filter(|s| *s != scope)
            .collect();
        let token = json_of(
            admin.post("/tokens", &json!({"name": "all but one", "scopes": scopes})),
            201,
        );
        Account {
            auth: Auth::Token(token["token"].as_str().unwrap().into()),
            ..admin.clone()
        }
    };
    let lacking: HashMap<&str, Account> = ["read", "review", "export", "manage", "generate"]
        .into_iter()
        .map(|scope| (scope, lacking(scope)))
        .collect();
    for (method, template, path, body) in &endpoints {
        let row = table
            .iter()
            .find(|row| {
                row.method == method.as_str()
                    && row.path == format!("/api/teams/{{team}}/{template}")
            })
            .unwrap_or_else(|| panic!("{method} {template} is not in the access table"));
        let least = ROLES.iter().position(|role| *role == row.role).unwrap();
        let body = (!body.is_null()).then_some(body);
        let response = lacking[row.scope.as_str()].send(
            method.clone(),
            &format!("/teams/{team}/{path}"),
            body,
        );
        let message = check_error(response, 403, "forbidden");
        assert!(
            message.contains(&format!("lacks the {} scope", row.scope)),
            "{method} {path}: {message}"
        );
        for (role, member) in members.iter().enumerate() {
            let response = member.send(method.clone(), &format!("/teams/{team}/{path}"), body);
            let status = response.status().as_u16();
            let text = response.text().unwrap();
            if role < least {
                assert_eq!(status, 403, "{method} {path} as role {role}: {text}");
            } else {
                assert!(
                    ![401, 403].contains(&status)
                        && !text.contains("\"no team")
                        && !text.contains("\"no queue"),
                    "{method} {path} as role {role}: {status} {text}"
                );
            }
        }
        // The other team's admin: with the team's id, and with their own team's id.
        for as_team in [team, other_team] {
            let response = outsider.send(method.clone(), &format!("/teams/{as_team}/{path}"), body);
            let status = response.status().as_u16();
            let text = response.text().unwrap();
            let creates_in_own_team = as_team == other_team
                && ["invites", "queues", "members", "datasets", "jobs"].contains(&path.as_str());
            if creates_in_own_team {
                continue;
            }
            assert_eq!(
                status, 404,
                "{method} /teams/{as_team}/{path} as an outsider: {text}"
            );
            assert!(
                !text.contains("Review 0") && !text.contains("matrix queue"),
                "{text}"
            );
        }
    }
}

/// 50 reviewers share two queues through `servers`: every item of the overlap-1 queue is
/// decided exactly once, every item of the overlap-3 queue by exactly three different people,
/// and the items of five reviewers who vanish holding leases come back and are decided.
fn fifty_reviewers(servers: &[&Server], admin: &Account, team: &str) {
    const REVIEWERS: usize = 50;
    let reviewers: Vec<Account> = (0..REVIEWERS)
        .map(|i| {
            let person = invite(
                admin,
                team,
                &format!("r{i}@lab.org"),
                &format!("R{i}"),
                "annotator",
            );
            person.on(servers[i % servers.len()])
        })
        .collect();
    let single = new_queue(admin, team, json!({"name": "once", "lease_seconds": 5}));
    let triple = new_queue(
        admin,
        team,
        json!({"name": "thrice", "overlap": 3, "lease_seconds": 5}),
    );
    add_items(admin, team, &single, &uploaded_items(1000));
    add_items(admin, team, &triple, &uploaded_items(200));

    let decided: Arc<Mutex<Vec<(String, String, usize)>>> = Arc::default();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for (i, reviewer) in reviewers.iter().enumerate() {
            let decided = decided.clone();
            let queues = [(single.clone(), 1000), (triple.clone(), 200)];
            scope.spawn(move || {
                for (queue, total) in queues {
                    let q = format!("/teams/{team}/queues/{queue}");
                    // Five reviewers take an item and vanish (until their lease runs out).
                    if i < 5 {
                        json_of(reviewer.post(&format!("{q}/next"), &json!({})), 200);
                        continue;
                    }
                    loop {
                        if started.elapsed() > Duration::from_secs(240) {
                            let stats = json_of(reviewer.get(&format!("{q}/stats")), 200);
                            panic!("not done after 240 s: {stats}");
                        }
                        let lease = json_of(reviewer.post(&format!("{q}/next"), &json!({})), 200);
                        if lease.is_null() {
                            let stats = json_of(reviewer.get(&format!("{q}/stats")), 200);
                            if stats["decided"].as_u64() == Some(total) {
                                break;
                            }
                            // Leases still held elsewhere: wait for them to be decided or expire.
                            std::thread::sleep(Duration::from_millis(500));
                            continue;
                        }
                        let body = verdict(&lease, if i % 4 == 0 { "reject" } else { "accept" });
                        json_of(reviewer.post(&format!("{q}/verdicts"), &body), 200);
                        let item = lease["item"]["id"].as_str().unwrap().to_string();
                        decided.lock().unwrap().push((queue.clone(), item, i));
                    }
                }
            });
        }
    });
    let decided = decided.lock().unwrap();
    let mut people: HashMap<(&str, &str), HashSet<usize>> = HashMap::new();
    for (queue, item, who) in decided.iter() {
        assert!(
            people.entry((queue, item)).or_default().insert(*who),
            "{who} decided {item} twice"
        );
    }
    let single_items: Vec<_> = people.iter().filter(|((q, _), _)| *q == single).collect();
    assert_eq!(
        single_items.len(),
        1000,
        "every item decided, none stranded"
    );
    assert!(
        single_items.iter().all(|(_, who)| who.len() == 1),
        "nobody's item decided twice"
    );
    let triple_items: Vec<_> = people.iter().filter(|((q, _), _)| *q == triple).collect();
    assert_eq!(triple_items.len(), 200);
    assert!(
        triple_items.iter().all(|(_, who)| who.len() == 3),
        "exactly three people each"
    );
    let stats = json_of(
        admin.get(&format!("/teams/{team}/queues/{triple}/stats")),
        200,
    );
    assert_eq!(stats["decided"], 200);
    assert!(stats["krippendorff_alpha"].is_number(), "{stats}");
    eprintln!(
        "50 reviewers, {} verdicts through {} server(s) in {:.1} s",
        decided.len(),
        servers.len(),
        started.elapsed().as_secs_f64()
    );
}

fn crowd(setup: &EditingSetup, extra: &[&str], processes: usize) {
    let data = setup.dir.path().join("server");
    add_user(&data, extra, "ada@lab.org", "lab", "admin");
    let proxied = [extra, &["--behind-proxy"]].concat();
    let servers: Vec<Server> = (0..processes)
        .map(|_| Server::start(setup, &data, &proxied))
        .collect();
    behind_a_proxy(&servers);
    let admin = sign_in(&servers[0], "ada@lab.org", ADMIN_PASSWORD);
    let team = team_of(&admin);
    fifty_reviewers(&servers.iter().collect::<Vec<_>>(), &admin, &team);
}

/// Servers behind a TLS proxy: the session cookie is `Secure` when the proxy says the client
/// came over HTTPS, and sign-in failures count per client address as the proxy saw it (one
/// address spraying many emails is stopped; another address is not), across processes.
fn behind_a_proxy(servers: &[Server]) {
    let login_from = |server: &Server, address: &str, email: &str, password: &str| {
        server
            .http
            .post(server.url("/auth/login"))
            .header("x-forwarded-for", format!("198.51.100.1, {address}"))
            .header("x-forwarded-proto", "https")
            .json(&json!({"email": email, "password": password}))
            .send()
            .unwrap()
    };
    let signed_in = login_from(&servers[0], "203.0.113.9", "ada@lab.org", ADMIN_PASSWORD);
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(cookie.contains("; Secure"), "{cookie}");
    for i in 0..30 {
        let server = &servers[i % servers.len()];
        let email = format!("nobody{i}@lab.org");
        check_error(
            login_from(server, "203.0.113.7", &email, "guess"),
            401,
            "unauthorized",
        );
    }
    let server = servers.last().unwrap();
    let refused = login_from(server, "203.0.113.7", "ada@lab.org", ADMIN_PASSWORD);
    assert!(check_error(refused, 429, "throttled").contains("your address"));
    let other = login_from(server, "203.0.113.8", "ada@lab.org", ADMIN_PASSWORD);
    assert_eq!(other.status(), 200);
}

#[test]
fn fifty_reviewers_share_queues_on_sqlite() {
    crowd(&editing_setup(), &[], 1);
}

#[test]
fn fifty_reviewers_share_queues_through_two_servers_on_postgres() {
    let Some(postgres) = Postgres::start() else {
        return;
    };
    crowd(&editing_setup(), &["--database-url", &postgres.url], 2);
}

/// The cells a spreadsheet would run as formulas, as reviewers might type them.
const FORMULAS: [&str; 7] = [
    "=cmd|' /C calc'!A0",
    "=HYPERLINK(\"http://example.org\", \"click\")",
    "+SUM(1, 1)",
    "-SUM(1, 1)",
    "@SUM(1, 1)",
    "\tSUM(1, 1)",
    "\r=SUM(1, 1)",
];

/// The portal's second security round, each hole found by probing it: invitations never take
/// an existing account's password (so no guessing past the sign-in limits), a token without
/// `manage` neither lists nor revokes its siblings, a password change ends every session and
/// token, CSV exports defuse formulas, labels the classifier does not know are refused, errors
/// are JSON, the API's answers are not cached, `/v1` needs a generating role and an unknown
/// item has no history.
#[test]
fn account_paths_tokens_and_exports_hold() {
    let setup = editing_setup();
    let data = setup.dir.path().join("server");
    add_user(&data, &[], "ada@lab.org", "lab", "admin");
    add_user(&data, &[], "eve@other.org", "other", "admin");
    add_user(&data, &[], "vic@lab.org", "lab", "viewer");
    let server = Server::start(&setup, &data, &[]);
    let ada = sign_in(&server, "ada@lab.org", ADMIN_PASSWORD);
    let team = team_of(&ada);

    // An invitation for an existing account takes no password, not even the right one, and
    // names no email; the guesses leave the account's sign-in alone.
    let invitation = json_of(
        ada.post(
            &format!("/teams/{team}/invites"),
            &json!({"email": "eve@other.org", "role": "viewer"}),
        ),
        201,
    );
    let token = invitation["token"].as_str().unwrap();
    for guess in (0..6)
        .map(|i| format!("guess number {i}"))
        .chain([ADMIN_PASSWORD.into()])
    {
        let answer = server.post(
            "/invites/accept",
            &json!({"token": token, "name": "Eve", "password": guess}),
        );
        assert!(answer.headers().get("set-cookie").is_none());
        let message = check_error(answer, 401, "sign_in_required");
        assert!(!message.contains("eve@other.org"), "{message}");
    }
    let eve = sign_in(&server, "eve@other.org", ADMIN_PASSWORD);
    // Someone else's session cannot take it, and it stays open for the person invited.
    check_error(
        ada.post("/invites/accept", &json!({"token": token})),
        403,
        "forbidden",
    );
    // Eve's session without its CSRF token is refused as such, not taken for signed out.
    let without_csrf = server
        .http
        .post(server.url("/invites/accept"))
        .header("cookie", eve.cookie())
        .json(&json!({"token": token}))
        .send()
        .unwrap();
    check_error(without_csrf, 403, "csrf");
    let joined = json_of(eve.post("/invites/accept", &json!({"token": token})), 200);
    assert_eq!(joined["teams"].as_array().unwrap().len(), 2, "{joined}");
    let members = json_of(ada.get(&format!("/teams/{team}/members")), 200);
    assert!(members.to_string().contains("eve@other.org"), "{members}");

    // Guesses sent at once are all counted: at most the limit's five are checked, the rest
    // wait, and then so does the right password.
    let answers: Vec<u16> = std::thread::scope(|scope| {
        let guesses: Vec<_> = (0..16)
            .map(|i| {
                let server = &server;
                scope.spawn(move || login(server, "vic@lab.org", &format!("guess {i}")).status())
            })
            .collect();
        guesses
            .into_iter()
            .map(|guess| guess.join().unwrap().as_u16())
            .collect()
    });
    let checked = answers.iter().filter(|&&status| status == 401).count();
    assert!(checked <= 5, "{answers:?}");
    assert!(
        answers.iter().all(|&status| status == 401 || status == 429),
        "{answers:?}"
    );
    if checked == 5 {
        check_error(
            login(&server, "vic@lab.org", ADMIN_PASSWORD),
            429,
            "throttled",
        );
    }

    // An unknown email takes as long to refuse as a wrong password: both are checked against
    // an argon2 hash (about 40 ms), so the time does not tell which emails have accounts.
    let refusal_time = |email: &str| {
        let started = Instant::now();
        check_error(
            login(&server, email, "not the password"),
            401,
            "unauthorized",
        );
        started.elapsed()
    };
    let median = |mut times: Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let wrong = median((0..3).map(|_| refusal_time("ada@lab.org")).collect());
    let unknown = median(
        (0..3)
            .map(|i| refusal_time(&format!("nobody{i}@lab.org")))
            .collect(),
    );
    assert!(
        unknown * 3 >= wrong,
        "unknown {unknown:?}, wrong password {wrong:?}"
    );

    // A token without `manage` neither lists nor revokes the user's other tokens.
    let made = |scopes: Value| {
        json_of(
            ada.post("/tokens", &json!({"name": "t", "scopes": scopes})),
            201,
        )
    };
    let (manage, read) = (made(json!(["read", "manage"])), made(json!(["read"])));
    let as_token = |token: &Value| Account {
        auth: Auth::Token(token["token"].as_str().unwrap().into()),
        ..ada.clone()
    };
    let (manager, reader) = (as_token(&manage), as_token(&read));
    let manage_id = manage["id"].as_str().unwrap();
    check_error(
        reader.send(Method::DELETE, &format!("/tokens/{manage_id}"), None),
        403,
        "forbidden",
    );
    check_error(reader.get("/tokens"), 403, "forbidden");
    assert_eq!(
        json_of(manager.get("/tokens"), 200)
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // Labels the classifier does not know are refused in items and in relabels; the export
    // defuses every cell a spreadsheet would run.
    let queue = new_queue(&ada, &team, json!({"name": "formulas"}));
    let q = format!("/teams/{team}/queues/{queue}");
    let item = |original: String, label: &str, counterfactual: &str| json!({"original": original, "label": label, "target": "negative", "counterfactual": counterfactual});
    let message = check_error(
        ada.post(
            &format!("{q}/items"),
            &json!([item("Fine.".into(), "neutral", "Bad.")]),
        ),
        400,
        "bad_request",
    );
    assert!(message.contains("neutral"), "{message}");
    let items: Vec<Value> = FORMULAS
        .iter()
        .enumerate()
        .map(|(i, formula)| item(format!("Review {i} was lovely."), "positive", formula))
        .collect();
    add_items(&ada, &team, &queue, &Value::Array(items));
    let lease = json_of(ada.post(&format!("{q}/next"), &json!({})), 200);
    let mut relabel = verdict(&lease, "relabel");
    relabel["label"] = json!("neutral");
    check_error(
        ada.post(&format!("{q}/verdicts"), &relabel),
        400,
        "bad_request",
    );
    json_of(
        ada.post(&format!("{q}/verdicts"), &verdict(&lease, "accept")),
        200,
    );
    while let Some(lease) =
        Some(json_of(ada.post(&format!("{q}/next"), &json!({})), 200)).filter(|l| !l.is_null())
    {
        json_of(
            ada.post(&format!("{q}/verdicts"), &verdict(&lease, "accept")),
            200,
        );
    }
    for format in ["classifier", "pairs"] {
        let csv = ada.get(&format!("{q}/export?format={format}&as=csv"));
        assert_eq!(csv.status(), 200);
        let csv = csv.text().unwrap();
        let mut reader = csv::Reader::from_reader(csv.as_bytes());
        let mut defused = 0;
        for record in reader.records() {
            for cell in record.unwrap().iter() {
                assert!(
                    !cell.starts_with(['=', '+', '-', '@', '\t', '\r']),
                    "{cell:?}"
                );
                defused += usize::from(FORMULAS.iter().any(|f| cell == format!("'{f}")));
            }
        }
        assert_eq!(defused, FORMULAS.len(), "{format}: {csv}");
    }
    // JSON lines keep the texts as typed.
    let jsonl = ada.get(&format!("{q}/export")).text().unwrap();
    assert!(jsonl.contains(&json!(FORMULAS[0]).to_string()), "{jsonl}");

    // Errors are JSON, the API's answers are not cached, and an unknown item has no history.
    check_error(ada.get(&format!("{q}/export?as=xml")), 400, "bad_request");
    check_error(
        ada.get(&format!("{q}/review/next?after=abc")),
        400,
        "bad_request",
    );
    check_error(
        ada.get(&format!("{q}/items/no-such-item/history")),
        404,
        "not_found",
    );
    let me = ada.get("/auth/me");
    assert_eq!(me.headers()["cache-control"], "no-store");
    let posted = server
        .http
        .post(format!("{}index.html", server.url))
        .send()
        .unwrap();
    assert_eq!(posted.headers()["allow"], "GET, HEAD");
    check_error(posted, 405, "method_not_allowed");
    let missing = server
        .http
        .get(format!("{}nowhere", server.url))
        .send()
        .unwrap();
    check_error(missing, 404, "not_found");

    // A viewer's token cannot use the LLM API, even with the `generate` scope.
    let viewer = api_token(&data, &[], "vic@lab.org", "generate");
    let models = server
        .http
        .get(format!("{}v1/models", server.url))
        .bearer_auth(&viewer)
        .send()
        .unwrap();
    check_error(models, 403, "forbidden");

    // A password change ends the user's sessions and revokes their tokens.
    let mut change = flipside()
        .args([
            "users",
            "password",
            "--email",
            "ada@lab.org",
            "--password-stdin",
        ])
        .arg("--data-dir")
        .arg(&data)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(change.stdin.take().unwrap(), "{PASSWORD}").unwrap();
    let said = change.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&said.stdout);
    assert!(
        said.contains("1 session(s) ended, 2 token(s) revoked"),
        "{said}"
    );
    for old in [&ada, &manager, &reader] {
        check_error(old.get("/auth/me"), 401, "unauthorized");
    }
    sign_in(&server, "ada@lab.org", PASSWORD);
}
