//! The page `/` shows while the browser app is still being built (`scripts/serve` starts the
//! server before Trunk has finished): what is happening, the first-run preparation's step, and a
//! reload every few seconds until the app is there.

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use flipside_shared::svg::escape;

/// Seconds between the page's reloads.
const RELOAD_SECONDS: u64 = 5;

/// 503 with the page; `preparation` is the first-run preparation's status, if it runs.
pub fn response(preparation: Option<String>) -> impl IntoResponse {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8".to_string()),
            (header::RETRY_AFTER, RELOAD_SECONDS.to_string()),
            (header::CACHE_CONTROL, "no-store".to_string()),
        ],
        page(preparation.as_deref()),
    )
}

fn page(preparation: Option<&str>) -> String {
    let preparation = match preparation {
        Some(status) => format!("<p>Meanwhile, the server: {}.</p>", escape(status)),
        None => "<p>The server's models are loaded.</p>".to_string(),
    };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{RELOAD_SECONDS}\">\
         <title>Flipside is starting</title></head>\
         <body style=\"font-family: sans-serif; max-width: 40em; margin: 3em auto\">\
         <h1>Flipside is starting</h1>\
         <p>The browser app is still being built (<code>scripts/serve</code> shows its progress); \
         this page reloads every {RELOAD_SECONDS} seconds until it is there.</p>{preparation}\
         </body></html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_the_preparation_escaped_and_reloads() {
        let html = page(Some("the classifier (step 3 of 4) (loss <0.7> 23/75)"));
        assert!(
            html.contains("http-equiv=\"refresh\" content=\"5\""),
            "{html}"
        );
        assert!(html.contains("(loss &lt;0.7&gt; 23/75)"), "{html}");
        assert!(!html.contains("<0.7>"));
        assert!(page(None).contains("models are loaded"));
    }
}
