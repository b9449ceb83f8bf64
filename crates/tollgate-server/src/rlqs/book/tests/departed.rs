//! A stream that ends while its Envoy lives on with its last assignment: the share stays reserved, and paid, until that assignment's time to live runs out.

use super::*;

/// An Envoy's stream, and the share it received last.
type Envoy = ((StreamId, Outbox), u64);

/// Two Envoys on `book`, each at 200 a second from its report at 5 s: 49 each of 98.
fn both_at_49(book: &QuotaBook) -> (Envoy, Envoy) {
    let rules = rules();
    let ((one, mut rx1), (two, mut rx2)) = (stream(book), stream(book));
    let (mut r1, mut r2) = (0, 0);
    paid(book, one, report("a", 1, 0), &rules, at(0));
    paid(book, two, report("a", 1, 0), &rules, at(0));
    round_in_full(book, at(1));
    paid(book, one, report("a", 1_000, 0), &rules, at(5));
    paid(book, two, report("a", 1_000, 0), &rules, at(5));
    round_in_full(book, at(5));
    assert_eq!((rate(&mut rx1, &mut r1), rate(&mut rx2, &mut r2)), (49, 49));
    (((one, rx1), r1), ((two, rx2), r2))
}

#[test]
fn a_departed_envoys_share_stays_reserved_until_its_last_assignment_lapses() {
    let book = QuotaBook::new(ttl_30s());
    // The second one's last answer goes at 5 s.
    let (((_, mut rx1), mut r1), ((two, _rx2), _)) = both_at_49(&book);
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

/// Each assignment a response carries, drained: its token bucket's
/// `tokens_per_fill` (0 for a blanket rule) and its time to live in seconds.
fn carried(rx: &mut Outbox) -> Vec<(u64, i64)> {
    let mut actions = Vec::new();
    while let Ok(Ok(response)) = rx.try_recv() {
        for action in response.bucket_action {
            let Some(Action::QuotaAssignmentAction(a)) = action.bucket_action else {
                continue;
            };
            let rate = match a.rate_limit_strategy.and_then(|s| s.strategy) {
                Some(Strategy::TokenBucket(b)) => {
                    u64::from(b.tokens_per_fill.map_or(0, |v| v.value))
                }
                _ => 0,
            };
            actions.push((rate, a.assignment_time_to_live.map_or(0, |d| d.seconds)));
        }
    }
    actions
}

#[test]
fn every_round_renews_a_short_time_to_live_and_a_departed_share_goes_a_round_after_it_lapses() {
    let options = RlqsOptions {
        assignment_ttl: Duration::from_secs(3),
        ..RlqsOptions::default()
    };
    let book = QuotaBook::new(options);
    let (((_, mut rx1), _), ((two, mut rx2), _)) = both_at_49(&book);
    // No report for 5 s (Envoy 1.40's interval), a time to live of 3 s:
    // every round sends each stream its assignment again, unchanged (Envoy
    // carries an unchanged token bucket over with its tokens), so it never lapses.
    for second in 6..10 {
        round_in_full(&book, at(second));
        assert_eq!(carried(&mut rx1), [(49, 3)], "second {second}");
        assert_eq!(carried(&mut rx2), [(49, 3)], "second {second}");
    }
    // The second stream ends at 9.5 s, renewed last at 9 s: its share stays
    // reserved until 9 s + 3 s and a round, then goes to the first.
    pay_in_full(
        &book,
        book.close(two, at(9).saturating_add(Duration::from_millis(500))),
    );
    for second in 10..13 {
        let dues = book.dues(at(second), TICK);
        assert_eq!(dues.payments[0].units, 98, "second {second}");
        let taken: Vec<u64> = dues.payments.iter().map(|p| p.units).collect();
        pay_in_full(&book, book.settle(dues, &taken));
        assert_eq!(carried(&mut rx1), [(49, 3)], "second {second}");
    }
    round_in_full(&book, at(13));
    assert_eq!(carried(&mut rx1), [(98, 3)]);
    assert_eq!(book.stats().buckets.load(Ordering::Relaxed), 1);
    assert_eq!(book.stats().shares_cut.load(Ordering::Relaxed), 0);
}

#[test]
fn a_long_time_to_live_is_renewed_only_when_two_rounds_and_a_half_remain() {
    use super::super::renewal::renewal_due;
    let ttl = Duration::from_secs(30);
    assert!(!renewal_due(at(0), ttl, at(27), TICK));
    assert!(renewal_due(at(0), ttl, at(28), TICK));
    // A time to live of three ticks or less: every round.
    let short = Duration::from_secs(3);
    assert!(renewal_due(at(0), short, at(1), TICK));
}
