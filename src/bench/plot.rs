//! A hand-written SVG: per-run tok/s bars, with the baseline median as a dashed line and a
//! decode ceiling (llama-bench's figure for the same build) as a labelled solid line.

/// A horizontal reference line: its label (`llama-bench tg2048`) and tok/s.
pub struct Ceiling<'a> {
    pub label: &'a str,
    pub tok_s: f64,
}

/// The plot of a bench report: decode tok/s per run (end-to-end where the server reports no
/// decode rate), with its gate's baseline median.
pub fn of_report(r: &super::Report) -> String {
    of_report_with(r, None)
}

/// [`of_report`] with the build's decode ceiling drawn beside the runs.
pub fn of_report_with(r: &super::Report, ceiling: Option<&Ceiling>) -> String {
    let values: Vec<f64> = r
        .runs
        .iter()
        .map(|run| run.decode_tok_s.unwrap_or(run.e2e_tok_s))
        .collect();
    let title = format!("kiln bench {} ({})", r.url, r.fingerprint_id);
    svg(
        &title,
        &values,
        r.gate.as_ref().map(|g| g.baseline_median),
        ceiling,
    )
}

pub fn svg(
    title: &str,
    runs: &[f64],
    baseline_median: Option<f64>,
    ceiling: Option<&Ceiling>,
) -> String {
    let (w, h, left, bottom, top) = (640.0_f64, 360.0_f64, 60.0_f64, 40.0_f64, 40.0_f64);
    let ymax = runs
        .iter()
        .copied()
        .chain(baseline_median)
        .chain(ceiling.map(|c| c.tok_s))
        .fold(1e-9_f64, f64::max)
        * 1.15;
    let plot_h = h - top - bottom;
    let y = |v: f64| top + plot_h * (1.0 - v / ymax);
    let slot = (w - left - 20.0) / runs.len().max(1) as f64;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
        w / 2.0,
        // A plot is a file people attach to issues: a URL's password never reaches it.
        escape(&crate::redact::scrub(title)),
        h - bottom,
        h - bottom,
        w - 20.0,
        h - bottom
    );
    for i in 0..=4 {
        let v = ymax * f64::from(i) / 4.0;
        s.push_str(&format!(
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v:.1}</text>\n",
            left - 6.0,
            y(v) + 4.0
        ));
    }
    s.push_str(&format!("<text x=\"14\" y=\"{:.1}\" transform=\"rotate(-90 14 {:.1})\" text-anchor=\"middle\">decode tok/s</text>\n", top + plot_h / 2.0, top + plot_h / 2.0));
    for (i, v) in runs.iter().enumerate() {
        let x = left + slot * i as f64 + slot * 0.15;
        s.push_str(&format!(
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#4c78a8\"><title>run {}: {v:.2} tok/s</title></rect>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            y(*v),
            slot * 0.7,
            (h - bottom) - y(*v),
            i + 1,
            x + slot * 0.35,
            h - bottom + 16.0,
            i + 1
        ));
    }
    if let Some(b) = baseline_median {
        s.push_str(&format!(
            "<line x1=\"{left}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"#e45756\" stroke-dasharray=\"6 4\"/>\n\
             <text x=\"{1}\" y=\"{2:.1}\" text-anchor=\"end\" fill=\"#e45756\">baseline median {b:.1}</text>\n\
             <line x1=\"{left}\" y1=\"{3:.1}\" x2=\"{1}\" y2=\"{3:.1}\" stroke=\"#e45756\" stroke-opacity=\"0.4\"/>\n\
             <text x=\"{1}\" y=\"{4:.1}\" text-anchor=\"end\" fill=\"#e45756\" fill-opacity=\"0.6\">0.9 × baseline</text>\n",
            y(b),
            w - 20.0,
            y(b) - 4.0,
            y(0.9 * b),
            y(0.9 * b) + 14.0
        ));
    }
    if let Some(c) = ceiling {
        s.push_str(&format!(
            "<line class=\"ceiling\" x1=\"{left}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"#54a24b\" stroke-width=\"2\"><title>ceiling: {2} {3:.1} tok/s</title></line>\n\
             <text x=\"{4:.1}\" y=\"{5:.1}\" text-anchor=\"start\" fill=\"#54a24b\">ceiling: {2} {3:.1} tok/s</text>\n",
            y(c.tok_s),
            w - 20.0,
            escape(c.label),
            c.tok_s,
            left + 6.0,
            y(c.tok_s) - 4.0
        ));
    }
    s.push_str(&format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">run</text>\n</svg>\n",
        left + (w - left) / 2.0,
        h - 6.0
    ));
    s
}

/// Text made safe inside XML/HTML text and double-quoted attributes (the SVGs, report.html).
pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    #[test]
    fn bars_and_baseline() {
        let s = super::svg("a <b>", &[10.0, 20.0], Some(15.0), None);
        assert_eq!(s.matches("<rect x=").count(), 2);
        assert!(s.contains("baseline median 15.0") && s.contains("a &lt;b&gt;"));
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(!s.contains("ceiling"));
    }

    #[test]
    fn the_ceiling_is_a_labelled_line_at_its_height_inside_the_axis() {
        let c = super::Ceiling {
            label: "llama-bench tg2048 <&>",
            tok_s: 40.0,
        };
        let s = super::svg("t", &[10.0, 20.0], None, Some(&c));
        assert!(
            s.contains("ceiling: llama-bench tg2048 &lt;&amp;&gt; 40.0 tok/s"),
            "{s}"
        );
        // The axis reaches above the ceiling (ymax = 1.15 × 40 = 46): its line sits at
        // top + plot_h × (1 − 40/46) = 40 + 280 × 0.1304 = 76.5, horizontal.
        let line = s
            .lines()
            .find(|l| l.starts_with("<line class=\"ceiling\""))
            .unwrap();
        assert!(
            line.contains("y1=\"76.5\"") && line.contains("y2=\"76.5\""),
            "{line}"
        );
        // The top tick is ymax: 46.0, above every bar and the ceiling.
        assert!(s.contains(">46.0</text>"), "{s}");
    }
}
