//! The unit tests of `hk parity`: each case judged, a plan read from `hk run`'s lines.

use super::*;

fn planned(expect: &str) -> Planned {
    serde_json::from_value(json!({
        "function": "remove-expired-members", "table": "members", "id": 7,
        "decision": "removed", "rule": "expired",
        "identity": {"user_id": 3}, "updated_at": null, "expect": expect, "watched": {}
    }))
    .unwrap()
}

#[test]
fn each_case_is_judged_by_presence_identity_and_updated_at() {
    let now: DateTime<Utc> = "2026-03-01T00:10:00Z".parse().unwrap();
    let row = |user: i64, at: &str| -> Map<String, Value> {
        serde_json::from_value(json!({"id": 7, "user_id": user, "updated_at": at})).unwrap()
    };
    let rule = TableRule {
        table: "members",
        identity: &["user_id"],
        watched: &[],
        read: &["expires_at"],
    };
    let early = row(3, "2026-02-01T00:00:00+00:00");
    let late = row(3, "2026-03-02T00:00:00+00:00");
    let other = row(4, "2026-02-01T00:00:00+00:00");
    let j = |e: &str, r: Option<&Map<String, Value>>| judge(&planned(e), &rule, r, now).0;
    assert_eq!(j("absent", None), Kind::Agreed);
    assert_eq!(j("present", None), Kind::Disagreed);
    assert_eq!(j("absent", Some(&early)), Kind::Disagreed);
    assert_eq!(j("absent", Some(&late)), Kind::ChangedMeanwhile);
    assert_eq!(j("present", Some(&late)), Kind::Agreed);
    assert_eq!(j("absent", Some(&other)), Kind::IdReused);
}

#[test]
fn a_plan_is_read_from_the_json_lines_of_hk_run() {
    let text =
        "{\"function\":\"x\"}\n{\"plan\":{\"now\":\"2026-03-01T00:10:00Z\",\"decisions\":[]}}\n";
    let p = PlanFile::parse(text).unwrap();
    assert_eq!(p.now.to_rfc3339(), "2026-03-01T00:10:00+00:00");
    assert!(PlanFile::parse("{\"function\":\"x\"}").is_err());
}
