//! Hash routing: `#/` is the edit demo, `#/generate` generation in the browser, `#/jobs` the
//! jobs page and `#/jobs/{id}` one job; `#/review` the team portal, `#/review/{team}/{queue}`
//! one review queue and `#/invite/{token}` an invitation.

use leptos::prelude::*;

/// A page of the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Demo,
    /// Generating counterfactuals in the browser (LASS's Dis-AE).
    Generate,
    /// The jobs page, with the job shown in detail.
    Jobs {
        selected: Option<String>,
    },
    /// The team portal, with a queue (team and queue ids) open.
    Portal {
        queue: Option<(String, String)>,
    },
    /// Accepting an invitation.
    Invite(String),
}

impl Route {
    /// The route of a location hash such as `#/jobs/abc`; anything unknown is the demo.
    pub fn from_hash(hash: &str) -> Route {
        let path = hash.trim_start_matches('#').trim_matches('/');
        let mut parts = path.split('/').filter(|p| !p.is_empty());
        match (parts.next(), parts.next()) {
            (Some("jobs"), selected) => Route::Jobs {
                selected: selected.map(str::to_string),
            },
            (Some("review"), team) => Route::Portal {
                queue: team
                    .zip(parts.next())
                    .map(|(t, q)| (t.to_string(), q.to_string())),
            },
            (Some("invite"), Some(token)) => Route::Invite(token.to_string()),
            (Some("generate"), _) => Route::Generate,
            _ => Route::Demo,
        }
    }

    /// The link to this route.
    pub fn href(&self) -> String {
        match self {
            Route::Demo => "#/".into(),
            Route::Generate => "#/generate".into(),
            Route::Jobs { selected: None } => "#/jobs".into(),
            Route::Jobs { selected: Some(id) } => format!("#/jobs/{id}"),
            Route::Portal { queue: None } => "#/review".into(),
            Route::Portal {
                queue: Some((team, queue)),
            } => format!("#/review/{team}/{queue}"),
            Route::Invite(token) => format!("#/invite/{token}"),
        }
    }
}

/// The current route, following the location hash.
pub fn use_route() -> ReadSignal<Route> {
    let (route, set_route) = signal(Route::from_hash(&current_hash()));
    let listener = window_event_listener(leptos::ev::hashchange, move |_| {
        set_route.set(Route::from_hash(&current_hash()));
    });
    on_cleanup(move || listener.remove());
    route
}

/// Goes to `route` (adds a history entry, like following a link).
pub fn navigate(route: &Route) {
    let _ = window().location().set_hash(&route.href());
}

fn current_hash() -> String {
    window().location().hash().unwrap_or_default()
}
