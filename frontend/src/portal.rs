//! The team portal's pages: sign-in, accepting an invitation, and a team's home (its review
//! queues with their progress and exports; for admins, a new queue from a job and invitations).
//! Reviewing itself is in [`crate::review`].

use flipside_shared::api::Job;
use flipside_shared::portal::{
    AcceptInvite, Invite, InviteRequest, LoginRequest, Me, Queue, QueueRequest, Role,
    TeamMembership,
};
use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::api;
use crate::review::ReviewQueue;
use crate::route::{Route, navigate};
use crate::ui::{ErrorMessage, Spinner, format_time};

/// Who is signed in: loaded once, set by sign-in and invitations.
#[derive(Debug, Clone, Copy)]
pub struct Session {
    pub me: RwSignal<Option<Me>>,
    pub loaded: RwSignal<bool>,
}

/// Makes the session available to the pages below and asks the server who is signed in.
pub fn provide() {
    let session = Session {
        me: RwSignal::new(None),
        loaded: RwSignal::new(false),
    };
    provide_context(session);
    spawn_local(async move {
        if let Ok(me) = api::me().await {
            session.me.set(me);
        }
        session.loaded.set(true);
    });
}

fn use_session() -> Session {
    expect_context::<Session>()
}

/// The team whose datasets and jobs a page shows, for the components below it.
#[derive(Debug, Clone, Copy)]
pub struct CurrentTeam(StoredValue<String>);

impl CurrentTeam {
    /// Makes `team` the current team of the components made after this call.
    pub fn provide(team: String) {
        provide_context(CurrentTeam(StoredValue::new(team)));
    }

    pub fn id(self) -> String {
        self.0.get_value()
    }
}

pub fn use_team() -> CurrentTeam {
    expect_context::<CurrentTeam>()
}

/// `page` for the signed-in user's team (their first); otherwise the sign-in form titled
/// `title`, or a note that they are in no team yet.
pub fn team_page(
    title: &'static str,
    page: impl Fn(TeamMembership) -> AnyView + Send + Sync + 'static,
) -> impl IntoView {
    let session = use_session();
    move || {
        if !session.loaded.get() {
            return view! { <p><Spinner />" Loading…"</p> }.into_any();
        }
        let Some(me) = session.me.get() else {
            return view! { <SignIn title /> }.into_any();
        };
        match me.teams.first() {
            Some(team) => page(team.clone()),
            None => view! {
                <section class="card narrow">
                    <p>"You are not in any team yet: ask an admin for an invitation."</p>
                </section>
            }
            .into_any(),
        }
    }
}

/// `page`, unless the server is private and nobody is signed in: then the sign-in form.
pub fn unless_private(
    private: bool,
    page: impl Fn() -> AnyView + Send + Sync + 'static,
) -> impl IntoView {
    let session = use_session();
    move || {
        if private && session.me.get().is_none() {
            if !session.loaded.get() {
                return view! { <p><Spinner />" Loading…"</p> }.into_any();
            }
            return view! { <SignIn title="This server's demo is for signed-in members" /> }
                .into_any();
        }
        page()
    }
}

/// The review tab: sign-in, the team's home, or one queue (`queue` = team and queue ids).
#[component]
pub fn PortalPage(#[prop(into)] queue: Signal<Option<(String, String)>>) -> impl IntoView {
    let session = use_session();
    move || {
        if !session.loaded.get() {
            return view! { <p><Spinner />" Loading…"</p> }.into_any();
        }
        let Some(me) = session.me.get() else {
            return view! { <SignIn title="Sign in to review" /> }.into_any();
        };
        match queue.get() {
            Some((team, queue)) => {
                let role = me
                    .teams
                    .iter()
                    .find(|t| t.id == team)
                    .map_or(Role::Viewer, |t| t.role);
                view! { <ReviewQueue team queue role /> }.into_any()
            }
            None => view! { <TeamHome me /> }.into_any(),
        }
    }
}

