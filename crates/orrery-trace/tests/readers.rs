//! Every reader against the real files in `data/` (and `shared/data` for files
//! that cannot be bundled), plus malformed rows whose messages must name the
//! file, line and field.

use orrery_model::{Priority, Work};
use orrery_trace::{Format, parse};

fn data(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../../data/{path}", env!("CARGO_MANIFEST_DIR"))).expect("bundled data file")
}

fn shared(path: &str) -> Option<String> {
    std::fs::read_to_string(format!("{}/../../../shared/data/{path}", env!("CARGO_MANIFEST_DIR"))).ok()
}

#[test]
fn philly_has_82247_jobs_sorted_with_gpu_counts_from_the_readme() {
    let p = parse("philly.csv", &data("philly/philly_jobs_pollux.csv"), None, 0);
    assert!(p.errors.is_empty(), "{:?}", p.errors.first());
    assert_eq!(p.items.len(), 82_247);
    assert_eq!(p.items.iter().filter(|j| j.workers == 1).count(), 76_627);
    assert_eq!(p.items.iter().filter(|j| j.workers == 8).count(), 1_643);
    assert_eq!(p.items[0].arrival_s, 0.0);
    assert!(p.items.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
    // Timestamps run from 2017-09-04 to 2017-12-22: about 109 days.
    let span_days = p.items.last().map_or(0.0, |j| j.arrival_s) / 86_400.0;
    assert!((108.0..110.0).contains(&span_days), "{span_days}");
    // Median duration 1,144 s and mean 13,136 s per the data README.
    let mut d: Vec<f64> = p.items.iter().map(|j| if let Work::Seconds(s) = j.work { s } else { f64::NAN }).collect();
    let mean = d.iter().sum::<f64>() / d.len() as f64;
    d.sort_by(f64::total_cmp);
    assert_eq!(d[d.len() / 2], 1_144.0);
    assert!((mean - 13_136.0).abs() < 1.0, "{mean}");
    assert!(p.items.iter().all(|j| j.model_inferred));
}

#[test]
fn philly_malformed_rows_are_reported_and_good_rows_kept() {
    let text = "timestamp,duration,num_gpus,gpu_time,cluster\n\
                2017-10-01 10:00:00,100,1,100,abc\n\
                2017-10-01 10:00:00,100,zero,100,abc\n\
                2017-13-01 10:00:00,100,1,100,abc\n\
                2017-10-01 11:00:00,-5,1,100,abc\n\
                2017-10-01 11:00:00,60\n\
                2017-10-01 12:00:00,100,2,200,abc\n";
    let p = parse("p.csv", text, Some(Format::Philly), 0);
    assert_eq!(p.items.len(), 2);
    let msgs: Vec<String> = p.errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        msgs,
        [
            "p.csv:3: field `num_gpus`: expected a positive integer, found \"zero\"",
            "p.csv:4: field `timestamp`: expected a time as YYYY-MM-DD HH:MM:SS, found \"2017-13-01 10:00:00\"",
            "p.csv:5: field `duration`: expected a non-negative number, found -5.0",
            "p.csv:6: expected 5 fields (timestamp,duration,num_gpus,gpu_time,cluster), found 2 fields",
        ]
    );
    assert_eq!(p.items[1].arrival_s, 7_200.0);
}

#[test]
fn gavel_trace_has_607_jobs_with_the_readme_scale_factors() {
    let p = parse("e13805.trace", &data("philly/gavel_msr_seed0_e13805.trace"), None, 0);
    assert!(p.errors.is_empty(), "{:?}", p.errors.first());
    assert_eq!(p.items.len(), 607);
    for (gpus, n) in [(1, 233), (2, 5), (4, 116), (8, 234), (12, 6), (16, 11), (24, 2)] {
        assert_eq!(p.items.iter().filter(|j| j.workers == gpus).count(), n, "{gpus} GPUs");
    }
    let first = &p.items[0];
    assert_eq!((first.model.as_str(), first.batch, first.workers), ("transformer", 128, 8));
    assert_eq!(first.work, Work::Iterations(6_959_399));
    let last = p.items.iter().map(|j| j.arrival_s).fold(0.0, f64::max);
    assert!((8.4e6..8.5e6).contains(&last), "{last}");
}

