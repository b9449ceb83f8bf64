//! A stream that ends while its Envoy lives on with its last assignment: the share stays reserved, and paid, until that assignment's time to live runs out.

use super::*;

#[test]
fn a_departed_envoys_share_stays_reserved_until_its_last_assignment_lapses() {
    let (book, rules) = (QuotaBook::new(RlqsOptions::default()), rules());
    let ((one, mut rx1), (two, mut rx2)) = (stream(&book), stream(&book));
    let (mut r1, mut r2) = (0, 0);
    paid(&book, one, report("a", 1, 0), &rules, at(0));
    paid(&book, two, report("a", 1, 0), &rules, at(0));
    round_in_full(&book, at(1));
    // Both at 200 a second: 49 each of 98. The second one's last answer goes at 5 s.
    paid(&book, one, report("a", 1_000, 0), &rules, at(5));
    paid(&book, two, report("a", 1_000, 0), &rules, at(5));
    round_in_full(&book, at(5));
    assert_eq!((rate(&mut rx1, &mut r1), rate(&mut rx2, &mut r2)), (49, 49));
    // Its stream ends at 6 s. Its Envoy may live on with 49 a second until
    // 5 s + the time to live (30 s) and a round: the first one stays at 49,
    // and every round still pays the 98 a second in force.
    pay_in_full(&book, book.close(two, at(6)));
    let lapses = 5 + 30 + 1;
    for second in 6..lapses {
        let dues = book.dues(at(second), TICK);
        assert_eq!(dues.payments[0].units, 98, "second {second}");
        let taken: Vec<u64> = dues.payments.iter().map(|p| p.units).collect();
        pay_in_full(&book, book.settle(dues, &taken));
        assert_eq!(rate(&mut rx1, &mut r1), 49, "second {second}");
        assert_eq!(book.stats().buckets.load(Ordering::Relaxed), 2);
    }
    // Lapsed: the share goes to the first one, its bucket leaves the bound.
    round_in_full(&book, at(lapses));
    assert_eq!(rate(&mut rx1, &mut r1), 98);
    assert_eq!(book.stats().buckets.load(Ordering::Relaxed), 1);
    assert_eq!(book.stats().shares_cut.load(Ordering::Relaxed), 0);
}
