//! The migration runner, attacked as an ordinary hostile user on a real pair:
//! two runners at once without the sidecar, passwords with URL characters
//! (never in any output), a history table edited by hand or owned by
//! another tool, and the person's tools (`status`, `resolve`, `diagnose`)
//! used where they do not apply. Pure logic (names, splitting,
//! classification, plan) is attacked by the unit tests in migrate/.
//!
//! Both flavors: runs on MariaDB 10.11 and on MySQL 9.7 (hack/e2e.sh, E2E_FLAVORS).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use std::time::Duration;

use bloodraven_e2e::SitePair;
use bloodraven_e2e::migrate::{AppDb, Revisions, Run, exit};

const T: Duration = Duration::from_secs(120);

/// `bloodraven-migrate ARGS` to its end: (exit code, all output).
async fn run_to_end(revs: &Revisions, args: &[&str]) -> (i32, String) {
    Run::to_end(revs, args, T).await
}

#[tokio::test]
async fn two_runners_at_once_without_the_sidecar_apply_a_dml_revision_once() {
    let pair = SitePair::start("mg-att-two");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-att-two");
    revs.add(1, "bump", "UPDATE orders SET v = v + 10 WHERE id = 1;\nSELECT SLEEP(3);");
    let mut first = Run::apply(&revs, &db.url, &[]);
    // The second starts while the first is inside V1 (its transaction open, history not yet written).
    db.wait_running("migrator", "SLEEP", T).await;
    let mut second = Run::apply(&revs, &db.url, &[]);
    assert_eq!(first.wait(T).await, 0, "{}", first.log());
    assert_eq!(second.wait(T).await, 0, "{}", second.log());
    assert_eq!(db.value("SELECT v FROM app.orders WHERE id = 1"), "11", "V1 applied once, not twice");
    assert_eq!(db.history(1), "applied 0 1");
    // The row spans the revision's run (its SLEEP(3)), not only its commit.
    let ran = db.value("SELECT TIMESTAMPDIFF(MICROSECOND, started_at, finished_at) FROM app.bloodraven_schema_history WHERE version = 1");
    assert!(ran.trim().parse::<i64>().unwrap() >= 2_900_000, "started_at to finished_at: {ran} µs");
    let log = second.log();
    assert!(log.contains("another bloodraven-migrate run holds this schema's run lock"), "{log}");
    assert_eq!(second.count("revision V1 starting"), 0, "the second found V1 applied:\n{log}");
}

#[tokio::test]
async fn a_password_with_url_characters_never_appears_in_any_output() {
    let pair = SitePair::start("mg-att-pw");
    let db = AppDb::create(&pair, false);
    let (host, port) = (&pair.iad_host, pair.iad_port);
    let pw = "p@ss:w/rd#%Secr3t";
    pair.sql(
        "iad",
        &format!(
            "CREATE USER 'odd'@'{host}' IDENTIFIED BY '{pw}'; GRANT ALL ON app.* TO 'odd'@'{host}'; \
             GRANT PROCESS ON *.* TO 'odd'@'{host}';"
        ),
    );
    let revs = Revisions::new("mg-att-pw");
    revs.add(1, "bump", "UPDATE orders SET v = v + 1 WHERE id = 1;");
    let dir = revs.dir.to_str().unwrap().to_owned();
    let file = revs.dir.join("pw");
    std::fs::write(&file, format!("{pw}\n")).unwrap();
    let bare = format!("mysql://odd@{host}:{port}/app");
    let encoded = format!("mysql://odd:p@ss:w%2Frd%23%25Secr3t@{host}:{port}/app");
    let raw = format!("mysql://odd:{pw}@{host}:{port}/app");
    let wrong = format!("mysql://odd:p@ss:w%2Frd%23%25Secr3tx@{host}:{port}/app");
    let file = file.to_str().unwrap().to_owned();
    let mut outputs = Vec::new();
    // The password from a file: applied.
    let (code, out) =
        run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &bare, "--password-file", &file]).await;
    assert_eq!(code, 0, "{out}");
    outputs.push(out);
    // Percent-encoded in the URL: the same account.
    for cmd in [&["status", "--dir", &dir, "--database-url", &encoded][..], &["diagnose", "--database-url", &encoded]] {
        let (code, out) = run_to_end(&revs, cmd).await;
        assert_eq!(code, 0, "{cmd:?}: {out}");
        outputs.push(out);
    }
    // Unencoded: refused before connecting, saying how to write it.
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &raw]).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("percent-encoded"), "{out}");
    outputs.push(out);
    // A wrong password: the server's refusal, not the password.
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &wrong]).await;
    assert_eq!(code, exit::FAILED, "{out}");
    assert!(out.contains("Access denied"), "{out}");
    outputs.push(out);
    assert_eq!(db.value("SELECT v FROM app.orders WHERE id = 1"), "2");
    for out in &outputs {
        for piece in ["p@ss", "w/rd", "rd#", "%2Frd", "Secr3t", "ss:w"] {
            assert!(!out.contains(piece), "`{piece}` of the password in the output:\n{out}");
        }
    }
}

