//! `flipside users …`: accounts on the server's database, for the first admin and for
//! operators (list, reset a password, make an API token). Everyone else joins by invitation.

use std::io::BufRead;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use flipside_shared::portal::{Role, Scope};

use super::serve::DatabaseArgs;
use crate::home::Home;
use crate::server::db::Db;
use crate::server::portal::{accounts, auth, new_secret};

#[derive(Debug, Subcommand)]
pub enum UsersCommand {
    /// Make a user and give them a role in a team (made if missing): the first admin, e.g.
    /// `flipside users add --email ada@lab.org --team lab --role admin`
    Add(AddArgs),
    /// List the users and their teams
    List(DatabaseOnly),
    /// Set a user's password
    Password(PasswordArgs),
    /// Make an API token for a user (shown once), for scripts and `flipside portal export`
    Token(TokenArgs),
}

#[derive(Debug, Args)]
pub struct DatabaseOnly {
    #[command(flatten)]
    pub database: DatabaseArgs,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    #[arg(long)]
    pub email: String,
    /// Display name [default: the email's user part]
    #[arg(long, default_value = "")]
    pub name: String,
    /// The team to join
    #[arg(long, default_value = "default")]
    pub team: String,
    #[arg(long, value_parser = parse_role, default_value = "admin")]
    pub role: Role,
    /// Read the password from the first line of stdin [default: make one and print it once]
    #[arg(long)]
    pub password_stdin: bool,
    #[command(flatten)]
    pub database: DatabaseArgs,
}

#[derive(Debug, Args)]
pub struct PasswordArgs {
    #[arg(long)]
    pub email: String,
    /// Read the password from the first line of stdin [default: make one and print it once]
    #[arg(long)]
    pub password_stdin: bool,
    #[command(flatten)]
    pub database: DatabaseArgs,
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[arg(long)]
    pub email: String,
    /// What the token is for
    #[arg(long, default_value = "cli")]
    pub name: String,
    /// What it may do: read, review, export, manage, generate
    #[arg(long, value_delimiter = ',', value_parser = parse_scope, default_value = "read,export")]
    pub scopes: Vec<Scope>,
    #[command(flatten)]
    pub database: DatabaseArgs,
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).ok_or_else(|| "one of viewer, annotator, reviewer, admin".into())
}

fn parse_scope(s: &str) -> Result<Scope, String> {
    Scope::parse(s).ok_or_else(|| "one of read, review, export, manage, generate".into())
}

/// The password from stdin, or a new random one that is printed.
fn password(from_stdin: bool) -> Result<(String, bool)> {
    if from_stdin {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .context("reading the password from stdin")?;
        return Ok((line.trim_end_matches(['\r', '\n']).to_string(), false));
    }
    Ok((new_secret()[..24].to_string(), true))
}

pub fn run(home: &Home, command: UsersCommand) -> Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        match command {
            UsersCommand::Add(args) => {
                let db = Db::connect(&args.database.url(home)).await?;
                let (password, made) = password(args.password_stdin)?;
                let user = accounts::create_user(&db, &args.email, &args.name, &password).await?;
                let team = accounts::ensure_team(&db, &args.team).await?;
                accounts::set_membership(&db, &team, &user.id, args.role).await?;
                println!(
                    "{} ({}) is {} of team {:?}",
                    user.email,
                    user.name,
                    args.role.as_str(),
                    args.team
                );
                let (datasets, jobs) = db.adopt_ownerless(&team).await?;
                if datasets + jobs > 0 {
                    println!(
                        "team {:?} now owns what was made before accounts existed: {datasets} \
                         uploaded dataset(s), {jobs} job(s)",
                        args.team
                    );
                }
                if made {
                    println!("password (shown once): {password}");
                }
            }
            UsersCommand::List(args) => {
                let db = Db::connect(&args.database.url(home)).await?;
                for user in accounts::users(&db).await? {
                    let teams: Vec<String> = accounts::memberships(&db, &user.id)
                        .await?
                        .into_iter()
                        .map(|t| format!("{} ({})", t.name, t.role.as_str()))
                        .collect();
                    println!("{}\t{}\t{}", user.email, user.name, teams.join(", "));
                }
            }
            UsersCommand::Password(args) => {
                let db = Db::connect(&args.database.url(home)).await?;
                let user = accounts::user_by_email(&db, &args.email)
                    .await?
                    .with_context(|| format!("no user {}", args.email))?;
                let (password, made) = password(args.password_stdin)?;
                let ended = accounts::set_password(&db, &user.info.id, &password).await?;
                println!(
                    "password of {} changed; {} session(s) ended, {} token(s) revoked",
                    user.info.email, ended.sessions, ended.tokens
                );
                if made {
                    println!("password (shown once): {password}");
                }
            }
            UsersCommand::Token(args) => {
                let db = Db::connect(&args.database.url(home)).await?;
                let Some(user) = accounts::user_by_email(&db, &args.email).await? else {
                    bail!("no user {}", args.email);
                };
                let token =
                    auth::create_token(&db, &user.info.id, &args.name, &args.scopes).await?;
                println!("{}", token.token.unwrap_or_default());
            }
        }
        Ok(())
    })
}
