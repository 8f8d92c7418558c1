//! Hostile and careless clients against a real `flipside serve` on loopback: connections held
//! open without a request, headers or bodies sent a byte at a time, more connections than one
//! address may hold, a generation whose client left, and a mixed load beyond what the server
//! can run at once. Also the request log they leave, and retention of what they upload.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use serde_json::{Value, json};

use crate::accounts::{add_user, api_token, first_admin, items_dataset};
use crate::common::ITEMS;
use crate::common::{editing_setup, serve_command};
use crate::server::{Server, check_error, json_of, wait_for_status};
use flipside_backend::server::priority::lower_this_thread;

/// Connections the test's server allows one address.
const PER_CLIENT: usize = 6;

/// The server's header timeout (`connections::HEADER_TIMEOUT`) and body grace (`body_pace`).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_GRACE: Duration = Duration::from_secs(10);

/// A raw connection to the server at `url` (`http://host:port/`).
fn connect(url: &str) -> TcpStream {
    let address = url.trim_start_matches("http://").trim_end_matches('/');
    let stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
}

/// Everything the server sends until it closes the connection, and how long that took.
fn read_until_closed(stream: &mut TcpStream) -> (String, Duration) {
    let started = Instant::now();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
            // A reset is a close too.
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(error) => panic!("the server kept the connection open: {error}"),
        }
    }
    (
        String::from_utf8_lossy(&received).into_owned(),
        started.elapsed(),
    )
}

/// A health request on a new connection: the connection, left open, and the reply's head (the
/// whole reply when the server closes the connection after it).
fn health_on_a_new_connection(url: &str) -> (TcpStream, String) {
    let mut stream = connect(url);
    stream
        .write_all(b"GET /api/health HTTP/1.1\r\nHost: flipside\r\n\r\n")
        .unwrap();
    let mut reply = Vec::new();
    let mut buffer = [0u8; 4096];
    while !reply.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => reply.extend_from_slice(&buffer[..n]),
        }
    }
    let mut reply = String::from_utf8_lossy(&reply).into_owned();
    if !reply.starts_with("HTTP/1.1 200") {
        reply += &read_until_closed(&mut stream).0;
    }
    (stream, reply)
}