#[tokio::test]
async fn a_history_row_in_a_state_no_runner_writes_is_refused_by_name() {
    let pair = SitePair::start("mg-att-state");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-att-state");
    revs.add(1, "bump", "UPDATE orders SET v = v + 1 WHERE id = 1;");
    let mut first = Run::apply(&revs, &db.url, &[]);
    assert_eq!(first.wait(T).await, 0, "{}", first.log());
    pair.sql("iad", "UPDATE app.bloodraven_schema_history SET state = 'done' WHERE version = 1");
    revs.add(2, "bump_again", "UPDATE orders SET v = v + 1 WHERE id = 1;");
    let dir = revs.dir.to_str().unwrap().to_owned();
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, exit::REFUSED, "{out}");
    assert!(out.contains("V1") && out.contains("`done`"), "names the row and its state: {out}");
    assert_eq!(db.value("SELECT v FROM app.orders WHERE id = 1"), "2", "nothing applied past it");
    // status shows the row as stored, and that apply would refuse.
    let (code, out) = run_to_end(&revs, &["status", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, exit::REFUSED, "{out}");
    assert!(out.lines().any(|l| l.starts_with("V1") && l.contains("done")), "{out}");
    // ... and still lists what is pending, and marks a changed file.
    assert!(out.lines().any(|l| l.starts_with("V2") && l.contains("pending")), "{out}");
    let v1 = std::fs::read_dir(&revs.dir)
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with("V1__"))
        .unwrap()
        .path();
    let original = std::fs::read_to_string(&v1).unwrap();
    std::fs::write(&v1, format!("{original}\n-- edited after it was applied\n")).unwrap();
    let (code, out) = run_to_end(&revs, &["status", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, exit::REFUSED, "{out}");
    assert!(out.lines().any(|l| l.starts_with("V1 changed")), "{out}");
    std::fs::write(&v1, original).unwrap();
    // A person settles it with resolve, like a dirty row.
    let (code, out) = run_to_end(&revs, &["resolve", "1", "--applied", "--database-url", &db.url]).await;
    assert_eq!(code, 0, "{out}");
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(db.value("SELECT v FROM app.orders WHERE id = 1"), "3");
}

#[tokio::test]
async fn a_history_table_of_another_tool_or_layout_is_refused_and_nothing_runs() {
    let pair = SitePair::start("mg-att-foreign");
    let db = AppDb::create(&pair, false);
    pair.sql(
        "iad",
        "CREATE TABLE app.bloodraven_schema_history (installed_rank INT PRIMARY KEY, version VARCHAR(50), \
         script VARCHAR(1000), success TINYINT(1)) ENGINE=InnoDB; \
         INSERT INTO app.bloodraven_schema_history VALUES (1, '1', 'V1__x.sql', 1)",
    );
    let revs = Revisions::new("mg-att-foreign");
    revs.add(1, "bump", "UPDATE orders SET v = v + 1 WHERE id = 1;");
    let dir = revs.dir.to_str().unwrap().to_owned();
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, exit::REFUSED, "{out}");
    assert!(out.contains("bloodraven_schema_history") && out.contains("not this runner's"), "{out}");
    assert_eq!(db.value("SELECT v FROM app.orders WHERE id = 1"), "1", "nothing ran");
    assert_eq!(db.value("SELECT COUNT(*) FROM app.bloodraven_schema_history"), "1", "the table is left as it was");
}