#[test]
fn gavel_malformed_rows() {
    let text = "ResNet-50 (batch size 64)\tcmd\t-n\t1\t100\t0.0\t4\n\
                Mystery (batch size 64)\tcmd\t-n\t1\t100\t0.0\t4\n\
                ResNet-50 (batch size 64)\tcmd\t-n\t1\tlots\t0.0\t4\n\
                ResNet-50 (batch size 64)\tcmd\t-n\t1\t100\t0.0\n";
    let p = parse("g.trace", text, Some(Format::Gavel), 0);
    assert_eq!(p.items.len(), 1);
    assert!(
        p.errors[0].to_string().starts_with("g.trace:2: field `job_type`: expected a Gavel job type"),
        "{}",
        p.errors[0]
    );
    assert_eq!(
        p.errors[1].to_string(),
        "g.trace:3: field `total_steps`: expected a positive integer number of steps, found \"lots\""
    );
    assert!(p.errors[2].to_string().starts_with("g.trace:4: expected 7 fields"), "{}", p.errors[2]);
}

#[test]
fn muri_trace_has_1494_jobs_half_high_priority() {
    let p = parse("trace1.csv", &data("philly/muri_trace1.csv"), None, 0);
    assert!(p.errors.is_empty(), "{:?}", p.errors.first());
    assert_eq!(p.items.len(), 1_494);
    assert_eq!(p.items.iter().filter(|j| j.priority == Priority::High).count(), 749);
    let j = &p.items[2];
    assert_eq!((j.model.as_str(), j.batch, j.workers), ("vgg16", 16, 8));
    assert_eq!(j.work, Work::Iterations(20_901_556));
    assert!((j.arrival_s - 724_670.0).abs() < 1e-6);
    assert!(p.items.iter().any(|j| j.model == "gpt2-small"));
}

#[test]
fn every_trace_reader_refuses_nonsense_rows_and_keeps_the_rest() {
    // Issue 41: zero iterations, times past any trace, and repeated ids were
    // accepted by the CSV readers. Each is refused on its own line, naming
    // the field, and the good rows before and after stay.
    let head = "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n";
    let rows = [
        "0,1,0,10,dqn,128,1,1,1,1,1,0,1",
        "1,1,0,0,dqn,128,1,1,1,1,1,0,1",
        "2,1,1e308,10,dqn,128,1,1,1,1,1,0,1",
        "0,1,0,10,dqn,128,1,1,1,1,1,0,1",
        "3,1,0,10,dqn,2000000,1,1,1,1,1,0,1",
        "4,70000,0,10,dqn,128,1,1,1,1,1,0,1",
        "5,1,0,10,dqn,128,1,1,1,1,1,0,0",
    ];
    let p = parse("m.csv", &format!("{head}{}\n", rows.join("\n")), None, 0);
    let ids: Vec<&str> = p.items.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["muri-0", "muri-5"]);
    let msgs: Vec<String> = p.errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        msgs,
        [
            "m.csv:3: field `work.iterations`: expected an integer from 1 to 1e10, found 0",
            "m.csv:4: field `arrival_s`: expected a number from 0 to 4e9, found 1e305",
            "m.csv:5: field `id`: expected an id not used on an earlier line, found \"muri-0\"",
            "m.csv:6: field `batch`: expected an integer from 0 to 1048576, found 2000000",
            "m.csv:7: field `workers`: expected an integer from 1 to 65536, found 70000",
        ]
    );
}

#[test]
fn muri_malformed_rows() {
    let text = "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,priority\n\
                0,1,0,10,dqn,128,1,1,1,1,1,0,1\n\
                1,1,0,10,alphafold,128,1,1,1,1,1,0,1\n\
                2,1,0,10,dqn,128,1,1,1,1,1,0,7\n";
    let p = parse("m.csv", text, None, 0);
    assert_eq!(p.items.len(), 1);
    assert_eq!(
        p.errors[0].to_string(),
        "m.csv:3: field `model_name`: expected a model of the zoo (see `orrery zoo`), found \"alphafold\""
    );
    assert_eq!(p.errors[1].to_string(), "m.csv:4: field `priority`: expected 0 (low) or 1 (high), found \"7\"");
}

