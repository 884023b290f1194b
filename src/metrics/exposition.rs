//! The OpenMetrics 1.0 text exposition format: metric families, each a `# HELP` and a `# TYPE`
//! line followed by all its samples, and `# EOF` at the end.
//!
//! Rules of the format this writer keeps: a family's samples are contiguous (callers write one
//! family at a time); a counter's family name has no `_total` and its sample has; a summary's
//! samples are its quantiles (label `quantile`), `_sum` and `_count`; label values and HELP
//! text escape `\`, `"` and the line feed; the text ends with `# EOF` and a line feed.

use std::fmt::Write as _;

/// The HTTP `Content-Type` of [`MetricsRegistry::render`](crate::MetricsRegistry::render)'s
/// text (OpenMetrics 1.0).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The type of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A monotonically growing count (sample name `<family>_total`).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Quantiles of a distribution, with its sum and count.
    Summary,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Summary => "summary",
        }
    }
}

/// A label name and its value.
pub(crate) type Label<'a> = (&'a str, &'a str);

/// The exposition text being written.
#[derive(Debug, Default)]
pub(crate) struct Exposition {
    out: String,
}

impl Exposition {
    /// Starts the family `name`: its HELP and TYPE lines.
    pub(crate) fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {}", escape(help));
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.name());
    }

    /// A counter's sample (`<family>_total`).
    pub(crate) fn counter(&mut self, family: &str, labels: &[Label<'_>], value: f64) {
        self.sample(family, "_total", labels, None, value);
    }

    /// A gauge's sample.
    pub(crate) fn gauge(&mut self, family: &str, labels: &[Label<'_>], value: f64) {
        self.sample(family, "", labels, None, value);
    }

    /// A summary's samples: each `(quantile, value)`, then `_sum` and `_count`.
    pub(crate) fn summary(
        &mut self,
        family: &str,
        labels: &[Label<'_>],
        quantiles: &[(f64, f64)],
        sum: f64,
        count: u64,
    ) {
        for &(q, value) in quantiles {
            self.sample(family, "", labels, Some(q), value);
        }
        self.sample(family, "_sum", labels, None, sum);
        self.sample(family, "_count", labels, None, count as f64);
    }

    /// The finished text, `# EOF` included.
    pub(crate) fn finish(mut self) -> String {
        self.out.push_str("# EOF\n");
        self.out
    }

    fn sample(
        &mut self,
        family: &str,
        suffix: &str,
        labels: &[Label<'_>],
        quantile: Option<f64>,
        value: f64,
    ) {
        self.out.push_str(family);
        self.out.push_str(suffix);
        if !labels.is_empty() || quantile.is_some() {
            self.out.push('{');
            let mut first = true;
            for (name, value) in labels {
                if !first {
                    self.out.push(',');
                }
                first = false;
                let _ = write!(self.out, "{name}=\"{}\"", escape(value));
            }
            if let Some(q) = quantile {
                if !first {
                    self.out.push(',');
                }
                let _ = write!(self.out, "quantile=\"{}\"", number(q));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }
}

/// `text` with `\`, `"` and line feeds escaped, as label values and HELP text need.
pub(crate) fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(['\\', '"', '\n']) {
        return text.into();
    }
    let mut escaped = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped.into()
}

/// A sample value as the format spells it: integers without a fraction, `NaN`, `+Inf`, `-Inf`.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_starts_with_help_and_type_and_the_text_ends_with_eof() {
        let mut e = Exposition::default();
        e.family("x_records", Kind::Counter, "Records.");
        e.counter("x_records", &[("task", "map")], 3.0);
        let text = e.finish();
        assert_eq!(
            text,
            "# HELP x_records Records.\n# TYPE x_records counter\n\
             x_records_total{task=\"map\"} 3\n# EOF\n"
        );
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        let mut e = Exposition::default();
        e.family("g", Kind::Gauge, "a \\ b\nc");
        e.gauge("g", &[("task", "say \"hi\"\\\n")], 1.5);
        let text = e.finish();
        assert!(text.contains("# HELP g a \\\\ b\\nc\n"), "{text}");
        assert!(
            text.contains("g{task=\"say \\\"hi\\\"\\\\\\n\"} 1.5\n"),
            "{text}"
        );
        // Every line of the text is one line: the escaped line feed broke none.
        assert_eq!(text.lines().count(), 4);
    }

    #[test]
    fn a_summary_has_quantiles_sum_and_count() {
        let mut e = Exposition::default();
        e.family("lat", Kind::Summary, "Latency.");
        e.summary("lat", &[("m", "a")], &[(0.5, 2.0), (0.99, 7.25)], 10.0, 4);
        let text = e.finish();
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "lat{m=\"a\",quantile=\"0.5\"} 2",
                "lat{m=\"a\",quantile=\"0.99\"} 7.25",
                "lat_sum{m=\"a\"} 10",
                "lat_count{m=\"a\"} 4",
            ]
        );
    }

    #[test]
    fn special_values_are_spelled_as_the_format_says() {
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NEG_INFINITY), "-Inf");
        assert_eq!(number(42.0), "42");
        assert_eq!(number(0.125), "0.125");
    }

    #[test]
    fn an_unlabelled_sample_has_no_braces() {
        let mut e = Exposition::default();
        e.family("up", Kind::Gauge, "Up.");
        e.gauge("up", &[], 1.0);
        assert!(e.finish().contains("\nup 1\n"));
    }
}