#[tokio::test]
async fn the_tools_where_they_do_not_apply_say_so() {
    let pair = SitePair::start("mg-att-tools");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-att-tools");
    revs.add(1, "bump", "UPDATE orders SET v = v + 1 WHERE id = 1;");
    let dir = revs.dir.to_str().unwrap().to_owned();
    // status on a schema never migrated: V1 pending, and nothing created.
    let (code, out) = run_to_end(&revs, &["status", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.lines().any(|l| l.starts_with("V1") && l.contains("pending")), "{out}");
    assert_eq!(
        db.value("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'app' AND TABLE_NAME = 'bloodraven_schema_history'"),
        "0",
        "status only reads"
    );
    // resolve of an unknown version, then of an applied one: refused, saying why.
    let (code, out) = run_to_end(&revs, &["resolve", "7", "--applied", "--database-url", &db.url]).await;
    assert_eq!(code, exit::REFUSED, "{out}");
    assert!(out.contains("no history row"), "{out}");
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, 0, "{out}");
    let (code, out) = run_to_end(&revs, &["resolve", "V1", "--rolled-back", "--database-url", &db.url]).await;
    assert_eq!(code, exit::REFUSED, "{out}");
    assert!(out.contains("applied, not dirty"), "{out}");
    assert_eq!(db.history(1), "applied 0 1", "untouched");
    // diagnose with an account that lacks PROCESS: says what it needs.
    let (code, out) = run_to_end(&revs, &["diagnose", "--database-url", &db.app_url]).await;
    assert_eq!(code, exit::FAILED, "{out}");
    assert!(out.contains("PROCESS"), "{out}");
}

#[tokio::test]
async fn a_stop_before_any_ddl_was_sent_leaves_nothing_to_resolve() {
    let pair = SitePair::start("mg-att-unsent");
    let db = AppDb::create(&pair, true);
    let revs = Revisions::new("mg-att-unsent");
    revs.add(1, "add_z", "ALTER TABLE orders ADD COLUMN z INT;");
    // An idle transaction that read orders holds its metadata lock: the pre-flight look sees it.
    let mut app = db.app().await;
    bloodraven_e2e::migrate::exec(&mut app, "BEGIN").await;
    bloodraven_e2e::migrate::exec(&mut app, "SELECT * FROM orders").await;
    let mut run = Run::apply(&revs, &db.url, &["--on-blocker", "wait", "--lock-timeout", "60"]);
    run.wait_lines("possible blocker before DDL", 1, T).await;
    // A person's Ctrl-C, a pipeline's timeout: stopped while waiting, before the ALTER was sent.
    run.terminate();
    assert_eq!(run.wait(T).await, exit::FENCED, "{}", run.log());
    assert!(run.log().contains("nothing to resolve"), "{}", run.log());
    assert_eq!(db.history(1), "", "not dirty: nothing of V1 was sent");
    assert_eq!(
        db.value("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'app' AND TABLE_NAME = 'orders' AND COLUMN_NAME = 'z'"),
        "0"
    );
    bloodraven_e2e::migrate::exec(&mut app, "COMMIT").await;
    let dir = revs.dir.to_str().unwrap().to_owned();
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, 0, "the next run needs no resolve: {out}");
    assert_eq!(db.history(1), "applied 1 1");
}

#[tokio::test]
async fn a_stop_while_waiting_for_another_run_or_in_a_backoff_records_nothing() {
    let pair = SitePair::start("mg-att-stops");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-att-stops");
    revs.add(1, "bump", "UPDATE orders SET v = v + 10 WHERE id = 1;\nSELECT SLEEP(4);");
    let mut first = Run::apply(&revs, &db.url, &[]);
    db.wait_running("migrator", "SLEEP", T).await;
    // Stopped while waiting on the run lock: ends at once, the first run is untouched.
    let mut waiting = Run::apply(&revs, &db.url, &[]);
    waiting.wait_lines("holds this schema's run lock", 1, T).await;
    waiting.terminate();
    assert_eq!(waiting.wait(Duration::from_secs(10)).await, exit::FENCED, "{}", waiting.log());
    assert_eq!(first.wait(T).await, 0, "{}", first.log());
    assert_eq!(db.value("SELECT v FROM app.orders WHERE id = 1"), "11");
    // Stopped in a backoff after lock contention: the DML revision leaves nothing.
    revs.add(2, "bump_again", "UPDATE orders SET v = v + 10 WHERE id = 2;");
    let mut app = db.app().await;
    bloodraven_e2e::migrate::exec(&mut app, "BEGIN").await;
    bloodraven_e2e::migrate::exec(&mut app, "UPDATE orders SET w = 1 WHERE id = 2").await;
    let mut run =
        Run::apply(&revs, &db.url, &["--lock-timeout", "1", "--retry-min-seconds", "30", "--retry-max-seconds", "30"]);
    run.wait_lines("retrying in", 1, T).await;
    run.terminate();
    assert_eq!(run.wait(Duration::from_secs(10)).await, exit::FENCED, "{}", run.log());
    bloodraven_e2e::migrate::exec(&mut app, "ROLLBACK").await;
    assert_eq!(db.value("SELECT v FROM app.orders WHERE id = 2"), "2");
    assert_eq!(db.history(2), "");
}