#[test]
fn pollux_workloads_have_160_jobs_each_with_converging_iterations() {
    for n in 1..=8 {
        let p = parse("w.csv", &data(&format!("profiles/pollux/workloads/workload-{n}.csv")), None, 0);
        assert!(p.errors.is_empty(), "workload-{n}: {:?}", p.errors.first());
        assert_eq!(p.items.len(), 160, "workload-{n}");
    }
    let p = parse("w6.csv", &data("profiles/pollux/workloads/workload-6.csv"), None, 0);
    let j = &p.items[0];
    // cifar10-0: 6 replicas, total batch 2048 → 342 per replica; converges at
    // iteration 3,178 with B = 2048 (last row of validation-2048.csv).
    assert_eq!((j.model.as_str(), j.workers, j.batch), ("resnet18-cifar", 6, 342));
    assert_eq!(j.work, Work::Iterations(3_178));
    assert_eq!(orrery_model::convergence::iterations_to_converge("cifar10", 128), Some(39_062));
    // Between profiled batches the count is interpolated in log-log space.
    let mid = orrery_model::convergence::iterations_to_converge("cifar10", 181).unwrap_or(0);
    assert!((20_377..39_062).contains(&mid), "{mid}");
}

#[test]
fn pollux_malformed_rows() {
    let text = "name,time,application,num_replicas,batch_size\nok,0,ncf,1,256\nbad,0,chess,1,256\nbad2,0,ncf,0,256\n";
    let p = parse("w.csv", text, None, 0);
    assert_eq!(p.items.len(), 1);
    assert!(p.errors[0].to_string().starts_with("w.csv:3: field `application`: expected one of cifar10"));
    assert_eq!(p.errors[1].to_string(), "w.csv:4: field `num_replicas`: expected a positive integer, found 0");
}

#[test]
fn tiresias_60_jobs() {
    let p = parse("60_job.csv", &data("profiles/tiresias_60_job.csv"), None, 0);
    assert!(p.errors.is_empty(), "{:?}", p.errors.first());
    assert_eq!(p.items.len(), 60);
    assert_eq!((p.items[1].model.as_str(), p.items[1].workers), ("vgg11", 8));
    assert_eq!(p.items[1].work, Work::Iterations(133));
    let bad = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n0,1,0,606,vgg19,164,30\n1,1,soon,606,vgg19,164,30\n";
    let p = parse("t.csv", bad, None, 0);
    assert_eq!(p.errors[0].to_string(), "t.csv:3: field `submit_time`: expected a non-negative number, found \"soon\"");
}

#[test]
fn alibaba_v2023_pods() {
    let text = shared("alibaba/v2023_openb_pod_list_default.csv");
    if let Some(text) = &text {
        let p = parse("pods.csv", text, None, 0);
        assert!(p.errors.is_empty(), "{:?}", p.errors.first());
        // 8,152 tasks of which 1,088 ask for no GPU (data README).
        assert_eq!(p.items.len(), 8_152 - 1_088);
        assert_eq!(p.skipped.len(), 1_088);
        assert_eq!(p.items.iter().filter(|j| j.gpu_share < 1.0).count(), 3_078);
    }
    if let Some(text) = shared("alibaba/v2023_openb_pod_list_multigpu50.csv") {
        let p = parse("multi.csv", &text, None, 0);
        assert!(p.errors.is_empty(), "{:?}", p.errors.first());
        assert_eq!(p.items.iter().filter(|j| j.workers == 8).count(), 556);
    }
    let bad = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
               a,1000,1024,1,500,,LS,Running,0,100,10\n\
               b,1000,1024,1,1500,,LS,Running,0,100,10\n\
               c,1000,1024,0,0,,LS,Running,0,100,10\n\
               d,1000,1024,1,1000,,LS,Running,0,5,10\n";
    let p = parse("pods.csv", bad, None, 0);
    assert_eq!(p.items.len(), 1);
    assert_eq!(p.items[0].gpu_share, 0.5);
    assert_eq!(p.items[0].work, Work::Seconds(90.0));
    assert_eq!(p.skipped.len(), 1);
    assert_eq!(p.errors[0].to_string(), "pods.csv:3: field `gpu_milli`: expected an integer 0..=1000, found 1500");
    assert_eq!(
        p.errors[1].to_string(),
        "pods.csv:5: field `deletion_time`: expected a time after scheduled_time (10), found 5.0"
    );
}

