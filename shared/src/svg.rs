//! Helpers for the SVG figures Flipside draws (z-statistics, experiment results).

/// `text` escaped for SVG/XML (and HTML) text content and attribute values.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