#[tokio::test]
async fn a_revision_described_outside_latin1_is_recorded() {
    let pair = SitePair::start("mg-att-utf8");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-att-utf8");
    revs.add(1, "добавить_колонку_🚀", "ALTER TABLE orders ADD COLUMN note VARCHAR(20);");
    revs.add(2, "заполнить", "UPDATE orders SET note = 'é' WHERE id = 1;");
    let dir = revs.dir.to_str().unwrap().to_owned();
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(db.history(1), "applied 1 1");
    assert_eq!(db.history(2), "applied 0 1");
    let (code, out) = run_to_end(&revs, &["status", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("добавить колонку 🚀"), "the description as written: {out}");
}

#[tokio::test]
async fn a_statement_larger_than_the_server_takes_is_refused_before_anything_runs() {
    let pair = SitePair::start("mg-att-big");
    let db = AppDb::create(&pair, false);
    pair.sql("iad", "SET GLOBAL max_allowed_packet = 1048576");
    let revs = Revisions::new("mg-att-big");
    revs.add(1, "table", "CREATE TABLE big (id INT PRIMARY KEY, b LONGTEXT) ENGINE=InnoDB;");
    let blob = "x".repeat(3 << 20);
    revs.add(2, "fill", &format!("UPDATE orders SET v = 5 WHERE id = 1;\nINSERT INTO big VALUES (1, '{blob}');"));
    let dir = revs.dir.to_str().unwrap().to_owned();
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, 2, "{}", &out[..out.len().min(4000)]);
    assert!(out.contains("max_allowed_packet") && out.contains("V2__fill.sql"), "{}", &out[..out.len().min(4000)]);
    assert_eq!(db.history(1), "", "nothing ran, V1 included");
    assert_eq!(db.value("SELECT v FROM app.orders WHERE id = 1"), "1");
}

#[tokio::test]
async fn an_edited_a_removed_and_a_lower_revision_and_an_empty_directory() {
    let pair = SitePair::start("mg-att-edits");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-att-edits");
    let dir = revs.dir.to_str().unwrap().to_owned();
    let apply = ["apply", "--dir", dir.as_str(), "--database-url", db.url.as_str()];
    // An empty directory (a wrong --dir, a mount that came up empty) is not "nothing pending".
    let (code, out) = run_to_end(&revs, &apply).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("no revision in the directory"), "{out}");
    revs.add(2, "two", "-- two\nUPDATE orders SET v = v + 1 WHERE id = 1;\n");
    revs.add(3, "three", "UPDATE orders SET v = v + 1 WHERE id = 2;");
    let (code, out) = run_to_end(&revs, &apply).await;
    assert_eq!(code, 0, "{out}");
    // Edited after it was applied: refused, nothing runs.
    let v2 = revs.dir.join("V2__two.sql");
    std::fs::write(&v2, "UPDATE orders SET v = v + 100 WHERE id = 1;").unwrap();
    revs.add(4, "four", "UPDATE orders SET w = 4;");
    let (code, out) = run_to_end(&revs, &apply).await;
    assert_eq!(code, exit::REFUSED, "{out}");
    assert!(out.contains("V2") && out.contains("must not change"), "{out}");
    // Restored with CRLF line endings (a Windows checkout): the same revision.
    std::fs::write(&v2, "-- two\r\nUPDATE orders SET v = v + 1 WHERE id = 1;\r\n").unwrap();
    // A new revision below the applied ones: refused as out of order.
    revs.add(1, "one", "UPDATE orders SET w = 1;");
    let (code, out) = run_to_end(&revs, &apply).await;
    assert_eq!(code, exit::REFUSED, "{out}");
    assert!(out.contains("renumber it above V3"), "{out}");
    // Removed after it was applied (an older directory): a warning, the rest goes on.
    std::fs::remove_file(revs.dir.join("V1__one.sql")).unwrap();
    std::fs::remove_file(revs.dir.join("V3__three.sql")).unwrap();
    let (code, out) = run_to_end(&revs, &apply).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("applied revision V3 has no file"), "{out}");
    assert_eq!(db.value("SELECT GROUP_CONCAT(CONCAT(v, ':', w) ORDER BY id) FROM app.orders"), "2:4,3:4");
    assert_eq!(db.history(4), "applied 0 1");
}

