//! A demand flip read from the first reports after it: the Envoy whose demand fell is held to the rate after the fall, the one held back claims what is left.

use super::*;

#[test]
fn a_flip_moves_the_split_at_the_first_reports_after_it() {
    let (book, rules, [(one, mut rx1, mut r1), (two, mut rx2, mut r2)]) = two_started();
    // 250 a second at the first, held back (76 a second admitted, 174
    // refused), 20 at the second: 77 and 21 of 98.
    for round in 1..=3 {
        let now = at(5 * round);
        paid(&book, one, report("a", 76 * 5, 174 * 5), &rules, now);
        paid(&book, two, report("a", 20 * 5, 0), &rules, now);
        round_in_full(&book, now);
    }
    assert_eq!((rate(&mut rx1, &mut r1), rate(&mut rx2, &mut r2)), (77, 21));
    // The demands flip 2.5 s before the next reports. The first's report
    // averages 135 a second, but it stopped refusing 2.5 s ago: 20 a
    // second since. The second refused most of its requests: held back.
    paid(
        &book,
        one,
        report("a", 76 * 5 / 2 + 50, 174 * 5 / 2),
        &rules,
        at(20),
    );
    paid(&book, two, report("a", 50 + 55, 570), &rules, at(20));
    round_in_full(&book, at(20));
    assert_eq!(
        (rate(&mut rx1, &mut r1), rate(&mut rx2, &mut r2)),
        (21, 77),
        "the split after the flip, at its first reports"
    );
    assert_eq!(book.stats().shares_cut.load(Ordering::Relaxed), 0);
}

#[test]
fn refusals_before_a_first_share_are_not_hunger() {
    let (book, rules) = (QuotaBook::new(RlqsOptions::default()), rules());
    let ((one, mut rx1), (two, mut rx2)) = (stream(&book), stream(&book));
    let (mut r1, mut r2) = (0, 0);
    // The first reports find the counter spent: deny-all until a round
    // pays for their buckets (Envoy refuses their requests meanwhile).
    for id in [one, two] {
        unpaid(
            &book,
            book.report(id, report("a", 1, 0), &rules, at(0)).unwrap(),
        );
    }
    assert_eq!((rate(&mut rx1, &mut r1), rate(&mut rx2, &mut r2)), (0, 0));
    round_in_full(&book, at(1));
    // 10 a second at the second, its first second refused by the deny-all
    // (a fifth of its requests); 200 a second at the first.
    paid(&book, one, report("a", 49 * 5, 151 * 5), &rules, at(5));
    paid(&book, two, report("a", 40, 10), &rules, at(5));
    round_in_full(&book, at(5));
    assert_eq!(
        (rate(&mut rx1, &mut r1), rate(&mut rx2, &mut r2)),
        (87, 11),
        "the second claims its 10 a second, not the whole rate"
    );
}

/// Refusals over an interval in which the share moved (a cold start still
/// paying it in, a newcomer's arrival) come from the service's own changes,
/// not from a demand above the split: the report's average is the demand
/// (before, a fifth refused read as held back, and the Envoy claimed the
/// whole rate for a report interval: with two Envoys 1.40 starting
/// together, B at 10 a second was refused 13 of its first 50 and the split
/// stayed even until its next report, 5 s later).
#[test]
fn refusals_while_the_share_moved_are_not_hunger() {
    let (book, rules) = (QuotaBook::new(RlqsOptions::default()), rules());
    let ((one, _rx1), (two, _rx2), (three, _rx3)) = (stream(&book), stream(&book), stream(&book));
    paid(&book, one, report("a", 1, 0), &rules, at(0));
    paid(&book, two, report("a", 1, 0), &rules, at(0));
    // A third Envoy at 2 s: the shares in force fall to a third each.
    paid(&book, three, report("a", 1, 0), &rules, at(2));
    // The second shows 10 a second, a fifth of it refused.
    paid(&book, two, report("a", 40, 10), &rules, at(5));
    assert_eq!(envoy_claims(&book)[1], 11, "its demand and a twentieth");
    // Over an interval with one share in force, a fifth refused is hunger.
    paid(&book, two, report("a", 40, 10), &rules, at(10));
    assert_eq!(envoy_claims(&book)[1], 98, "held back: the whole rate");
}