#[test]
fn slow_and_greedy_clients_are_cut_off_and_every_request_is_logged() {
    let setup = editing_setup();
    let data_dir = setup.dir.path().join("server");
    let log_path = setup.dir.path().join("server.log");
    let server = Server::spawn(
        serve_command(
            &setup,
            &data_dir,
            &["--max-connections-per-client", &PER_CLIENT.to_string()],
        )
        .stderr(std::fs::File::create(&log_path).unwrap()),
    );
    let url = server.url.clone();

    // Slow clients first, while this address holds no other connection: a closed connection's
    // slot comes back when the server notices the close, a moment after the client's, so after
    // the greedy clients at the end some of these could still be refused.
    std::thread::scope(|scope| {
        // Headers that never end: the connection is closed once the header timeout passes.
        let half_headers = scope.spawn(|| {
            let mut stream = connect(&url);
            stream
                .write_all(b"GET /api/health HTTP/1.1\r\nHost: flipside\r\n")
                .unwrap();
            read_until_closed(&mut stream)
        });
        // A kept-alive connection left idle after its request is closed after as long.
        let idle = scope.spawn(|| {
            let mut stream = connect(&url);
            stream
                .write_all(b"GET /api/health HTTP/1.1\r\nHost: flipside\r\n\r\n")
                .unwrap();
            read_until_closed(&mut stream)
        });
        // A body at a byte a second ends with 408 after the grace.
        let trickle = scope.spawn(|| {
            let mut stream = connect(&url);
            stream
                .write_all(
                    b"POST /api/classify HTTP/1.1\r\nHost: flipside\r\n\
                      Content-Type: application/json\r\nContent-Length: 200\r\n\r\n",
                )
                .unwrap();
            let mut writer = stream.try_clone().unwrap();
            let sender = std::thread::spawn(move || {
                for _ in 0..60 {
                    if writer.write_all(b" ").is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            });
            let reply = read_until_closed(&mut stream);
            drop(stream);
            let _ = sender.join();
            reply
        });

        let (reply, waited) = half_headers.join().unwrap();
        assert!(!reply.contains("200 OK"), "{reply}");
        assert!(
            waited >= HEADER_TIMEOUT - Duration::from_secs(1)
                && waited < HEADER_TIMEOUT + Duration::from_secs(5),
            "half-sent headers held for {waited:?}"
        );
        let (reply, waited) = idle.join().unwrap();
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        assert!(
            waited < HEADER_TIMEOUT + Duration::from_secs(5),
            "an idle connection held for {waited:?}"
        );
        let (reply, waited) = trickle.join().unwrap();
        assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
        assert!(reply.contains("request_timeout"), "{reply}");
        assert!(
            waited >= BODY_GRACE - Duration::from_secs(1)
                && waited < BODY_GRACE + Duration::from_secs(5),
            "a trickled body held for {waited:?}"
        );
    });

    // A URI or headers over the limits are refused with JSON errors.
    let long_uri = format!("{}?q={}", server.url("/health"), "a".repeat(9000));
    let refused = server.http.get(long_uri).send().unwrap();
    check_error(refused, 414, "uri_too_long");
    let mut request = server.http.get(server.url("/health"));
    for i in 0..120 {
        request = request.header(format!("x-filler-{i}"), "1");
    }
    check_error(request.send().unwrap(), 431, "headers_too_large");
    let huge_header = "b".repeat(70_000);
    let refused = server
        .http
        .get(server.url("/health"))
        .header("x-filler", huge_header)
        .send()
        .unwrap();
    check_error(refused, 431, "headers_too_large");

    // Heads hyper cannot parse get the app's JSON errors and security headers too.
    let mut over_buffer = b"GET /api/health HTTP/1.1\r\nx-filler: ".to_vec();
    over_buffer.resize(over_buffer.len() + (1 << 20) + 10, b'c');
    for (head, status, code) in [
        (
            b"GET /api/health HTTP/1.1\r\nx-a: b\0c\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (
            b"POST /api/classify HTTP/1.1\r\ncontent-length: ten\r\n\r\n".to_vec(),
            400,
            "bad_request",
        ),
        (over_buffer, 431, "headers_too_large"),
    ] {
        let mut stream = connect(&url);
        // The server may answer and close before the whole head is sent.
        let _ = stream.write_all(&head);
        let reply = read_until_closed(&mut stream).0;
        assert!(reply.starts_with(&format!("HTTP/1.1 {status} ")), "{reply}");
        assert!(reply.contains(&format!("\"code\":\"{code}\"")), "{reply}");
        for header in ["x-content-type-options: nosniff", "x-frame-options: DENY"] {
            assert!(reply.contains(header), "{reply}");
        }
    }

    // A query string is never logged (it may carry what the path does not).
    json_of(server.get("/health?secret=abc"), 200);
    // Last, since the slots of the connections it drops come back a moment later: one address
    // holds at most PER_CLIENT connections (one may be the client's pooled connection), the next
    // is answered 429 and closed, and a slot comes back when a connection closes.
    let mut held = Vec::new();
    let refused = loop {
        let (stream, reply) = health_on_a_new_connection(&url);
        if !reply.starts_with("HTTP/1.1 200") {
            break reply;
        }
        held.push(stream);
        assert!(
            held.len() <= PER_CLIENT,
            "{} connections admitted",
            held.len()
        );
    };
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
    assert!(refused.contains("too_many_connections"), "{refused}");
    assert!(refused.contains("x-frame-options: DENY"), "{refused}");
    assert!(held.len() >= PER_CLIENT - 1, "{} admitted", held.len());
    drop(held.pop());
    let started = Instant::now();
    while !health_on_a_new_connection(&url)
        .1
        .starts_with("HTTP/1.1 200")
    {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no slot came back"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(held);

    let status = server.terminate();
    assert!(status.success(), "{status}");
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("127.0.0.1 \"GET /api/health\" 200")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("127.0.0.1 \"POST /api/classify\" 408")),
        "{log}"
    );
    assert!(!log.contains("secret"), "{log}");
}