#[test]
fn jsonl_dependency_cycles_are_refused_at_their_lines() {
    // Issue 41: `orrery run` refused a cycle, `trace inspect` took it.
    let job = |id: &str, on: &str| {
        format!(
            "{{\"id\":\"{id}\",\"model\":\"vgg16\",\"batch\":32,\"workers\":2,\"work\":{{\"iterations\":10}},\"arrival_s\":0,\"depends_on\":[{on}]}}\n"
        )
    };
    let text = [job("a", ""), job("b", "\"c\""), job("c", "\"b\""), job("d", "\"a\"")].concat();
    let p = parse("d.jsonl", &text, None, 0);
    let ids: Vec<&str> = p.items.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["a", "d"]);
    let msgs: Vec<String> = p.errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        msgs,
        [
            "d.jsonl:2: field `depends_on`: expected no cycle of jobs waiting on one another, found [\"c\"]",
            "d.jsonl:3: field `depends_on`: expected no cycle of jobs waiting on one another, found [\"b\"]",
        ]
    );
}

#[test]
fn jsonl_round_trip_and_errors() {
    let jobs = parse("w6.csv", &data("profiles/pollux/workloads/workload-6.csv"), None, 0).items;
    let text = orrery_trace::formats::jsonl::to_string(&jobs);
    let back = parse("w6.jsonl", &text, None, 0);
    assert!(back.errors.is_empty(), "{:?}", back.errors.first());
    assert_eq!(back.items, jobs);
    let bad = concat!(
        "# a comment\n",
        "{\"id\":\"a\",\"model\":\"vgg16\",\"batch\":32,\"workers\":2,\"work\":{\"iterations\":10},\"arrival_s\":0}\n",
        "{\"id\":\"b\",\"model\":\"vgg16\",\"workers\":2,\"work\":{\"iterations\":10},\"arrival_s\":0}\n",
        "{\"id\":\"c\",\"model\":\"vgg99\",\"batch\":32,\"workers\":2,\"work\":{\"iterations\":10},\"arrival_s\":0}\n",
        "{\"id\":\"a\",\"model\":\"vgg16\",\"batch\":32,\"workers\":2,\"work\":{\"iterations\":10},\"arrival_s\":0}\n",
        "{\"id\":\"d\",\"model\":\"vgg16\",\"batch\":32,\"workers\":2,\"work\":{\"iterations\":10},\"arrival_s\":0,\"colour\":1}\n",
    );
    let p = parse("j.jsonl", bad, None, 0);
    assert_eq!(p.items.len(), 1);
    let msgs: Vec<String> = p.errors.iter().map(ToString::to_string).collect();
    // A zoo model without a batch (only a job with its own `shape` may omit it).
    assert_eq!(msgs[0], "j.jsonl:3: field `batch`: expected 1 to 1048576 samples per worker, found 0");
    assert_eq!(
        msgs[1],
        "j.jsonl:4: field `model`: expected a model of the zoo (see `orrery zoo`), or an explicit `shape`, found \"vgg99\""
    );
    assert_eq!(msgs[2], "j.jsonl:5: field `id`: expected an id not used on an earlier line, found \"a\"");
    assert!(msgs[3].starts_with("j.jsonl:6: field `colour`"), "{}", msgs[3]);
}

#[test]
fn unknown_format_is_one_clear_error() {
    let p = parse("x.csv", "a,b,c\n1,2,3\n", None, 0);
    assert!(p.items.is_empty());
    assert!(
        p.errors[0].to_string().starts_with("x.csv:1: expected a header of a known trace format"),
        "{}",
        p.errors[0]
    );
}

#[test]
fn sniffing_recognises_every_bundled_trace() {
    for (path, f) in [
        ("philly/philly_jobs_pollux.csv", Format::Philly),
        ("philly/gavel_msr_seed0_e13805.trace", Format::Gavel),
        ("philly/muri_trace1.csv", Format::Muri),
        ("profiles/pollux/workloads/workload-1.csv", Format::Pollux),
        ("profiles/tiresias_60_job.csv", Format::Tiresias),
    ] {
        assert_eq!(Format::sniff(&data(path)), Some(f), "{path}");
    }
}
