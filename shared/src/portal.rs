//! The team portal's API bodies: accounts, teams and roles, API tokens, review queues, leases
//! and verdicts, exports and the dashboard. Shared by `flipside serve` and the browser app.

use serde::{Deserialize, Serialize};

use crate::records::{Excerpt, Provenance};

/// A member's role in a team. Each role can do what the ones after it can.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads queues, items and the dashboard.
    Viewer,
    /// Decides items (first pass) and writes counterfactuals.
    Annotator,
    /// Also confirms or overturns decisions (second pass), overrides the classifier, exports,
    /// uploads datasets and runs generation jobs.
    Reviewer,
    /// Also invites members and makes queues.
    Admin,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Viewer, Role::Annotator, Role::Reviewer, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Annotator => "annotator",
            Role::Reviewer => "reviewer",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// What an API token may do; a token never does more than its user's role allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Reading: queues, items, the dashboard.
    Read,
    /// Deciding and writing items.
    Review,
    /// Downloading exports.
    Export,
    /// Members, invites and queues.
    Manage,
    /// Uploading datasets, starting and cancelling generation jobs, and the embedded LLM's
    /// OpenAI-compatible endpoints.
    Generate,
}

impl Scope {
    pub const ALL: [Scope; 5] = [
        Scope::Read,
        Scope::Review,
        Scope::Export,
        Scope::Manage,
        Scope::Generate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Review => "review",
            Scope::Export => "export",
            Scope::Manage => "manage",
            Scope::Generate => "generate",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// `POST /api/auth/login`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LoginRequest {
    pub email: String,
    pub password: String,
}

/// A user, as others see them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserInfo {
    pub id: String,
    pub email: String,
    pub name: String,
}

/// A team the caller belongs to, and their role in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TeamMembership {
    pub id: String,
    pub name: String,
    pub role: Role,
}

/// `GET /api/auth/me` (and the answer to a login): who is signed in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Me {
    pub user: UserInfo,
    pub teams: Vec<TeamMembership>,
    /// Sent back as the `X-CSRF-Token` header with every state-changing request made with the
    /// session cookie. Absent for API tokens, which need none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csrf: Option<String>,
}

/// A member of a team.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Member {
    pub user: UserInfo,
    pub role: Role,
}

/// `POST /api/teams/{team}/invites`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InviteRequest {
    pub email: String,
    pub role: Role,
}

/// A new invitation. The token is shown once: only its hash is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Invite {
    pub token: String,
    /// The page that accepts it, relative to the server: `/#/invite/TOKEN`.
    pub path: String,
    pub email: String,
    pub role: Role,
    pub expires_at: String,
}

/// `POST /api/invites/accept`: joins the team. Signed in, the token alone; signed out, the new
/// account's name and password (an existing account signs in first).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AcceptInvite {
    pub token: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub password: String,
}

/// `POST /api/tokens`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenRequest {
    pub name: String,
    pub scopes: Vec<Scope>,
}

/// An API token. `token` is only present in the answer that created it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiToken {
    pub id: String,
    pub name: String,
    pub scopes: Vec<Scope>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
}

/// `POST /api/teams/{team}/queues`: a review queue of a job's counterfactuals, or an empty one
/// to fill by upload or by writing.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueRequest {
    pub name: String,
    /// How many different people decide each item.
    #[serde(default = "one")]
    pub overlap: usize,
    /// The job whose counterfactuals to review.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// How long a person holds an item before it goes back to the queue.
    #[serde(default = "ten_minutes")]
    pub lease_seconds: u64,
}

fn one() -> usize {
    1
}

fn ten_minutes() -> u64 {
    600
}

/// A review queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Queue {
    pub id: String,
    pub team: String,
    pub name: String,
    pub overlap: usize,
    pub lease_seconds: u64,
    pub items: usize,
    pub created_at: String,
}

/// A verdict: one key each in the browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The edit is a valid counterfactual with the target label.
    Accept,
    /// It is not.
    Reject,
    /// Valid after the fix given in `text` (fix-and-accept).
    Fix,
    /// A good text, but its label is `label`, not the target.
    Relabel,
    /// Needs someone else to look (unclear, offensive, broken).
    Flag,
    /// Not for me: the item goes to someone else.
    Skip,
}

impl Verdict {
    pub const ALL: [Verdict; 6] = [
        Verdict::Accept,
        Verdict::Reject,
        Verdict::Fix,
        Verdict::Relabel,
        Verdict::Flag,
        Verdict::Skip,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accept => "accept",
            Verdict::Reject => "reject",
            Verdict::Fix => "fix",
            Verdict::Relabel => "relabel",
            Verdict::Flag => "flag",
            Verdict::Skip => "skip",
        }
    }

    pub fn parse(s: &str) -> Option<Verdict> {
        Verdict::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The category compared for agreement: a fix accepts the item's meaning.
    pub fn agreement_class(self) -> Verdict {
        match self {
            Verdict::Fix => Verdict::Accept,
            other => other,
        }
    }

    /// Whether the item goes into training data with this verdict.
    pub fn keeps(self) -> bool {
        matches!(self, Verdict::Accept | Verdict::Fix | Verdict::Relabel)
    }
}