#[test]
fn a_generation_stops_when_its_client_leaves_or_its_deadline_passes() {
    let setup = editing_setup();
    let data_dir = setup.dir.path().join("server");
    let server = Server::start(&setup, &data_dir, &[]);
    add_user(&data_dir, &[], "ada@lab.org", "lab", "admin");
    let key = api_token(&data_dir, &[], "ada@lab.org", "generate");
    let complete = |server: &Server, client: &Client, max_tokens: usize| {
        client
            .post(format!("{}v1/completions", server.url))
            .bearer_auth(&key)
            .json(&json!({
                "prompt": "1, 2, 3, 4, 5, 6, 7, 8,",
                "max_tokens": max_tokens,
                "temperature": 0,
            }))
            .send()
    };

    // The whole generation, for scale: counting on never ends by itself.
    const LONG: usize = 600;
    let started = Instant::now();
    let whole: Value = json_of(complete(&server, &server.http, LONG).unwrap(), 200);
    let whole_time = started.elapsed();
    assert_eq!(whole["usage"]["completion_tokens"], LONG, "{whole}");

    // The same request from a client that gives up after a second: the engine stops, so a short
    // request right after is not kept waiting for the rest of the long one.
    let impatient = Client::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    assert!(complete(&server, &impatient, LONG).is_err());
    let started = Instant::now();
    json_of(complete(&server, &server.http, 1).unwrap(), 200);
    let waited = started.elapsed();
    assert!(
        waited < whole_time / 2,
        "waited {waited:?} behind an abandoned generation that takes {whole_time:?} whole"
    );
    drop(server);

    // With a deadline of a second, a long completion and a long demo edit are answered 503, and
    // each stops: short completions are answered again soon after.
    let server = Server::start(&setup, &data_dir, &["--deadline", "1s"]);
    let started = Instant::now();
    let refused = complete(&server, &server.http, 3_000).unwrap();
    assert_eq!(refused.status(), 503);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    json_of(complete(&server, &server.http, 1).unwrap(), 200);
    let long_review =
        "The plot wanders and the acting is wooden, but the score is lovely. ".repeat(70);
    let message = check_error(
        server.post("/edit", &json!({"text": long_review, "label": "negative"})),
        503,
        "deadline",
    );
    assert!(message.contains("within 1 s"), "{message}");
    // The engine checks between tokens, and between chunks of 512 prompt tokens (about 2 s each
    // on 2 AVX2 cores): the edit would have run on for about a minute there (55 s whole).
    let started = Instant::now();
    while complete(&server, &server.http, 1).unwrap().status() != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the engine is still busy with an abandoned edit after {:?}",
            started.elapsed()
        );
    }
}

/// How long the load runs, and the most memory the server may take meanwhile (it holds about
/// 0.5 GB idle: the classifier, MiniLM, the index and SmolLM2).
const LOAD_SECONDS: u64 = 20;
const MEMORY_CEILING_MB: u64 = 1200;

/// The server's resident memory, in MB.
fn resident_mb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

