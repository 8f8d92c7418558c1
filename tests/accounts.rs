//! Signed-in test clients of a `flipside serve` process: the first admin made by `flipside
//! users add`, sessions (cookie + CSRF header) and API tokens.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use reqwest::Method;
use reqwest::blocking::{Client, Response};
use serde_json::{Value, json};

use crate::common::flipside;
use crate::server::{Server, json_of};

/// The first admin's password (given on stdin, as an operator would).
pub(crate) const ADMIN_PASSWORD: &str = "correct horse battery staple";
/// How a test client authenticates.
#[derive(Clone)]
pub(crate) enum Auth {
    Session { cookie: String, csrf: String },
    Token(String),
}

/// A signed-in client of one server.
#[derive(Clone)]
pub(crate) struct Account {
    pub http: Client,
    pub base: String,
    pub auth: Auth,
}

impl Account {
    pub fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Response {
        let mut request = self.http.request(method, format!("{}api{path}", self.base));
        request = match &self.auth {
            Auth::Session { cookie, csrf } => request
                .header("cookie", cookie)
                .header("x-csrf-token", csrf),
            Auth::Token(token) => request.bearer_auth(token),
        };
        if let Some(body) = body {
            request = request.json(body);
        }
        request.send().unwrap()
    }

    /// Posts `bytes` as the multipart field `file` named `name`, with text `fields`.
    pub fn upload(
        &self,
        path: &str,
        name: &str,
        bytes: Vec<u8>,
        fields: &[(&str, &str)],
    ) -> Response {
        let mut form = reqwest::blocking::multipart::Form::new().part(
            "file",
            reqwest::blocking::multipart::Part::bytes(bytes).file_name(name.to_string()),
        );
        for (key, value) in fields {
            form = form.text(key.to_string(), value.to_string());
        }
        let mut request = self
            .http
            .post(format!("{}api{path}", self.base))
            .multipart(form);
        request = match &self.auth {
            Auth::Session { cookie, csrf } => request
                .header("cookie", cookie)
                .header("x-csrf-token", csrf),
            Auth::Token(token) => request.bearer_auth(token),
        };
        request.send().unwrap()
    }

    /// The session's cookie (`name=value`).
    pub fn cookie(&self) -> &str {
        match &self.auth {
            Auth::Session { cookie, .. } => cookie,
            Auth::Token(_) => panic!("not a session"),
        }
    }

    /// The session's CSRF token.
    pub fn csrf(&self) -> &str {
        match &self.auth {
            Auth::Session { csrf, .. } => csrf,
            Auth::Token(_) => panic!("not a session"),
        }
    }

    pub fn get(&self, path: &str) -> Response {
        self.send(Method::GET, path, None)
    }

    pub fn post(&self, path: &str, body: &Value) -> Response {
        self.send(Method::POST, path, Some(body))
    }

    /// The same account through another server process (the cookie is the database's).
    pub fn on(&self, server: &Server) -> Account {
        Account {
            base: server.url.clone(),
            ..self.clone()
        }
    }
}

pub(crate) fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap()
}

/// The session of a sign-in or invitation answer.
pub(crate) fn session_of(base: &str, response: Response) -> Account {
    let cookie = response
        .headers()
        .get("set-cookie")
        .expect("a session cookie")
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let me = json_of(response, 200);
    Account {
        http: client(),
        base: base.to_string(),
        auth: Auth::Session {
            cookie: cookie.split(';').next().unwrap().to_string(),
            csrf: me["csrf"].as_str().unwrap().to_string(),
        },
    }
}

pub(crate) fn login(server: &Server, email: &str, password: &str) -> Response {
    server.post(
        "/auth/login",
        &json!({"email": email, "password": password}),
    )
}

pub(crate) fn sign_in(server: &Server, email: &str, password: &str) -> Account {
    session_of(&server.url, login(server, email, password))
}

/// `flipside users add` with the password on stdin; returns its stdout.
pub(crate) fn add_user(data: &Path, extra: &[&str], email: &str, team: &str, role: &str) -> String {
    let mut child = flipside()
        .args([
            "users", "add", "--email", email, "--team", team, "--role", role,
        ])
        .args(["--password-stdin", "--data-dir"])
        .arg(data)
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{ADMIN_PASSWORD}").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "users add failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

pub(crate) fn team_of(account: &Account) -> String {
    let me = json_of(account.get("/auth/me"), 200);
    me["teams"][0]["id"].as_str().unwrap().to_string()
}

/// The first admin of team `team`, made by `flipside users add` on the server's database
/// (`data`, `extra`: its options) and signed in; with the team's id.
pub(crate) fn first_admin(
    server: &Server,
    data: &Path,
    extra: &[&str],
    email: &str,
    team: &str,
) -> (Account, String) {
    add_user(data, extra, email, team, "admin");
    let admin = sign_in(server, email, ADMIN_PASSWORD);
    let team = team_of(&admin);
    (admin, team)
}

/// Reads `progress` events of job `id` of `team` until one has `until` true; returns the
/// events' jobs.
pub(crate) fn follow(
    account: &Account,
    team: &str,
    id: &str,
    until: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let response = account.get(&format!("/teams/{team}/jobs/{id}/events"));
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut jobs = Vec::new();
    for line in BufReader::new(response).lines() {
        let line = line.unwrap();
        if let Some(data) = line.strip_prefix("data:") {
            let job: Value = serde_json::from_str(data.trim()).unwrap();
            let stop = until(&job);
            jobs.push(job);
            if stop {
                break;
            }
        }
    }
    jobs
}

/// An API token of `email` with `scopes` (comma-separated), made by `flipside users token`.
pub(crate) fn api_token(data: &Path, extra: &[&str], email: &str, scopes: &str) -> String {
    let said = crate::common::success(
        flipside()
            .args(["users", "token", "--email", email, "--scopes", scopes])
            .arg("--data-dir")
            .arg(data)
            .args(extra),
    );
    let token = said.trim().to_string();
    assert!(token.starts_with("fst_"), "{said}");
    token
}

/// Uploads [`ITEMS`](crate::common::ITEMS) as the team's dataset `items.csv`; its id.
pub(crate) fn items_dataset(account: &Account, team: &str) -> String {
    let dataset = json_of(
        account.upload(
            &format!("/teams/{team}/datasets"),
            "items.csv",
            crate::common::ITEMS.into(),
            &[],
        ),
        201,
    );
    dataset["id"].as_str().unwrap().to_string()
}
