//! Every number a user can give orrery has one declared range (issue 71):
//! the schema of every input `orrery schema --list` names is walked, so a
//! field added without a range fails here, and the inputs a probe from
//! outside found unchecked are refused with the file, line and field.
//!
//! A new input type (a file format or an API body) joins the list in
//! `crates/orrery/src/schema.rs`.

use orrery_model::ranges::unranged;
use std::process::Command;

fn orrery(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_orrery")).args(args).output().expect("orrery runs");
    assert!(out.status.success(), "orrery {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn every_number_of_every_input_declares_its_range() {
    let list = orrery(&["schema", "--list"]);
    let names: Vec<&str> = list.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(names.len() >= 10 && names.contains(&"job") && names.contains(&"reports"), "{list}");
    let mut missing = Vec::new();
    for name in names {
        let schema: serde_json::Value = serde_json::from_str(&orrery(&["schema", name])).expect("a JSON schema");
        // A schema without numbers would make this test pass vacuously.
        assert!(schema.to_string().contains("\"maximum\""), "{name}: no bounded number in its schema");
        missing.extend(unranged(&schema).into_iter().map(|path| format!("{name}: {path}")));
    }
    assert!(
        missing.is_empty(),
        "numbers without both bounds (add #[schemars(range(min, max))]):\n{}",
        missing.join("\n")
    );
    let e = Command::new(env!("CARGO_BIN_EXE_orrery")).args(["schema", "nope"]).output().expect("runs");
    assert!(!e.status.success() && String::from_utf8_lossy(&e.stderr).contains("expected one of job, experiment"));
}

fn experiment(workload: &str) -> String {
    format!(
        "name = \"x\"\npolicies = [\"fifo\"]\n[topology]\nbuiltin = \"cassini\"\n[workload]\ngenerator = \"poisson\"\n{workload}"
    )
}

#[test]
fn a_generated_mix_of_four_billion_workers_is_refused_before_anything_is_allocated() {
    // Issue 71: `mix.workers` of 2³²−1 aborted on a 4 GiB allocation.
    let text =
        experiment("[workload.mix]\nmodels = [\"vgg16\"]\nworkers = [[4294967295, 1.0]]\niterations = [10, 20]\n");
    let e = orrery_lab::spec::parse("x.toml", &text).expect_err("too many workers").to_string();
    assert_eq!(e, "x.toml:9: workload.mix.workers[0][0]: expected an integer from 1 to 65536, found 4294967295");
    // A weight may be 0 but not negative; iterations not 0.
    let text = experiment("[workload.mix]\nmodels = [\"vgg16\"]\nworkers = [[4, -1.0]]\niterations = [10, 20]\n");
    let e = orrery_lab::spec::parse("x.toml", &text).expect_err("negative weight").to_string();
    assert!(e.starts_with("x.toml:9: workload.mix.workers[0][1]: expected a number from 0 to"), "{e}");
    let text = experiment("[workload.mix]\nmodels = [\"vgg16\"]\nworkers = [[4, 1.0]]\niterations = [0, 20]\n");
    let e = orrery_lab::spec::parse("x.toml", &text).expect_err("0 iterations").to_string();
    assert_eq!(e, "x.toml:10: workload.mix.iterations[0]: expected an integer from 1 to 1e10, found 0");
}

#[test]
fn a_host_of_nan_or_negative_memory_is_refused_with_its_line() {
    // Issue 71: `orrery topo show` accepted and printed both.
    let host = |memory: &str| {
        format!(
            "[[hosts]]\nname = \"h0\"\ngpus = 1\ngpu_type = \"a100\"\nmemory_gib = {memory}\n[[hosts]]\nname = \"h1\"\ngpus = 1\ngpu_type = \"a100\"\n[[switches]]\nname = \"s\"\ntier = \"leaf\"\n[[cables]]\na = \"h0\"\nb = \"s\"\ngbps = 10.0\n[[cables]]\na = \"h1\"\nb = \"s\"\ngbps = 10.0\n"
        )
    };
    let parse = |text: &str| orrery_model::setups::parse_topology("t.toml", text).map_err(|e| e.to_string());
    assert!(parse(&host("64.0")).is_ok());
    assert_eq!(
        parse(&host("nan")).expect_err("NaN"),
        "t.toml:5: hosts[0].memory_gib: expected a number from 0 to 1048576, found NaN"
    );
    assert_eq!(
        parse(&host("-8.0")).expect_err("negative"),
        "t.toml:5: hosts[0].memory_gib: expected a number from 0 to 1048576, found -8.0"
    );
    // And a link of a trillion Gbit/s.
    let fast = host("64.0").replacen("gbps = 10.0", "gbps = 1e12", 1);
    assert_eq!(
        parse(&fast).expect_err("fast"),
        "t.toml:16: cables[0].gbps: expected a number from 0.001 to 1000000, found 1e12"
    );
}

#[test]
fn a_job_out_of_range_is_refused_the_same_at_every_door() {
    let line =
        r#"{"id": "j", "model": "resnet50", "batch": 32, "workers": 70000, "work": {"iterations": 5}, "arrival_s": 0}"#;
    let jsonl = orrery_trace::formats::jsonl::parse("jobs.jsonl", &format!("{line}\n"));
    assert_eq!(jsonl.items.len(), 0);
    assert_eq!(
        jsonl.errors[0].to_string(),
        "jobs.jsonl:1: field `workers`: expected an integer from 1 to 65536, found 70000"
    );
    let spec: orrery_model::JobSpec = serde_json::from_str(line).expect("well typed");
    let bad = spec.check().expect_err("70000 workers");
    assert_eq!((bad.field.as_str(), bad.found.as_str()), ("workers", "70000"));
    let text = experiment(
        "[[workload.job]]\nid = \"j\"\nmodel = \"resnet50\"\nbatch = 32\nworkers = 70000\nwork = { iterations = 5 }\narrival_s = 0.0\n",
    )
    .replace("generator = \"poisson\"\n", "");
    let e = orrery_lab::spec::parse("x.toml", &text).expect_err("workers").to_string();
    assert_eq!(e, "x.toml:10: workload.job[0].workers: expected an integer from 1 to 65536, found 70000");
}
