//! The experiment's figure: accuracy per test set (groups) and condition (bars), mean over
//! seeds with ± one standard deviation error bars, as a self-contained SVG.

use std::fmt::Write as _;

use flipside_shared::svg::escape;

use super::report::ExperimentResult;

/// Okabe & Ito's colour-blind-safe palette.
const COLOURS: [&str; 8] = [
    "#999999", "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
];

/// The SVG document.
pub fn accuracy_svg(result: &ExperimentResult) -> String {
    let conditions = result.conditions.len().max(1);
    let groups = result.tests.len().max(1);
    let (bar, gap, left, right, top) = (26.0, 34.0, 64.0, 24.0, 56.0);
    let group_width = bar * conditions as f64;
    // Each test set's name under its bars, wrapped to the group's width (about 6.6 px a
    // character at 12 px).
    let label_chars = (((group_width + gap - 4.0) / 6.6) as usize).max(8);
    let labels: Vec<Vec<String>> = result
        .tests
        .iter()
        .map(|test| wrap(&test.name, label_chars))
        .collect();
    let label_lines = labels.iter().map(Vec::len).max().unwrap_or(1);
    let bottom = 56.0 + 14.0 * label_lines as f64;
    let plot_width = groups as f64 * group_width + (groups + 1) as f64 * gap;
    let legend_height = 18.0 * conditions as f64;
    // Wide enough for the title lines, whatever the number of bars.
    let width = (left + plot_width + right).max(560.0);
    let height = top + 300.0 + bottom + legend_height;
    let plot_bottom = top + 300.0;

    // The y range: 5-point steps around every mean ± sd, in percent.
    let values = result.tests.iter().flat_map(|t| &t.rows).flat_map(|r| {
        [
            r.accuracy.mean - r.accuracy.sd,
            r.accuracy.mean + r.accuracy.sd,
        ]
    });
    let (low, high) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| {
        (lo.min(100.0 * v), hi.max(100.0 * v))
    });
    let (low, high) = if low > high {
        (0.0, 100.0)
    } else {
        (
            ((low - 2.0) / 5.0).floor().max(0.0) * 5.0,
            ((high + 2.0) / 5.0).ceil().min(20.0) * 5.0,
        )
    };
    let y = |percent: f64| {
        plot_bottom - 300.0 * (percent.clamp(low, high) - low) / (high - low).max(1e-9)
    };

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{:.1}" y="24" font-size="15" text-anchor="middle">{}</text>"#,
        width / 2.0,
        escape(&result.name)
    );
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="42" text-anchor="middle" fill="#555">{} · mean ± sd over {} seeds</text>"##,
        width / 2.0,
        escape(&model_name(result)),
        result.seeds.len()
    );
    // Grid and y axis.
    let step = if high - low > 30.0 { 10.0 } else { 5.0 };
    let mut tick = low;
    while tick <= high + 1e-9 {
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{tick:.0}</text>"##,
            left + plot_width,
            left - 6.0,
            y(tick) + 4.0,
            y = y(tick)
        );
        tick += step;
    }
    let _ = writeln!(
        svg,
        r#"<path d="M{left},{top} V{plot_bottom} H{:.1}" stroke="black" fill="none"/>"#,
        left + plot_width
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(18,{:.1}) rotate(-90)" text-anchor="middle">accuracy (%)</text>"#,
        top + 150.0
    );
    // Bars with error bars, grouped by test set.
    for (g, test) in result.tests.iter().enumerate() {
        let x0 = left + gap + g as f64 * (group_width + gap);
        for (c, row) in test.rows.iter().enumerate() {
            let x = x0 + c as f64 * bar;
            let (mean, sd) = (100.0 * row.accuracy.mean, 100.0 * row.accuracy.sd);
            let colour = COLOURS[c % COLOURS.len()];
            let _ = writeln!(
                svg,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{colour}"><title>{}: {mean:.2} ± {sd:.2}</title></rect>"#,
                x + 2.0,
                y(mean),
                bar - 4.0,
                (plot_bottom - y(mean)).max(0.0),
                escape(&row.condition)
            );
            let centre = x + bar / 2.0;
            let _ = writeln!(
                svg,
                r#"<path d="M{centre:.1},{:.1} V{:.1} M{:.1},{:.1} H{:.1} M{:.1},{:.1} H{:.1}" stroke="black"/>"#,
                y(mean + sd),
                y(mean - sd),
                centre - 5.0,
                y(mean + sd),
                centre + 5.0,
                centre - 5.0,
                y(mean - sd),
                centre + 5.0
            );
        }
        let centre = x0 + group_width / 2.0;
        let lines: String = labels[g]
            .iter()
            .enumerate()
            .map(|(i, line)| {
                let dy = if i == 0 { 0.0 } else { 14.0 };
                format!(
                    r#"<tspan x="{centre:.1}" dy="{dy}">{}</tspan>"#,
                    escape(line)
                )
            })
            .collect();
        let _ = writeln!(
            svg,
            r##"<text x="{centre:.1}" y="{:.1}" text-anchor="middle">{lines}</text><text x="{centre:.1}" y="{:.1}" text-anchor="middle" fill="#555" font-size="10">n = {}</text>"##,
            plot_bottom + 18.0,
            plot_bottom + 18.0 + 14.0 * labels[g].len() as f64,
            test.examples
        );
    }
    // Legend.
    for (c, condition) in result.conditions.iter().enumerate() {
        let y = plot_bottom + bottom - 20.0 + 18.0 * c as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{left}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{} ({} training examples)</text>"#,
            y,
            COLOURS[c % COLOURS.len()],
            left + 18.0,
            y + 10.0,
            escape(&condition.name),
            condition.train_examples
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// `text` in lines of at most `width` characters, broken at spaces (and within a longer word).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        while word.len() > width {
            lines.push(word.drain(..width).collect());
        }
        let word: String = word.into_iter().collect();
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(&word);
            }
            _ if word.is_empty() => {}
            _ => lines.push(word),
        }
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    lines
}

fn model_name(result: &ExperimentResult) -> String {
    match result.model.kind {
        super::config::ModelKind::Bow => "bag-of-words logistic regression".into(),
        super::config::ModelKind::FineTune => format!(
            "{} fine-tuned, {} epochs, lr {}",
            result.model.encoder, result.model.train.epochs, result.model.train.lr
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_labels_wrap_at_spaces_and_within_long_words() {
        assert_eq!(wrap("imdb:test", 12), ["imdb:test"]);
        assert_eq!(
            wrap("rotten tomatoes sentences (2000)", 16),
            ["rotten tomatoes", "sentences (2000)"]
        );
        assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(wrap("", 4), [""]);
    }
}
