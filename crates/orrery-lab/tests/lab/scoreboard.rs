//! docs/results.md's scoreboard shows docs/scoreboard.toml's rows, and the
//! file's links and commands lead somewhere. The simulator's figures are
//! the runs' (`orrery table --scoreboard`, too slow for a test); here each
//! must match its row's template, so a row edited in one file and not the
//! other, or a section renamed under a link, fails.

use orrery_lab::scoreboard::{Row, Scoreboard, anchor};
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn board() -> Scoreboard {
    let path = repo().join("docs/scoreboard.toml");
    let text = std::fs::read_to_string(&path).expect("docs/scoreboard.toml");
    Scoreboard::parse("docs/scoreboard.toml", &text).unwrap_or_else(|e| panic!("{e}"))
}

fn results() -> String {
    std::fs::read_to_string(repo().join("docs/results.md")).expect("docs/results.md")
}

/// Whether `text` is `template` with each `{NAME}` standing for some
/// non-empty text (the shortest that lets the next literal follow).
/// O(len · placeholders).
fn fits(template: &str, text: &str) -> bool {
    let mut pieces = template.split('{');
    let first = pieces.next().unwrap_or("");
    // The literal after each placeholder.
    let literals: Vec<&str> = pieces.map(|p| p.split_once('}').map_or(p, |(_, after)| after)).collect();
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    for (k, literal) in literals.iter().enumerate() {
        let end = if k + 1 == literals.len() {
            if !rest.ends_with(literal) || rest.len() <= literal.len() {
                return false;
            }
            rest.len() - literal.len()
        } else {
            match rest.char_indices().skip(1).map(|(i, _)| i).find(|&i| rest[i..].starts_with(literal)) {
                Some(i) => i,
                None => return false,
            }
        };
        rest = &rest[end + literal.len()..];
    }
    rest.is_empty()
}

#[test]
fn the_template_matcher_takes_figures_for_names() {
    assert!(fits("{gain}×", "1.23×"));
    assert!(fits("{a}× / {b}× (x)", "1.00–1.01× / 1.00× (x)"));
    assert!(!fits("{a}× / {b}× (x)", "1.00× (x)"));
    assert!(!fits("{gain}×", "×"));
    assert!(fits("no figures", "no figures"));
    assert!(!fits("no figures", "no figure"));
}

#[test]
fn results_show_the_scoreboards_rows_and_its_links_lead_to_sections() {
    let board = board();
    let text = results();
    // Headings outside code blocks, as anchors.
    let mut anchors = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            anchors.push(anchor(line.trim_start_matches('#')));
        }
    }
    let shown: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| !l.starts_with("| paper: headline"))
        .skip(2)
        .take_while(|l| l.starts_with("| "))
        .map(|l| l.trim_start_matches("| ").trim_end_matches(" |").split(" | ").collect())
        .collect();
    assert_eq!(shown.len(), board.rows.len(), "docs/results.md's scoreboard has other rows than docs/scoreboard.toml");
    for (row, cells) in board.rows.iter().zip(&shown) {
        for (label, to) in &row.links {
            let target = to.trim_start_matches('#');
            assert!(anchors.iter().any(|a| a == target), "{}: link [{label}] leads to no heading: {to}", row.headline);
        }
        assert_eq!(cells.len(), 6, "{cells:?}");
        assert_eq!(cells[0], row.headline_cell());
        assert_eq!(cells[1], row.paper, "{}", row.headline);
        assert!(
            fits(&row.simulator, cells[2]),
            "{}: `{}` is not `{}` with figures",
            row.headline,
            cells[2],
            row.simulator
        );
        assert_eq!(cells[3], Row::or_dash(&row.testbed), "{}", row.headline);
        assert_eq!(cells[4], Row::or_dash(&row.ddp), "{}", row.headline);
        assert_eq!(cells[5], row.verdict, "{}", row.headline);
    }
    // The command that prints it is in the file.
    assert!(text.contains("table --scoreboard docs/scoreboard.toml"));
}

#[test]
fn every_run_the_scoreboard_reads_is_made_by_an_experiment_that_exists() {
    for (name, run) in &board().runs {
        let files: Vec<&str> = run.command.split_whitespace().filter(|w| w.ends_with(".toml")).collect();
        assert!(!files.is_empty(), "{name}: `{}` names no experiment file", run.command);
        for f in files {
            assert!(repo().join(f).exists(), "{name}: {f} does not exist");
        }
        let out = run.summary.parent().expect("a folder").display().to_string();
        assert!(run.command.contains(&format!("--out {out}")), "{name}: `{}` does not write {out}", run.command);
    }
}