#[component]
fn SignIn(title: &'static str) -> impl IntoView {
    let session = use_session();
    let email = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let request = LoginRequest {
            email: email.get_untracked(),
            password: password.get_untracked(),
        };
        spawn_local(async move {
            match api::login(&request).await {
                Ok(me) => {
                    error.set(None);
                    session.me.set(Some(me));
                }
                Err(message) => error.set(Some(message)),
            }
        });
    };
    view! {
        <section class="card narrow">
            <h2>{title}</h2>
            <p class="muted small">
                "Accounts belong to teams, which own their datasets, generation jobs and review \
                 queues. Accounts come by invitation; the first admin is made with "
                <code>"flipside users add"</code> "."
            </p>
            <form on:submit=submit class="stack">
                <label class="field">
                    "Email"
                    <input type="email" data-testid="login-email" autocomplete="username"
                        on:input=move |ev| email.set(event_target_value(&ev)) />
                </label>
                <label class="field">
                    "Password"
                    <input type="password" data-testid="login-password"
                        autocomplete="current-password"
                        on:input=move |ev| password.set(event_target_value(&ev)) />
                </label>
                <button type="submit" class="primary" data-testid="login-submit">"Sign in"</button>
            </form>
            {move || error.get().map(|m| view! { <ErrorMessage message=m testid="login-error" /> })}
        </section>
    }
}

/// `#/invite/{token}`: join the team. Someone signed in joins as themselves with one click; someone
/// signed out either signs in first (an invitation never takes an existing account's password)
/// or, new to Flipside, chooses a name and password.
#[component]
pub fn AcceptInvitation(token: String) -> impl IntoView {
    let session = use_session();
    let name = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let pending = RwSignal::new(false);
    let token = StoredValue::new(token);
    let accept = move |name: String, password: String| {
        let request = AcceptInvite {
            token: token.get_value(),
            name,
            password,
        };
        pending.set(true);
        spawn_local(async move {
            let accepted = api::accept_invite(&request).await;
            pending.set(false);
            match accepted {
                Ok(me) => {
                    session.me.set(Some(me));
                    session.loaded.set(true);
                    navigate(&Route::Portal { queue: None });
                }
                Err(message) => error.set(Some(message)),
            }
        });
    };
    let create_account = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        accept(name.get_untracked(), password.get_untracked());
    };
    let sign_out = move |_| {
        spawn_local(async move {
            let _ = api::logout().await;
            error.set(None);
            session.me.set(None);
        });
    };
    let form = move || {
        if !session.loaded.get() {
            return view! { <p><Spinner />" Loading…"</p> }.into_any();
        }
        if let Some(me) = session.me.get() {
            return view! {
                <p>"You are signed in as " <strong>{me.user.email}</strong> "."</p>
                <div class="row">
                    <button class="primary" data-testid="invite-join" disabled=move || pending.get()
                        on:click=move |_| accept(String::new(), String::new())>"Join the team"</button>
                    <button data-testid="invite-sign-out" on:click=sign_out>"Not you? Sign out"</button>
                </div>
            }
            .into_any();
        }
        view! {
            <p class="muted small">"New to Flipside? Choose a name and a password."</p>
            <form on:submit=create_account class="stack">
                <label class="field">
                    "Your name"
                    <input type="text" data-testid="invite-name"
                        on:input=move |ev| name.set(event_target_value(&ev)) />
                </label>
                <label class="field">
                    "Password (10 characters or more)"
                    <input type="password" data-testid="invite-password" autocomplete="new-password"
                        on:input=move |ev| password.set(event_target_value(&ev)) />
                </label>
                <button type="submit" class="primary" data-testid="invite-submit"
                    disabled=move || pending.get()>"Join"</button>
            </form>
        }
        .into_any()
    };
    view! {
        <section class="card narrow">
            <h2>"Join your team"</h2>
            <p class="muted small">"You were invited to review counterfactuals on Flipside."</p>
            {form}
            {move || error.get().map(|m| view! { <ErrorMessage message=m testid="invite-error" /> })}
        </section>
        {move || (session.loaded.get() && session.me.get().is_none()).then(|| view! {
            <SignIn title="Have an account already? Sign in, then join" />
        })}
    }
}