#[test]
fn under_a_mixed_load_health_stays_quick_memory_bounded_and_the_excess_is_refused() {
    let setup = editing_setup();
    let data_dir = setup.dir.path().join("server");
    let server = Server::start(&setup, &data_dir, &[]);
    let (admin, team) = first_admin(&server, &data_dir, &[], "ada@lab.org", "lab");
    let deadline = Instant::now() + Duration::from_secs(LOAD_SECONDS);
    // Statuses per endpoint; 0 for a request that got no answer, 599 for a 503 without
    // Retry-After.
    let statuses: Mutex<BTreeMap<&str, Vec<u16>>> = Mutex::default();
    let statuses_of = &statuses;
    let record = move |endpoint: &'static str,
                       answer: reqwest::Result<reqwest::blocking::Response>| {
        let status = match answer {
            Ok(response) => {
                let status = response.status().as_u16();
                let retry = response.headers().contains_key("retry-after");
                // Read the whole body, as a client would.
                let _ = response.bytes();
                if status == 503 && !retry { 599 } else { status }
            }
            Err(_) => 0,
        };
        statuses_of
            .lock()
            .unwrap()
            .entry(endpoint)
            .or_default()
            .push(status);
    };
    let client = || {
        Client::builder()
            .timeout(Duration::from_secs(90))
            .build()
            .unwrap()
    };
    // The largest classify request there is: 64 texts of 5,000 characters.
    let long_text = "The film was long and the acting was wooden, but the music was fine. "
        .repeat(80)[..5000]
        .to_string();
    let classify = serde_json::to_vec(&json!({"texts": vec![long_text; 64]})).unwrap();
    let edit = json!({"text": "The film was wonderful and the cast superb.", "label": "positive"});

    // The clients run at a lower priority than this test's health probe and the server, as if
    // they were on other machines: on 2 cores they would otherwise take the CPU from both.
    let until_deadline = |work: &(dyn Fn(&Client) + Sync)| {
        lower_this_thread();
        let http = client();
        while Instant::now() < deadline {
            work(&http);
        }
    };
    let (health, memory) = std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                until_deadline(&|http| {
                    let request = http
                        .post(server.url("/classify"))
                        .header("content-type", "application/json")
                        .body(classify.clone());
                    record("classify", request.send())
                })
            });
        }
        for _ in 0..4 {
            scope.spawn(|| {
                until_deadline(&|http| {
                    record("edit", http.post(server.url("/edit")).json(&edit).send())
                })
            });
        }
        for _ in 0..4 {
            scope.spawn(|| {
                until_deadline(&|http| {
                    let file = server.url("/classifier/model.int8.safetensors");
                    record("download", http.get(file).send())
                })
            });
        }
        // Uploads, each deleted again (the team's quota stays free).
        for worker in 0..2 {
            let (admin, team) = (&admin, &team);
            scope.spawn(move || {
                lower_this_thread();
                let datasets = format!("/teams/{team}/datasets");
                let mut round = 0;
                while Instant::now() < deadline {
                    round += 1;
                    let name = format!("load-{worker}-{round}.csv");
                    let uploaded = admin.upload(&datasets, &name, ITEMS.into(), &[]);
                    let status = uploaded.status().as_u16();
                    let body: Value = uploaded.json().unwrap_or_default();
                    statuses_of
                        .lock()
                        .unwrap()
                        .entry("upload")
                        .or_default()
                        .push(status);
                    if let Some(id) = body["id"].as_str() {
                        let path = format!("{datasets}/{id}");
                        let deleted = admin.send(reqwest::Method::DELETE, &path, None);
                        let status = deleted.status().as_u16();
                        statuses_of
                            .lock()
                            .unwrap()
                            .entry("delete")
                            .or_default()
                            .push(status);
                    }
                }
            });
        }
        // Health, every 20 ms over one kept-alive connection, and the server's memory.
        let health = scope.spawn(|| {
            let http = client();
            let mut times = Vec::new();
            while Instant::now() < deadline {
                let started = Instant::now();
                let answer = http.get(server.url("/health")).send();
                assert!(
                    answer.is_ok_and(|a| a.status() == 200),
                    "health failed under load"
                );
                times.push(started.elapsed());
                std::thread::sleep(Duration::from_millis(20));
            }
            times
        });
        let memory = scope.spawn(|| {
            let mut peak = 0;
            while Instant::now() < deadline + Duration::from_secs(2) {
                peak = peak.max(resident_mb(server.pid()));
                std::thread::sleep(Duration::from_millis(100));
            }
            peak
        });
        (health.join().unwrap(), memory.join().unwrap())
    });

    let statuses = statuses.into_inner().unwrap();
    let mut health = health;
    health.sort();
    let percentile = |p: usize| health[(health.len() * p / 100).min(health.len() - 1)];
    let (p50, p99) = (percentile(50), percentile(99));
    let mut summary = format!(
        "{LOAD_SECONDS} s of load: health p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms over {} probes; \
         peak memory {memory} MB;",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        health.last().unwrap().as_secs_f64() * 1e3,
        health.len()
    );
    for (endpoint, list) in &statuses {
        let mut counts: BTreeMap<u16, usize> = BTreeMap::new();
        for &status in list {
            *counts.entry(status).or_default() += 1;
        }
        summary += &format!(" {endpoint} {counts:?};");
    }
    eprintln!("{summary}");
    for (endpoint, list) in &statuses {
        assert!(
            list.iter().all(|s| matches!(s, 200 | 201 | 204 | 503)),
            "{endpoint}: an answer that is not success or 503 + Retry-After: {summary}"
        );
        assert!(
            list.iter().any(|status| *status != 503),
            "{endpoint} never served: {summary}"
        );
    }
    assert!(p99 < Duration::from_millis(50), "{summary}");
    assert!(memory < MEMORY_CEILING_MB, "{summary}");
}

#[test]
fn under_retention_old_uploads_and_finished_jobs_are_deleted_with_their_files() {
    let setup = editing_setup();
    let data_dir = setup.dir.path().join("server");
    let server = Server::start(&setup, &data_dir, &["--retention", "3s"]);
    let (admin, team) = first_admin(&server, &data_dir, &[], "ada@lab.org", "lab");
    let dataset = items_dataset(&admin, &team);
    let jobs = format!("/teams/{team}/jobs");
    let job = json_of(
        admin.post(&jobs, &json!({"dataset": dataset, "limit": 1})),
        202,
    );
    let id = job["id"].as_str().unwrap();
    let finished = wait_for_status(&admin, &team, id, "done");
    assert_eq!(finished["done"], 1);
    // A finished job goes 3 s after it finished, and then the upload it read. The rows go
    // before the files (a sweep deletes a job's row, then its files), so the files are
    // awaited too.
    let files_left = || -> Vec<_> {
        ["datasets", "jobs"]
            .iter()
            .flat_map(|dir| std::fs::read_dir(data_dir.join(dir)).into_iter().flatten())
            .flatten()
            .map(|f| f.file_name())
            .collect()
    };
    let started = Instant::now();
    loop {
        let job_gone = admin.get(&format!("{jobs}/{id}")).status() == 404;
        let listed = json_of(admin.get(&format!("/teams/{team}/datasets")), 200);
        let upload_gone = listed
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["id"] != dataset.as_str());
        let left = files_left();
        if job_gone && upload_gone && left.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "still there after 30 s: job {job_gone}, upload {upload_gone}, files {left:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