#[tokio::test]
async fn an_account_without_process_still_applies_ddl_and_says_what_it_cannot_see() {
    let pair = SitePair::start("mg-att-noproc");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-att-noproc");
    revs.add(1, "add_z", "ALTER TABLE orders ADD COLUMN z INT;");
    let dir = revs.dir.to_str().unwrap().to_owned();
    // `appuser` has every privilege on the schema, but not PROCESS.
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.app_url]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("PROCESS"), "says why it cannot look for blockers: {out}");
    assert_eq!(db.history(1), "applied 1 1");
    // With --on-blocker fail a look it cannot make is a failure, before anything is sent.
    revs.add(2, "add_y", "ALTER TABLE orders ADD COLUMN y INT;");
    let (code, out) =
        run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.app_url, "--on-blocker", "fail"]).await;
    assert_eq!(code, exit::CONTENTION, "{out}");
    assert!(out.contains("PROCESS"), "{out}");
    assert_eq!(db.history(2), "");
}

#[tokio::test]
async fn a_session_setting_one_revision_changes_does_not_reach_the_next() {
    let pair = SitePair::start("mg-att-sess");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-att-sess");
    // A developer turns foreign-key checks off and forgets to turn them back on.
    revs.add(
        1,
        "loose",
        "SET foreign_key_checks = 0;\nSET time_zone = '+05:00';\nUPDATE orders SET v = 7 WHERE id = 1;",
    );
    revs.add(2, "reads", "UPDATE orders SET w = @@SESSION.foreign_key_checks WHERE id = 1;\nUPDATE orders SET w = (@@SESSION.time_zone = '+05:00') WHERE id = 2;");
    let dir = revs.dir.to_str().unwrap().to_owned();
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, 0, "{out}");
    // V2 runs as it would in a run of its own: checks on, the server's time zone.
    assert_eq!(db.value("SELECT GROUP_CONCAT(CONCAT(v, ':', w) ORDER BY id) FROM app.orders"), "7:1,2:0");
    assert!(out.contains("set back session settings"), "{out}");
}

#[tokio::test]
async fn a_backslash_under_no_backslash_escapes_is_refused_before_anything_runs() {
    let pair = SitePair::start("mg-att-nobs");
    let db = AppDb::create(&pair, false);
    pair.sql("iad", "SET GLOBAL sql_mode = 'NO_BACKSLASH_ESCAPES'");
    let revs = Revisions::new("mg-att-nobs");
    revs.add(1, "plain", "UPDATE orders SET v = 5 WHERE id = 1;");
    // Under NO_BACKSLASH_ESCAPES 'C:\' is a whole string: the ALTER is a statement of its own to the
    // server, but the splitter would read one UPDATE (DML) running to the end of the file.
    revs.add(
        2,
        "path",
        "UPDATE orders SET v = 6 WHERE id = 2 AND 'C:\\' = 'C:\\';\nALTER TABLE orders ADD COLUMN q INT;\n",
    );
    let dir = revs.dir.to_str().unwrap().to_owned();
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("NO_BACKSLASH_ESCAPES") && out.contains("V2__path.sql"), "{out}");
    assert_eq!(db.history(1), "", "nothing ran, V1 included");
    assert_eq!(db.value("SELECT GROUP_CONCAT(v ORDER BY id) FROM app.orders"), "1,2");
}

#[tokio::test]
async fn a_password_inside_a_failing_revision_is_not_echoed_by_the_servers_message() {
    let pair = SitePair::start("mg-att-echo");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-att-echo");
    // A syntax error: the server's message quotes the statement near it, password included.
    revs.add(1, "user", "CREATE USER 'reporting'@'%' GARBAGE IDENTIFIED BY 'hunter2-secret';");
    let dir = revs.dir.to_str().unwrap().to_owned();
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, exit::FAILED, "{out}");
    assert!(out.contains("1064") && out.contains("redacted"), "{out}");
    assert!(!out.contains("hunter2"), "{out}");
}

