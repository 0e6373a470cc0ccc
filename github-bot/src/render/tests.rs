//! Tests of the comment texts' building blocks: numbers as people read them, and the hidden
//! markers. Not here: when a comment is posted or edited (the scenario tests in
//! `tests/scenarios/`).

use super::*;

#[test]
fn numbers_read_well() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(1234567), "1,234,567");
    assert_eq!(thousands(100), "100");
    assert_eq!(flops(1.5e15), "1.500e15");
    assert_eq!(duration(30.0), "30.0 s");
    assert_eq!(duration(90.0), "1.5 min");
    assert_eq!(duration(7200.0), "2.0 h");
}

#[test]
fn markers_open_the_bots_comments_once() {
    assert_eq!(comment_marker("validation"), VALIDATION_MARKER);
    let once = with_marker("result:run-1", "done");
    assert_eq!(once, "<!-- glassbox-bot: result:run-1 -->\ndone");
    assert_eq!(with_marker("result:run-1", &once), once);
    assert!(!once.contains(&comment_marker("result:run-10")));
}
