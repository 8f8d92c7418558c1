//! The team portal against real `flipside serve` processes on loopback: the first admin made by
//! the CLI, invitations, sessions with CSRF, throttled sign-in, scoped and revocable API
//! tokens; review queues from a job and from uploads with leases, verdicts, replays, stale
//! saves, drafts, undo, the second pass and classifier overrides; exports that `classifier
//! train` reads; every endpoint (datasets and jobs too) × role × another team's ids; and 50
//! reviewers at once on SQLite and on two servers sharing Postgres.

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::accounts::{
    ADMIN_PASSWORD, Account, Auth, add_user, follow, items_dataset, login, session_of, sign_in,
    team_of,
};
use crate::common::{EditingSetup, editing_setup, flipside, success};
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
    for reviewer in [&bob, &cleo] {
        while let Some(lease) = Some(json_of(
            reviewer.post(&format!("{q}/next"), &json!({})),
            200,
        ))
        .filter(|l| !l.is_null())
        {
            let item = &lease["item"];
            assert!(item["counterfactual"].is_string() && item["provenance"].is_object());
            let mut body = verdict(&lease, "accept");
            if item["flipped"] == false {
                body["verdict"] = json!("flag");
            }
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

    // Files of items: the job's records as JSON lines, and a CSV; a bad row adds nothing.
    let records = ada
        .get(&format!("/teams/{team}/jobs/{job_id}/records.jsonl"))
        .bytes()
        .unwrap()
        .to_vec();
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
    assert!(
        stats["krippendorff_alpha"].is_number() || written < 2,
        "{stats}"
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

/// Every portal endpoint as a viewer, annotator, reviewer and admin of the team, and as the
/// admin of another team: allowed, 403, or 404 — and the other team's admin never sees data.
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
    // (method, path under the team, body, least role: 0 viewer … 3 admin)
    let q = format!("queues/{queue}");
    let endpoints: Vec<(Method, String, Value, usize)> = vec![
        (Method::GET, "members".into(), Value::Null, 0),
        (
            Method::POST,
            "invites".into(),
            json!({"email": "x@y.z", "role": "viewer"}),
            3,
        ),
        (Method::GET, "queues".into(), Value::Null, 0),
        (
            Method::POST,
            "queues".into(),
            json!({"name": "made in the matrix"}),
            3,
        ),
        (Method::GET, q.clone(), Value::Null, 0),
        (Method::POST, format!("{q}/items"), uploaded_items(1), 3),
        (Method::POST, format!("{q}/next"), json!({}), 1),
        (
            Method::POST,
            format!("{q}/verdicts"),
            json!({"lease": "lease-0", "request_id": "r", "verdict": "accept"}),
            1,
        ),
        (Method::POST, format!("{q}/undo"), json!({}), 1),
        (
            Method::PUT,
            format!("{q}/leases/lease-0/draft"),
            json!({"text": "x"}),
            1,
        ),
        (Method::GET, format!("{q}/review/next"), Value::Null, 2),
        (Method::GET, format!("{q}/items/{item}"), Value::Null, 0),
        (
            Method::POST,
            format!("{q}/items/{item}/review"),
            json!({"version": 999, "verdict": "accept"}),
            2,
        ),
        (
            Method::GET,
            format!("{q}/items/{item}/history"),
            Value::Null,
            0,
        ),
        (Method::GET, format!("{q}/stats"), Value::Null, 0),
        (Method::GET, format!("{q}/export"), Value::Null, 2),
        (Method::GET, "datasets".into(), Value::Null, 0),
        (Method::POST, "datasets".into(), json!({}), 2),
        (Method::GET, "jobs".into(), Value::Null, 0),
        (Method::POST, "jobs".into(), json!({"dataset": "nope"}), 2),
        (Method::GET, format!("jobs/{job}"), Value::Null, 0),
        (Method::GET, format!("jobs/{job}/events"), Value::Null, 0),
        (Method::GET, format!("jobs/{job}/records"), Value::Null, 0),
        (
            Method::GET,
            format!("jobs/{job}/records.jsonl"),
            Value::Null,
            0,
        ),
        (Method::POST, format!("jobs/{job}/cancel"), json!({}), 2),
        (Method::DELETE, "jobs/job-0".into(), Value::Null, 2),
        (Method::DELETE, "datasets/ds-0".into(), Value::Null, 2),
    ];
    for (method, path, body, least) in &endpoints {
        let body = (!body.is_null()).then_some(body);
        for (role, member) in members.iter().enumerate() {
            let response = member.send(method.clone(), &format!("/teams/{team}/{path}"), body);
            let status = response.status().as_u16();
            let text = response.text().unwrap();
            if role < *least {
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