#[tokio::test]
async fn resolve_while_a_run_holds_the_schema_is_refused() {
    let pair = SitePair::start("mg-att-resrun");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-att-resrun");
    // A DDL revision in flight: its row is `started` because it is running, not because it is dirty.
    revs.add(1, "slow_ddl", "ALTER TABLE orders ADD COLUMN z INT;\nSELECT SLEEP(4);");
    let mut run = Run::apply(&revs, &db.url, &[]);
    db.wait_running("migrator", "SLEEP", T).await;
    assert_eq!(db.history(1), "started 1 1");
    let (code, out) = run_to_end(&revs, &["resolve", "1", "--rolled-back", "--database-url", &db.url]).await;
    assert_eq!(code, exit::REFUSED, "{out}");
    assert!(out.contains("right now"), "{out}");
    assert_eq!(run.wait(T).await, 0, "{}", run.log());
    assert_eq!(db.history(1), "applied 1 1", "the run's outcome stands");
}

/// A runner killed mid-statement leaves its statement running on the
/// server, and that session keeps the run lock: the next run names it as a
/// likely orphan of a dead run with the `KILL` that ends it (said once, not
/// at every try), and goes on once it is killed.
#[tokio::test]
async fn an_orphaned_statement_holding_the_run_lock_is_named_with_its_kill() {
    let pair = SitePair::start("mg-att-orphan");
    let db = AppDb::create(&pair, false);
    // The revision waits on a lock the test holds, so the orphan runs for
    // as long as the test needs it to, and the rerun is quick.
    let mut holder = db.app().await;
    bloodraven_e2e::migrate::exec(&mut holder, "DO GET_LOCK('orphan-block', 0)").await;
    let revs = Revisions::new("mg-att-orphan");
    revs.add(1, "slow", "UPDATE orders SET v = v + 1 WHERE id = 1;\nSELECT GET_LOCK('orphan-block', 120);");
    let mut first = Run::apply(&revs, &db.url, &[]);
    let orphan = db.wait_running("migrator", "GET_LOCK", T).await;
    first.kill9().await;
    let mut second = Run::apply(&revs, &db.url, &[]);
    second.wait_lines("holds this schema's run lock", 1, T).await;
    tokio::time::sleep(Duration::from_secs(11)).await;
    let log = second.log();
    assert!(
        log.contains(&format!("connection {orphan}, your account")) && log.contains(&format!("KILL {orphan}")),
        "{log}"
    );
    assert!(log.contains("statement of a dead run"), "{log}");
    assert_eq!(second.count("holds this schema's run lock"), 1, "said once in the first minute:\n{log}");
    // MariaDB may notice the dead client itself in the meantime and end
    // the orphan's wait: then there is nothing left to kill (1094).
    if let Err(e) = pair.try_sql("iad", &format!("KILL {orphan}")) {
        assert!(e.contains("1094"), "{e}");
    }
    bloodraven_e2e::migrate::exec(&mut holder, "DO RELEASE_LOCK('orphan-block')").await;
    assert_eq!(second.wait(T).await, 0, "{}", second.log());
}

/// The migration account's password, from its URL (`mysql://migrator:PW@…`).
fn password_of(url: &str) -> String {
    let userinfo = url.split_once("://").unwrap().1.rsplit_once('@').unwrap().0;
    userinfo.split_once(':').unwrap().1.to_owned()
}

