//! Faults under running work, each checked for nothing lost and nothing duplicated afterwards:
//! the disk filling during an upload, the OpenAI-compatible endpoint a job edits through dying
//! mid-job, SIGTERM mid-job, and a Postgres restart under a running job. (A full disk during
//! `flipside generate` is in `generate.rs`, SIGKILL mid-job in `server.rs`.)

use std::collections::HashMap;
use std::net::TcpListener;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::accounts::{Account, add_user, api_token, first_admin, follow, items_dataset};
use crate::common::{editing_setup, limit_file_size, serve_command};
use crate::server::{Postgres, Server, check_error, json_of, wait_for_status};

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Job `id`'s records by item key (their edits), checking that no key comes twice.
fn records(account: &Account, team: &str, id: &str) -> HashMap<String, Value> {
    let page = json_of(
        account.get(&format!("/teams/{team}/jobs/{id}/records?limit=500")),
        200,
    );
    let records = page["records"].as_array().unwrap();
    let by_key: HashMap<String, Value> = records
        .iter()
        .map(|r| (r["key"].as_str().unwrap().to_string(), r["edited"].clone()))
        .collect();
    assert_eq!(by_key.len(), records.len(), "a record twice: {page}");
    by_key
}

/// Starts job of `limit` items on `dataset`; its id.
fn start_job(account: &Account, team: &str, dataset: &str, seed: u64) -> String {
    let job = json_of(
        account.post(
            &format!("/teams/{team}/jobs"),
            &json!({"dataset": dataset, "limit": 6, "seed": seed}),
        ),
        202,
    );
    job["id"].as_str().unwrap().to_string()
}

/// Checks a finished job: every item done once, and the records made before a fault kept as
/// they were.
fn check_finished(account: &Account, team: &str, id: &str, before: &HashMap<String, Value>) {
    let job = wait_for_status(account, team, id, "done");
    assert_eq!(
        (job["total"].as_u64(), job["done"].as_u64()),
        (Some(6), Some(6)),
        "{job}"
    );
    let after = records(account, team, id);
    assert_eq!(
        after.len() as u64,
        job["written"].as_u64().unwrap(),
        "{job}"
    );
    for (key, edit) in before {
        assert_eq!(
            after.get(key),
            Some(edit),
            "the record of {key} was lost or changed"
        );
    }
}

#[test]
fn a_full_disk_a_dying_llm_endpoint_and_sigterm_lose_and_duplicate_nothing() {
    let setup = editing_setup();
    // The LLM endpoint: another `flipside serve` with the embedded model, at an address it can
    // come back on.
    let listen = format!("127.0.0.1:{}", free_port());
    let llm_data = setup.dir.path().join("llm");
    let llm = Server::start(&setup, &llm_data, &["--listen", &listen]);
    add_user(&llm_data, &[], "llm@lab.org", "llm", "admin");
    let key = api_token(&llm_data, &[], "llm@lab.org", "generate");

    // The jobs' server edits through it (retrying once), first with a limit of 2 MB per file
    // standing in for a disk about to fill.
    let data = setup.dir.path().join("jobs");
    let api_base = format!("http://{listen}/v1");
    let jobs_server = |full_disk: bool| {
        let mut command = serve_command(
            &setup,
            &data,
            &[
                "--api-base",
                &api_base,
                "--retries",
                "1",
                "--max-upload-mb",
                "8",
            ],
        );
        command.env("OPENAI_API_KEY", &key).stderr(Stdio::null());
        if full_disk {
            limit_file_size(&mut command, 2 << 20);
        }
        Server::spawn(&mut command)
    };
    let server = jobs_server(true);
    let (admin, team) = first_admin(&server, &data, &[], "ada@lab.org", "lab");

    // The disk fills during an upload: 507, and neither the file nor a dataset is kept; the
    // server goes on.
    let datasets = format!("/teams/{team}/datasets");
    let row = "A long, slow and rather dull review of a film.,negative\n";
    let big = format!("text,label\n{}", row.repeat((3 << 20) / row.len()));
    let refused = admin.upload(&datasets, "big.csv", big.into_bytes(), &[]);
    let message = check_error(refused, 507, "insufficient_storage");
    assert!(message.contains("disk is full"), "{message}");
    let listed = json_of(admin.get(&datasets), 200);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["name"] != "big.csv"),
        "{listed}"
    );
    let kept = std::fs::read_dir(data.join("datasets")).map_or(0, |files| files.count());
    assert_eq!(kept, 0, "a partial upload was kept");
    let dataset = items_dataset(&admin, &team);

    // The LLM endpoint dies mid-job: the job fails saying so, keeping what it made.
    let jobs = format!("/teams/{team}/jobs");
    let id = start_job(&admin, &team, &dataset, 3);
    follow(&admin, &team, &id, |job| {
        job["written"].as_u64().unwrap() >= 1
    });
    llm.kill();
    let failed = wait_for_status(&admin, &team, &id, "failed");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains(&listen),
        "the error does not name the endpoint: {failed}"
    );
    let before_failure = records(&admin, &team, &id);
    assert!(
        !before_failure.is_empty() && before_failure.len() < 6,
        "{failed}"
    );

    // The endpoint comes back and the job is resumed: it goes on from where it stopped.
    let llm = Server::start(&setup, &llm_data, &["--listen", &listen]);
    let resumed = json_of(admin.post(&format!("{jobs}/{id}/resume"), &json!({})), 200);
    assert_eq!(resumed["status"], "queued", "{resumed}");
    assert!(resumed["error"].is_null(), "{resumed}");
    check_error(
        admin.post(&format!("{jobs}/{id}/resume"), &json!({})),
        409,
        "conflict",
    );

    // SIGTERM mid-job: the server stops cleanly and, started again, finishes the job.
    let done_before = failed["done"].as_u64().unwrap();
    follow(&admin, &team, &id, |job| {
        job["done"].as_u64().unwrap() > done_before || job["status"] == "done"
    });
    let before_stop = records(&admin, &team, &id);
    let status = server.terminate();
    assert!(status.success(), "{status}");
    let server = jobs_server(false);
    let admin = admin.on(&server);
    check_finished(&admin, &team, &id, &before_failure);
    check_finished(&admin, &team, &id, &before_stop);
    drop(llm);
}

#[test]
fn a_job_rides_out_a_postgres_restart() {
    let Some(postgres) = Postgres::start() else {
        return;
    };
    let setup = editing_setup();
    let data = setup.dir.path().join("server");
    let extra = ["--database-url", postgres.url.as_str()];
    let server = Server::start(&setup, &data, &extra);
    let (admin, team) = first_admin(&server, &data, &extra, "ada@lab.org", "lab");
    let dataset = items_dataset(&admin, &team);
    let id = start_job(&admin, &team, &dataset, 4);
    follow(&admin, &team, &id, |job| {
        job["written"].as_u64().unwrap() >= 1
    });
    let before = records(&admin, &team, &id);

    // Postgres goes away for a few seconds while the job runs, then comes back.
    postgres.stop();
    std::thread::sleep(Duration::from_secs(4));
    postgres.start_again();
    check_finished(&admin, &team, &id, &before);
    assert!(server.get("/health").status().is_success());
}