/// A team's queues; admins also make queues and invite people.
#[component]
fn TeamHome(me: Me) -> impl IntoView {
    let session = use_session();
    let Some(team) = me.teams.first().cloned() else {
        return view! {
            <section class="card narrow">
                <p>"You are not in any team yet: ask an admin for an invitation."</p>
            </section>
        }
        .into_any();
    };
    let queues = RwSignal::new(Vec::<Queue>::new());
    let error = RwSignal::new(None::<String>);
    let team_id = StoredValue::new(team.id.clone());
    let reload = move || {
        spawn_local(async move {
            match api::queues(&team_id.get_value()).await {
                Ok(list) => queues.set(list),
                Err(message) => error.set(Some(message)),
            }
        });
    };
    reload();
    let sign_out = move |_| {
        spawn_local(async move {
            let _ = api::logout().await;
            session.me.set(None);
        });
    };
    let admin = team.role == Role::Admin;
    let can_export = team.role >= Role::Reviewer;
    view! {
        <section class="card">
            <div class="card-head">
                <h2 data-testid="team-name">{format!("Team {}", team.name)}</h2>
                <span class="small muted">
                    {format!("{} · {}", me.user.name, team.role.as_str())} " · "
                    <a href="#/review" on:click=sign_out data-testid="sign-out">"Sign out"</a>
                </span>
            </div>
            {move || error.get().map(|m| view! { <ErrorMessage message=m /> })}
            <table class="queues" data-testid="queue-list">
                <thead><tr><th>"Queue"</th><th>"Items"</th><th>"People per item"</th><th>"Made"</th><th></th>{admin.then(|| view! { <th>"Add items (JSONL, CSV)"</th> })}</tr></thead>
                <tbody>
                    {move || queues.get().into_iter().map(|q| {
                        let href = Route::Portal { queue: Some((q.team.clone(), q.id.clone())) }.href();
                        let export = api::export_url(&q.team, &q.id, "classifier");
                        view! {
                            <tr data-testid="queue-row" data-queue-id=q.id.clone()>
                                <td><a href=href data-testid="open-queue">{q.name.clone()}</a></td>
                                <td>{q.items}</td>
                                <td>{q.overlap}</td>
                                <td class="small muted">{format_time(&q.created_at)}</td>
                                <td>{can_export.then(|| {
                                    let parquet = format!("{export}&as=parquet");
                                    view! {
                                        <a href=export data-testid="export-classifier">"Export for classifier train"</a>
                                        " · "
                                        <a href=parquet data-testid="export-classifier-parquet"
                                            title="The same rows as a Parquet file (Hugging Face datasets, pandas)">"Parquet"</a>
                                    }
                                })}</td>
                                {admin.then(|| {
                                    let (team, queue) = (q.team.clone(), q.id.clone());
                                    view! {
                                        <td>
                                            <input type="file" accept=".jsonl,.ndjson,.csv"
                                                data-testid="queue-upload"
                                                on:change=move |ev| upload(&team, &queue, &ev, reload, error) />
                                        </td>
                                    }
                                })}
                            </tr>
                        }
                    }).collect::<Vec<_>>()}
                </tbody>
            </table>
        </section>
        {admin.then(|| view! {
            <NewQueue team=team.clone() on_made=Callback::new(move |_| reload()) />
            <InvitePeople team=team.clone() />
        })}
    }
    .into_any()
}

/// Sends the file chosen in `ev`'s input to the queue, then reloads the list.
fn upload(
    team: &str,
    queue: &str,
    ev: &leptos::ev::Event,
    reload: impl Fn() + 'static,
    error: RwSignal<Option<String>>,
) {
    let input: web_sys::HtmlInputElement = event_target(ev);
    let Some(file) = input.files().and_then(|files| files.get(0)) else {
        return;
    };
    let Ok(form) = web_sys::FormData::new() else {
        return;
    };
    if form
        .append_with_blob_and_filename("file", &file, &file.name())
        .is_err()
    {
        return;
    }
    let (team, queue) = (team.to_string(), queue.to_string());
    spawn_local(async move {
        match api::upload_items(&team, &queue, form).await {
            Ok(_) => {
                error.set(None);
                reload();
            }
            Err(message) => error.set(Some(message)),
        }
        input.set_value("");
    });
}