#[tokio::test]
async fn a_revision_linked_out_of_the_directory_is_refused_and_the_password_is_never_printed() {
    let pair = SitePair::start("mg-att-link");
    let db = AppDb::create(&pair, false);
    let pw = password_of(&db.url);
    // The mounted Secrets, outside the revision directory (as in a Pod).
    let secrets = Revisions::new("mg-att-link-secrets");
    let url_file = secrets.dir.join("url");
    let pw_file = secrets.dir.join("password");
    std::fs::write(&url_file, format!("{}\n", db.url)).unwrap();
    std::fs::write(&pw_file, format!("{pw}\n")).unwrap();
    let (url_file, pw_file) = (url_file.to_str().unwrap().to_owned(), pw_file.to_str().unwrap().to_owned());
    let revs = Revisions::new("mg-att-link");
    revs.add(1, "bump", "UPDATE orders SET v = v + 1 WHERE id = 1;");
    let dir = revs.dir.to_str().unwrap().to_owned();
    let apply =
        ["apply", "--dir", dir.as_str(), "--database-url-file", url_file.as_str(), "--password-file", pw_file.as_str()];
    let mut outputs = Vec::new();
    // A symlink to either secret file: refused before anything runs, naming the file.
    for (name, target) in [("V2__pw.sql", &pw_file), ("V2__url.sql", &url_file)] {
        std::os::unix::fs::symlink(target, revs.dir.join(name)).unwrap();
        for args in [&apply[..], &["status", "--dir", &dir, "--database-url-file", &url_file]] {
            let (code, out) = run_to_end(&revs, args).await;
            assert_eq!(code, 2, "{args:?}: {out}");
            assert!(out.contains(name) && out.contains("outside the revision directory"), "{out}");
            outputs.push(out);
        }
        std::fs::remove_file(revs.dir.join(name)).unwrap();
    }
    assert_eq!(db.history(1), "", "nothing ran, V1 included");
    assert_eq!(db.value("SELECT v FROM app.orders WHERE id = 1"), "1");
    // A link that stays inside the directory is read as its file (a ConfigMap volume is such links).
    std::fs::create_dir(revs.dir.join("..data")).unwrap();
    std::fs::write(revs.dir.join("..data/V2__inside.sql"), "UPDATE orders SET v = v + 1 WHERE id = 2;").unwrap();
    std::os::unix::fs::symlink("..data/V2__inside.sql", revs.dir.join("V2__inside.sql")).unwrap();
    let (code, out) = run_to_end(&revs, &apply).await;
    assert_eq!(code, 0, "{out}");
    outputs.push(out);
    assert_eq!(db.history(2), "applied 0 1");
    // A hard link cannot be told from a file: sent, the server quotes it
    // back near its syntax error — and the runner redacts it.
    for (v, name, target) in [(3, "V3__hard_pw.sql", &pw_file), (3, "V3__hard_url.sql", &url_file)] {
        std::fs::hard_link(target, revs.dir.join(name)).unwrap();
        let (code, out) = run_to_end(&revs, &apply).await;
        assert_eq!(code, exit::FAILED, "{out}");
        assert!(out.contains("ERROR 1064") && out.contains("(redacted)"), "the server's error, redacted: {out}");
        assert_eq!(db.history(v), "", "a failure on the first statement leaves no row");
        outputs.push(out);
        std::fs::remove_file(revs.dir.join(name)).unwrap();
    }
    for out in &outputs {
        assert!(!out.contains(&pw), "the password in the output:\n{out}");
        // (Its start is the account's name, which the log shows as user@host.)
        for piece in [&pw[pw.len() - 6..], &pw[pw.len() - 9..pw.len() - 3]] {
            assert!(!out.contains(piece), "`{piece}` of the password in the output:\n{out}");
        }
    }
}

#[tokio::test]
async fn a_revision_name_with_a_newline_is_refused_escaped_and_forges_no_log_line() {
    let pair = SitePair::start("mg-att-name");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-att-name");
    revs.add(1, "bump", "UPDATE orders SET v = v + 1 WHERE id = 1;");
    let forged = "1999-01-01T00:00:00.000000Z  INFO bloodraven_migrate: done: every pending revision applied";
    let evil = format!("V2__x\n{forged}.sql");
    std::fs::write(revs.dir.join(&evil), "UPDATE orders SET v = v + 1 WHERE id = 2;").unwrap();
    let dir = revs.dir.to_str().unwrap().to_owned();
    for args in [
        &["apply", "--dir", &dir, "--database-url", &db.url][..],
        &["apply", "--dir", &dir, "--database-url", &db.url, "--log-format", "json"],
        &["status", "--dir", &dir, "--database-url", &db.url],
    ] {
        let (code, out) = run_to_end(&revs, args).await;
        assert_eq!(code, 2, "{args:?}: {out}");
        assert!(!out.lines().any(|l| l.starts_with("1999-01-01")), "a forged line:\n{out}");
        // JSON lines decoded: the text a log reader shows.
        let shown = if args.contains(&"json") {
            out.lines()
                .map(|line| {
                    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
                    let fields = v.as_object().unwrap().values().filter_map(serde_json::Value::as_str);
                    fields.collect::<Vec<_>>().join(" ")
                })
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            out.clone()
        };
        assert!(shown.contains("V2__x\\n1999-01-01T00:00:00.000000Z"), "the name, escaped: {shown}");
        assert!(shown.contains("control or invisible formatting character"), "{shown}");
    }
    assert_eq!(db.history(1), "", "nothing ran");
    // Text a person wrote into the history by hand is printed escaped too.
    std::fs::remove_file(revs.dir.join(&evil)).unwrap();
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, 0, "{out}");
    pair.sql(
        "iad",
        "UPDATE app.bloodraven_schema_history SET description = CONCAT('bump', CHAR(10), 'V9       applied  ', CHAR(27), '[2J') WHERE version = 1",
    );
    let (code, out) = run_to_end(&revs, &["status", "--dir", &dir, "--database-url", &db.url]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("bump\\nV9       applied  \\u{1b}[2J"), "{out}");
    assert!(!out.lines().any(|l| l.starts_with("V9")) && !out.contains('\x1b'), "{out}");
}

