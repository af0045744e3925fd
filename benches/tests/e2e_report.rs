//! The e2e bench's report (`benches/benches/e2e/report.rs`, included here by path: a bench target
//! runs no tests): each fjall figure held to its target, memory and start-up judged only at the
//! size they are stated for, the plot colouring each bar by its target, and the commit and
//! machine lines.

#[path = "../benches/e2e/report.rs"]
mod report;

use report::{Group, Medians, Verdict};

fn good() -> Medians {
    Medians {
        single_ips: 6_000.0,
        single_p99_ms: 20.0,
        batch_ips: 45_000.0,
        drain_ips: 120_000.0,
        rss_pushed_mib: 50.0,
        rss_restarted_mib: 30.0,
        startup_queued_ms: 150.0,
        queued: 1_000_000.0,
        errors: 0.0,
    }
}

fn verdicts(m: &Medians) -> Vec<Option<Verdict>> {
    report::targets(m)
        .into_iter()
        .map(|t| t.map(|(_, v)| v))
        .collect()
}

#[test]
fn each_figure_is_met_or_not_met_against_its_target_and_cpu_rows_have_none() {
    let all_met = verdicts(&good());
    assert_eq!(all_met.len(), 9, "one per table row");
    for i in [1, 3, 5] {
        assert_eq!(all_met[i], None, "CPU row {i}");
    }
    assert!(
        all_met.iter().flatten().all(|v| *v == Verdict::Met),
        "{all_met:?}"
    );

    let slow_p99 = Medians {
        single_p99_ms: 50.0,
        ..good()
    };
    assert_eq!(verdicts(&slow_p99)[0], Some(Verdict::NotMet), "p99 < 50 ms");
    let slow_drain = Medians {
        drain_ips: 99_999.0,
        ..good()
    };
    assert_eq!(verdicts(&slow_drain)[4], Some(Verdict::NotMet));
    let heavy = Medians {
        rss_pushed_mib: 70.0,
        ..good()
    };
    assert_eq!(
        verdicts(&heavy)[6],
        Some(Verdict::NotMet),
        "RSS while pushing counts"
    );
    let failed = Medians {
        errors: 1.0,
        ..good()
    };
    assert_eq!(verdicts(&failed)[8], Some(Verdict::NotMet), "any error");
    assert_eq!(Verdict::NotMet.text(), "NOT met");
}

#[test]
fn memory_and_start_up_are_not_judged_below_a_million_queued_items() {
    let small = Medians {
        queued: 100_000.0,
        rss_restarted_mib: 500.0,
        ..good()
    };
    let v = verdicts(&small);
    for i in [6, 7] {
        match &v[i] {
            Some(Verdict::NotApplicable(why)) => {
                assert_eq!(why, "100000 queued")
            }
            other => panic!("row {i}: {other:?}"),
        }
    }
    assert_eq!(v[4], Some(Verdict::Met), "rates are judged at any size");
    assert!(report::NOT_APPLICABLE_NOTE.contains("MBX_BENCH_DRAIN_ITEMS=1000000"));
}

#[test]
fn the_plot_colours_each_bar_by_its_target_and_names_commit_and_machine() {
    let groups = [
        Group {
            title: "drain".into(),
            unit: "items/s",
            target: Some(100_000.0),
            higher_is_better: true,
            bars: vec![("fjall".into(), 120_000.0), ("postgres".into(), 30_000.0)],
        },
        Group {
            title: "start-up".into(),
            unit: "ms",
            target: Some(200.0),
            higher_is_better: false,
            bars: vec![("fjall".into(), 150.0)],
        },
    ];
    let footer = ["mbx-relay 0.1.0 (commit abc) & co".to_owned()];
    let svg = report::svg("e2e <bench>", &groups, &footer);
    assert!(
        svg.starts_with("<svg ") && svg.ends_with("</svg>\n"),
        "{svg}"
    );
    assert_eq!(svg.matches("#3a9d4a").count(), 2, "two bars meet: {svg}");
    assert_eq!(svg.matches("#c8423b").count(), 1, "one does not: {svg}");
    assert_eq!(
        svg.matches("stroke-dasharray").count(),
        2,
        "a target line each"
    );
    assert!(svg.contains("e2e &lt;bench&gt;") && svg.contains("(commit abc) &amp; co"));
    assert!(svg.contains("120,000 items/s"), "{svg}");
    assert!(
        svg.contains("drain (target &gt;= 100,000 items/s)"),
        "{svg}"
    );

    let machine = report::machine();
    assert!(machine.contains(" cores"), "{machine}");
    let missing = report::binary_version(std::path::Path::new("/nonexistent/mbx-relay"));
    assert!(missing.ends_with("(version unknown)"), "{missing}");
}