/// A queue of a finished job's counterfactuals.
#[component]
fn NewQueue(team: TeamMembership, on_made: Callback<()>) -> impl IntoView {
    let jobs = RwSignal::new(Vec::<Job>::new());
    let team = StoredValue::new(team.id);
    spawn_local(async move {
        if let Ok(list) = api::jobs(&team.get_value()).await {
            jobs.set(list.into_iter().filter(|j| j.written > 0).collect());
        }
    });
    let job = RwSignal::new(String::new());
    let name = RwSignal::new(String::new());
    let overlap = RwSignal::new(1usize);
    let error = RwSignal::new(None::<String>);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let chosen = job.get_untracked();
        let request = QueueRequest {
            name: match name.get_untracked().trim() {
                "" => format!("Review of {chosen}"),
                n => n.to_string(),
            },
            overlap: overlap.get_untracked(),
            job: (!chosen.is_empty()).then_some(chosen),
            lease_seconds: 600,
        };
        spawn_local(async move {
            match api::create_queue(&team.get_value(), &request).await {
                Ok(_) => {
                    error.set(None);
                    on_made.run(());
                }
                Err(message) => error.set(Some(message)),
            }
        });
    };
    view! {
        <section class="card">
            <h2>"New review queue"</h2>
            <form on:submit=submit class="row-form">
                <label class="field compact">
                    "Counterfactuals of the job"
                    <select data-testid="queue-job" on:change=move |ev| job.set(event_target_value(&ev))>
                        <option value="">"(none: add items later)"</option>
                        {move || jobs.get().into_iter().map(|j| view! {
                            <option value=j.id.clone()>
                                {format!("{} — {} made, {} flipped", j.id, j.written, j.flipped)}
                            </option>
                        }).collect::<Vec<_>>()}
                    </select>
                </label>
                <label class="field compact">
                    "Name"
                    <input type="text" data-testid="queue-name"
                        on:input=move |ev| name.set(event_target_value(&ev)) />
                </label>
                <label class="field compact">
                    "People per item"
                    <input type="number" min="1" max="10" value="1" data-testid="queue-overlap"
                        on:input=move |ev| overlap.set(event_target_value(&ev).parse().unwrap_or(1)) />
                </label>
                <button type="submit" class="primary" data-testid="queue-create">"Make the queue"</button>
            </form>
            {move || error.get().map(|m| view! { <ErrorMessage message=m /> })}
        </section>
    }
}

/// Invitations: the link to send is shown once.
#[component]
fn InvitePeople(team: TeamMembership) -> impl IntoView {
    let email = RwSignal::new(String::new());
    let role = RwSignal::new(Role::Annotator);
    let made = RwSignal::new(None::<Invite>);
    let error = RwSignal::new(None::<String>);
    let team = StoredValue::new(team.id);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let request = InviteRequest {
            email: email.get_untracked(),
            role: role.get_untracked(),
        };
        spawn_local(async move {
            match api::invite(&team.get_value(), &request).await {
                Ok(invite) => {
                    error.set(None);
                    made.set(Some(invite));
                }
                Err(message) => error.set(Some(message)),
            }
        });
    };
    let origin = window().location().origin().unwrap_or_default();
    view! {
        <section class="card">
            <h2>"Invite a teammate"</h2>
            <form on:submit=submit class="row-form">
                <label class="field compact">
                    "Email"
                    <input type="email" data-testid="invite-email"
                        on:input=move |ev| email.set(event_target_value(&ev)) />
                </label>
                <label class="field compact">
                    "Role"
                    <select data-testid="invite-role" on:change=move |ev| {
                        if let Some(r) = Role::parse(&event_target_value(&ev)) {
                            role.set(r);
                        }
                    }>
                        {Role::ALL.into_iter().map(|r| view! {
                            <option value=r.as_str() selected=r == Role::Annotator>{r.as_str()}</option>
                        }).collect::<Vec<_>>()}
                    </select>
                </label>
                <button type="submit" class="primary" data-testid="invite-create">"Invite"</button>
            </form>
            {move || error.get().map(|m| view! { <ErrorMessage message=m /> })}
            {move || made.get().map(|invite| view! {
                <p class="small">
                    {format!("Send this link to {} (valid until {}; shown once): ",
                        invite.email, format_time(&invite.expires_at))}
                    <code data-testid="invite-link">{format!("{origin}{}", invite.path)}</code>
                </p>
            })}
        </section>
    }
}