/// One item of a queue: an original and its counterfactual (none yet for an original to write
/// one for).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReviewItem {
    pub id: String,
    /// Its position in the queue.
    pub seq: usize,
    /// Increases with every decision: a save made from an older version is refused (409).
    pub version: i64,
    pub original: String,
    /// The original's label.
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counterfactual: Option<String>,
    /// The label the counterfactual should have.
    pub target: String,
    /// `core`, `autocad`, `lass`, `human`, `upload`…
    pub method: String,
    /// The classifier's probability of the target label for the counterfactual, when scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_probability: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flipped: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// The other counterfactuals of the same original in this queue.
    #[serde(default)]
    pub siblings: Vec<Sibling>,
    /// The decision so far, once every needed person has decided (or a reviewer has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

/// Another counterfactual of the same original.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Sibling {
    pub id: String,
    pub counterfactual: Option<String>,
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Verdict>,
}

/// An item's decision: the majority of its first-pass verdicts, or a reviewer's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Outcome {
    pub verdict: Verdict,
    /// The counterfactual as decided (the fix, when fixed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Its label as decided (the target, or the relabel).
    pub label: String,
    /// Whether a reviewer confirmed or overturned it in the second pass.
    pub reviewed: bool,
}

/// An item handed to one person until `expires_at`; nobody else gets it meanwhile (unless the
/// queue asks for overlap, and then only as many people as that).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Lease {
    pub id: String,
    pub expires_at: String,
    pub item: ReviewItem,
    /// The text this person was writing when they left it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<String>,
    /// This person's verdict, when the lease came back through undo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Verdict>,
}

/// What someone decided about an item: the first pass's verdicts and the second pass's reviews
/// both carry it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Decision {
    pub verdict: Verdict,
    /// The fixed counterfactual (fix), or a written one (for an original without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The counterfactual's real label (relabel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Accept although the classifier says the edit does not flip (reviewers and admins).
    #[serde(default)]
    pub override_classifier: bool,
}

/// `POST /api/teams/{team}/queues/{queue}/verdicts`: decides a leased item.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VerdictRequest {
    pub lease: String,
    /// Made by the client once per decision: a retried request records one verdict.
    pub request_id: String,
    #[serde(flatten)]
    pub decision: Decision,
    /// The retrieved excerpts a written counterfactual drew on (its provenance).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excerpts: Vec<Excerpt>,
}

/// `GET …/review/next`: a decided item and the first-pass verdicts behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReviewTask {
    pub item: ReviewItem,
    pub verdicts: Vec<PastVerdict>,
}

/// A verdict someone gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PastVerdict {
    pub user: String,
    pub verdict: Verdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub override_classifier: bool,
}

/// `POST /api/teams/{team}/queues/{queue}/items/{item}/review`: the second pass. The same
/// verdict confirms the outcome; another overturns it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReviewRequest {
    /// The item's version the reviewer saw.
    pub version: i64,
    #[serde(flatten)]
    pub decision: Decision,
}

/// `PUT …/leases/{lease}/draft`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Draft {
    pub text: String,
}

/// `POST /api/teams/{team}/queues/{queue}/items`: originals to write counterfactuals for, or
/// counterfactuals made elsewhere, added to a queue.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewItem {
    pub original: String,
    pub label: String,
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counterfactual: Option<String>,
}

/// One person's work in a queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PersonStats {
    pub name: String,
    pub verdicts: usize,
    /// Verdicts per hour between their first and last verdict (none for fewer than two).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_hour: Option<f64>,
    /// Share of their non-skip verdicts that keep the item.
    pub acceptance: f64,
}

/// `GET …/queues/{queue}/stats`: the dashboard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueStats {
    pub items: usize,
    /// Items with an outcome.
    pub decided: usize,
    /// Items whose outcome a reviewer confirmed or overturned.
    pub reviewed: usize,
    /// Items leased right now.
    pub leased: usize,
    /// Decided items that go into training data.
    pub kept: usize,
    /// `kept / decided`.
    pub acceptance_rate: f64,
    /// Share of the items whose counterfactual the classifier says flips.
    pub flip_share: f64,
    /// Verdict counts by kind (first pass).
    pub verdicts: Vec<(Verdict, usize)>,
    pub people: Vec<PersonStats>,
    /// On the items two annotators both decided, when the queue has exactly two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohen_kappa: Option<f64>,
    /// On every item decided by two or more people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub krippendorff_alpha: Option<f64>,
    /// Classifier overrides recorded.
    pub overrides: usize,
}

/// One line of an item's audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryEntry {
    pub at: String,
    pub user: String,
    pub action: String,
    pub detail: serde_json::Value,
}
