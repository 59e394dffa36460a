//! Property tests: no reader panics on arbitrary bytes or on mutated real rows,
//! and every row is either accepted or reported (never silently lost).

use orrery_trace::{Format, parse};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// Deterministic runs, so CI sees the cases a developer saw.
fn fixed(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x00bb_ee55),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn data(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../../data/{path}", env!("CARGO_MANIFEST_DIR"))).expect("bundled data file")
}

/// Header plus the first `n` data rows of a bundled file.
fn head(path: &str, n: usize) -> Vec<String> {
    data(path).lines().take(n + 1).map(str::to_string).collect()
}

fn formats() -> impl Strategy<Value = Option<Format>> {
    prop_oneof![Just(None), proptest::sample::select(Format::ALL.to_vec()).prop_map(Some)]
}

proptest! {
    #![proptest_config(fixed(256))]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,400}", format in formats()) {
        let _ = parse("fuzz", &text, format, 0);
    }

    #[test]
    fn mutated_rows_are_kept_or_reported(
        which in 0usize..5,
        row in 1usize..20,
        pos in 0usize..200,
        junk in "[a-z0-9,\\t\\-\\.\" ]{0,6}",
    ) {
        let files = [
            ("philly/philly_jobs_pollux.csv", Format::Philly),
            ("philly/muri_trace1.csv", Format::Muri),
            ("profiles/tiresias_60_job.csv", Format::Tiresias),
            ("profiles/pollux/workloads/workload-1.csv", Format::Pollux),
            ("philly/gavel_msr_seed0_e13805.trace", Format::Gavel),
        ];
        let (path, format) = files[which];
        let mut lines = head(path, 20);
        let has_header = format != Format::Gavel;
        let i = row.min(lines.len() - 1);
        let line = &mut lines[i];
        let cut = line.char_indices().map(|(k, _)| k).nth(pos % line.chars().count().max(1)).unwrap_or(0);
        line.replace_range(cut..cut, &junk);
        let text = lines.join("\n");
        let p = parse("mutated", &text, Some(format), 0);
        let rows = lines.len() - usize::from(has_header);
        prop_assert_eq!(p.items.len() + p.errors.len(), rows);
        for e in &p.errors {
            prop_assert!(e.file == "mutated" && e.line >= 1);
        }
    }
}