#[tokio::test]
async fn an_oversized_revision_is_refused_before_it_is_read() {
    let pair = SitePair::start("mg-att-size");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-att-size");
    revs.add(1, "bump", "UPDATE orders SET v = v + 1 WHERE id = 1;");
    // 200 MB by its metadata, sparse on disk: read, it would take 200 MB of the runner's memory.
    let big = revs.dir.join("V2__dump.sql");
    let made = std::process::Command::new("truncate").args(["-s", "200M"]).arg(&big).status().unwrap();
    assert!(made.success());
    let dir = revs.dir.to_str().unwrap().to_owned();
    let started = std::time::Instant::now();
    let (code, out) = run_to_end(&revs, &["apply", "--dir", &dir, "--database-url", &db.url]).await;
    let took = started.elapsed();
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("V2__dump.sql: is 209715200 bytes, more than a revision may be (16777216 bytes)"),
        "refused by its size, before its text was read (which would fail otherwise: NUL bytes, no statement): {out}"
    );
    eprintln!("figure: 200 MB revision refused in {took:?}");
    assert_eq!(db.history(1), "", "nothing ran, V1 included");
    assert_eq!(
        db.value("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'app' AND TABLE_NAME = 'bloodraven_schema_history'"),
        "0"
    );
}

#[tokio::test]
async fn apply_that_requires_the_lease_refuses_without_a_sidecar_and_touches_nothing() {
    let pair = SitePair::start("mg-att-lease");
    let db = AppDb::create(&pair, false);
    let revs = Revisions::new("mg-att-lease");
    revs.add(1, "orders_note", "ALTER TABLE orders ADD COLUMN note INT;");
    let url_file = revs.dir.join("url");
    std::fs::write(&url_file, &db.url).unwrap();
    let dir = revs.dir.to_str().unwrap().to_owned();
    // The chart's migration container, run with no sidecar socket: its environment only.
    let chart_env = [
        ("BLOODRAVEN_DB_URL_FILE", url_file.to_str().unwrap()),
        ("BLOODRAVEN_MIGRATION_DIR", dir.as_str()),
        ("BLOODRAVEN_MIGRATION_REQUIRE_LEASE", "true"),
    ];
    let mut run = Run::start(&revs, &["apply"], &chart_env);
    let code = run.wait(T).await;
    let out = run.log();
    assert_eq!(code, exit::NO_LEASE, "{out}");
    assert!(out.contains("refusing to start") && out.contains("--require-lease"), "{out}");
    assert!(out.contains("no sidecar socket") && out.contains("Nothing was touched"), "{out}");
    assert!(!out.contains("starting alone") && !out.contains("session open"), "never connected: {out}");
    let history_tables = "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'app' \
                          AND TABLE_NAME = 'bloodraven_schema_history'";
    assert_eq!(db.value(history_tables), "0", "no history table created");
    assert_eq!(
        db.value("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'app' AND TABLE_NAME = 'orders' AND COLUMN_NAME = 'note'"),
        "0",
        "nothing applied"
    );
    // The same run by a person at a terminal (the variable unset): alone, applied.
    let mut run = Run::start(&revs, &["apply"], &chart_env[..2]);
    assert_eq!(run.wait(T).await, 0, "{}", run.log());
    assert!(run.log().contains("starting alone"), "{}", run.log());
    assert_eq!(db.history(1), "applied 1 1");
}
