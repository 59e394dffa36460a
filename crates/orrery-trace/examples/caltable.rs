//! Prints the calibration table (a development aid; `orrery zoo --calibration` is the user-facing form).
fn main() {
    use orrery_trace::calibration::*;
    let t = table();
    for p in &t {
        println!(
            "{:<16} {:<50} {:>10.2} {:>10.2} {:>6.1}% {:?}",
            p.source,
            p.what,
            p.measured,
            p.orrery,
            100.0 * p.rel_error(),
            p.role
        );
    }
    println!(
        "median fit+check {:.3}, check {:.3}",
        median_error(&t, &[Role::Fit, Role::Check]),
        median_error(&t, &[Role::Check])
    );
}
