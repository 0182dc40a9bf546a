use super::*;

#[test]
fn names_follow_flyway() {
    assert_eq!(parse_name("V1__init.sql").unwrap(), Some((1, "init".into())));
    assert_eq!(parse_name("V012__add_orders_index.sql").unwrap(), Some((12, "add orders index".into())));
    for ignored in ["README.md", "R__views.sql", "U1__undo.txt", "views.sql", "Vendor.txt"] {
        assert_eq!(parse_name(ignored).unwrap(), None, "{ignored}");
    }
    for bad in
        ["V1_init.sql", "V__init.sql", "V1.1__dotted.sql", "Vx__init.sql", "V1__.sql", "V99999999999999999999__big.sql"]
    {
        let e = parse_name(bad).unwrap_err().to_string();
        assert!(e.contains(bad) && e.contains("expected V<n>__"), "{e}");
    }
}

#[test]
fn checksum_is_sha256_of_the_bytes() {
    assert_eq!(checksum(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_ne!(checksum(b"SELECT 1;"), checksum(b"SELECT 1; "));
}

#[test]
fn splits_outside_quotes_and_comments() {
    let text = "-- a comment; not a statement\nCREATE TABLE t (a VARCHAR(10) DEFAULT 'x;y');\n\
                INSERT INTO t VALUES ('it\\'s;'), (\"q;\");  # trailing; comment\n\
                /* block; comment */ UPDATE `we;ird` SET a = 1;\n/* only a comment */;\n   \n\
                SELECT 1 -- no semicolon at the end";
    let got = split(text);
    assert_eq!(got.len(), 4, "{got:#?}");
    assert!(got[0].ends_with("DEFAULT 'x;y')"), "{}", got[0]);
    assert!(got[1].starts_with("INSERT") && got[1].contains("(\"q;\")"), "{}", got[1]);
    assert!(got[2].contains("`we;ird`"), "{}", got[2]);
    assert!(got[3].starts_with("SELECT 1"), "{}", got[3]);
}

#[test]
#[allow(clippy::type_complexity)] // a table of cases
fn classifies_ddl_and_dml_and_names_tables() {
    let table: Vec<(&str, Kind, Vec<(Option<&str>, &str)>)> = vec![
        ("ALTER TABLE orders ADD COLUMN x INT", Kind::Ddl, vec![(None, "orders")]),
        ("alter online table `app`.`orders` add index (x)", Kind::Ddl, vec![(Some("app"), "orders")]),
        ("CREATE UNIQUE INDEX ix ON orders (a, b)", Kind::Ddl, vec![(None, "orders")]),
        ("DROP INDEX ix ON app.orders", Kind::Ddl, vec![(Some("app"), "orders")]),
        ("DROP TABLE IF EXISTS a, `b`", Kind::Ddl, vec![(None, "a"), (None, "b")]),
        ("RENAME TABLE a TO b, c TO d", Kind::Ddl, vec![(None, "a"), (None, "b"), (None, "c"), (None, "d")]),
        ("TRUNCATE TABLE t", Kind::Ddl, vec![(None, "t")]),
        ("CREATE TABLE IF NOT EXISTS n (id INT)", Kind::Ddl, vec![(None, "n")]),
        ("CALL do_things()", Kind::Ddl, vec![]),
        ("/* why */ UPDATE t SET a = 1", Kind::Dml, vec![]),
        ("insert into t values (1)", Kind::Dml, vec![]),
        ("WITH x AS (SELECT 1) SELECT * FROM x", Kind::Dml, vec![]),
        ("SET @a = 1", Kind::Dml, vec![]),
    ];
    for (sql, kind, tables) in table {
        let (k, t) = classify(sql).unwrap();
        let want: Vec<TableRef> = tables.into_iter().map(|(s, t)| (s.map(str::to_owned), t.to_owned())).collect();
        assert_eq!((k, t), (kind, want), "{sql}");
    }
}

#[test]
fn refuses_transaction_control_and_delimiter_with_what_to_do() {
    for sql in
        ["BEGIN", "COMMIT", "rollback", "START TRANSACTION", "SET autocommit = 0", "DELIMITER //", "XA START 'x'"]
    {
        let e = classify(sql).unwrap_err();
        assert!(e.contains("remove it") || e.contains("one statement per"), "{sql}: {e}");
    }
    let e = parse_revision("V1__x.sql", 1, "x".into(), b"UPDATE t SET a=1; COMMIT;").unwrap_err().to_string();
    assert!(e.contains("V1__x.sql") && e.contains("statement 2"), "{e}");
    let e = parse_revision("V1__x.sql", 1, "x".into(), b"-- nothing\n").unwrap_err().to_string();
    assert!(e.contains("no statement"), "{e}");
}

#[test]
fn loads_a_directory_sorted_and_refuses_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("V10__ten.sql"), "UPDATE t SET a = 10;").unwrap();
    std::fs::write(dir.path().join("V2__two.sql"), "ALTER TABLE t ADD COLUMN b INT; UPDATE t SET b = 2;").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
    let revs = load_dir(dir.path()).unwrap();
    assert_eq!(revs.iter().map(|r| r.version).collect::<Vec<_>>(), vec![2, 10]);
    assert!(revs[0].has_ddl() && !revs[1].has_ddl());
    std::fs::write(dir.path().join("V02__again.sql"), "SELECT 1;").unwrap();
    let e = load_dir(dir.path()).unwrap_err().to_string();
    assert!(e.contains("version 2 is given twice"), "{e}");
}

// --- attacks: a developer's near-miss is refused, never skipped ---

#[test]
fn attack_near_miss_names_are_refused_not_skipped() {
    for bad in [
        "v1__lower.sql",
        "V1__x.SQL",
        "V1__x.Sql",
        "V1__x.sql~",
        "V1__x.sql.bak",
        "V1__x",
        "v01__x.sql",
        "V01_x.sql",
        "V1__.sql",
    ] {
        let e = parse_name(bad).unwrap_err().to_string();
        assert!(e.contains(bad) && e.contains("expected V<n>__"), "{bad}: {e}");
    }
    assert_eq!(parse_name("V01__x.sql").unwrap(), Some((1, "x".into())), "leading zeros: the same version");
    assert_eq!(parse_name("V18446744073709551615__max.sql").unwrap(), Some((u64::MAX, "max".into())));
}

#[test]
fn attack_a_directory_named_like_a_revision_is_refused_and_a_symlink_is_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("V1__folder.sql")).unwrap();
    let e = load_dir(dir.path()).unwrap_err().to_string();
    assert!(e.contains("V1__folder.sql") && e.contains("not a file"), "{e}");
    std::fs::remove_dir(dir.path().join("V1__folder.sql")).unwrap();
    let target = dir.path().join("real.txt");
    std::fs::write(&target, "UPDATE t SET a = 1;").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("V1__linked.sql")).unwrap();
    let revs = load_dir(dir.path()).unwrap();
    assert_eq!(revs[0].checksum, checksum(b"UPDATE t SET a = 1;"));
    std::os::unix::fs::symlink(dir.path().join("gone"), dir.path().join("V2__dangling.sql")).unwrap();
    assert!(load_dir(dir.path()).unwrap_err().to_string().contains("V2__dangling.sql"));
}

#[test]
fn attack_a_link_out_of_the_directory_is_refused_and_one_inside_is_read() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("password");
    std::fs::write(&secret, "Outs1de-Secret\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A ConfigMap volume: every file a link into `..data`, itself a link to a folder in the volume.
    std::fs::create_dir(dir.path().join("..2026_12_04")).unwrap();
    std::fs::write(dir.path().join("..2026_12_04/V1__one.sql"), "UPDATE t SET a = 1;").unwrap();
    std::os::unix::fs::symlink("..2026_12_04", dir.path().join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/V1__one.sql", dir.path().join("V1__one.sql")).unwrap();
    assert_eq!(load_dir(dir.path()).unwrap()[0].checksum, checksum(b"UPDATE t SET a = 1;"));
    // Out, directly, through a link inside, and by `..`: refused, naming the file, not its target.
    std::os::unix::fs::symlink(&secret, dir.path().join("inner-link")).unwrap();
    for (name, target) in [
        ("V2__pw.sql", secret.clone()),
        ("V2__via.sql", dir.path().join("inner-link")),
        ("V2__up.sql", PathBuf::from("../").join(outside.path().file_name().unwrap()).join("password")),
    ] {
        std::os::unix::fs::symlink(&target, dir.path().join(name)).unwrap();
        let e = load_dir(dir.path()).unwrap_err();
        assert!(matches!(e, RevisionError::Outside { .. }), "{name}: {e}");
        let e = e.to_string();
        assert!(e.contains(name) && e.contains("outside the revision directory"), "{e}");
        assert!(!e.contains("Outs1de") && !e.contains("password"), "{e}");
        std::fs::remove_file(dir.path().join(name)).unwrap();
    }
    // The directory itself through a link: its files are inside it.
    let link = outside.path().join("dir-link");
    std::os::unix::fs::symlink(dir.path(), &link).unwrap();
    assert_eq!(load_dir(&link).unwrap().len(), 1);
}

#[test]
fn attack_a_name_with_control_characters_is_refused_and_printed_escaped() {
    for bad in ["V1__x\nINFO forged.sql", "V1__x\r.sql", "V1__a\u{1b}[2J.sql", "V1__txt\u{202e}lqs.sql", "V1__x.sql\n"]
    {
        let e = parse_name(bad).unwrap_err().to_string();
        assert!(!e.contains('\n') && !e.contains('\r') && !e.contains('\u{1b}') && !e.contains('\u{202e}'), "{e:?}");
        assert!(e.contains(&escape(bad)), "{e:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("V1__evil\nINFO forged line.sql"), "UPDATE t SET a = 1;").unwrap();
    let e = load_dir(dir.path()).unwrap_err().to_string();
    assert!(e.contains("V1__evil\\nINFO forged line.sql") && !e.contains('\n'), "{e:?}");
    // Not meant as a revision: ignored, never printed.
    std::fs::remove_file(dir.path().join("V1__evil\nINFO forged line.sql")).unwrap();
    std::fs::write(dir.path().join("notes\n.txt"), "x").unwrap();
    assert!(load_dir(dir.path()).unwrap().is_empty());
}

#[test]
fn escape_keeps_a_name_on_one_line_and_readable() {
    let table = [
        ("V1__add_orders.sql", "V1__add_orders.sql"),
        ("добавить 🚀", "добавить 🚀"),
        ("a\nb\rc\td", "a\\nb\\rc\\td"),
        ("back\\slash", "back\\\\slash"),
        ("esc\u{1b}[31m", "esc\\u{1b}[31m"),
        ("rtl\u{202e}x \u{200b}\u{feff}", "rtl\\u{202e}x \\u{200b}\\u{feff}"),
        ("soft\u{ad}hyphen\u{e0001}tag", "soft\\u{ad}hyphen\\u{e0001}tag"),
        ("nul\0", "nul\\u{0}"),
    ];
    for (name, want) in table {
        assert_eq!(escape(name), want, "{name:?}");
    }
}

#[test]
fn attack_an_oversized_revision_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    // Sparse: 200 MB by its metadata, nothing on disk. Reading it would take 200 MB of memory.
    let f = std::fs::File::create(dir.path().join("V1__dump.sql")).unwrap();
    f.set_len(200 << 20).unwrap();
    let e = load_dir(dir.path()).unwrap_err();
    assert!(matches!(e, RevisionError::TooLarge { size, .. } if size == 200 << 20), "{e}");
    let e = e.to_string();
    assert!(e.contains("V1__dump.sql") && e.contains(&MAX_REVISION_BYTES.to_string()), "{e}");
    // At the limit: read (the file is NULs: not a statement, but read).
    f.set_len(MAX_REVISION_BYTES).unwrap();
    let e = load_dir(dir.path()).unwrap_err().to_string();
    assert!(!e.contains("more than a revision may be"), "{e}");
    // A FIFO named like a revision is refused without waiting for a writer.
    std::fs::remove_file(dir.path().join("V1__dump.sql")).unwrap();
    let made = std::process::Command::new("mkfifo").arg(dir.path().join("V1__fifo.sql")).status().unwrap();
    assert!(made.success());
    let e = load_dir(dir.path()).unwrap_err().to_string();
    assert!(e.contains("V1__fifo.sql") && e.contains("not a file"), "{e}");
}

#[test]
fn attack_ddl_hidden_behind_set_statement_is_ddl() {
    // MariaDB: `SET STATEMENT … FOR ALTER` commits implicitly; taken as DML it
    // would run inside the revision's transaction with no `started` mark.
    let (k, t) = classify("SET STATEMENT max_statement_time = 0 FOR ALTER TABLE orders ADD c INT").unwrap();
    assert_eq!((k, t), (Kind::Ddl, vec![(None, "orders".to_owned())]));
    let (k, _) = classify("SET STATEMENT max_statement_time = 60 FOR UPDATE orders SET v = 1").unwrap();
    assert_eq!(k, Kind::Dml);
    assert!(classify("SET STATEMENT lock_wait_timeout = 3600 FOR ALTER TABLE t ADD c INT").is_err());
}

#[test]
fn attack_mariadb_executable_comments_are_sent_and_classified() {
    // `/*M!…*/` runs on MariaDB: it must neither be dropped as a comment nor taken as DML.
    let r = parse_revision(
        "V1__x.sql",
        1,
        "x".into(),
        b"UPDATE t SET a = 1;
/*M!100100 ALTER TABLE t ADD c INT */;",
    )
    .unwrap();
    assert_eq!(r.statements.len(), 2, "{:#?}", r.statements);
    assert_eq!(r.statements[1].kind, Kind::Ddl);
    assert!(r.has_ddl());
    let r = parse_revision("V1__x.sql", 1, "x".into(), b"/*!50001 CREATE VIEW v AS SELECT 1 */;").unwrap();
    assert_eq!(r.statements[0].kind, Kind::Ddl);
}

#[test]
fn attack_runner_owned_session_settings_and_use_are_refused() {
    for sql in [
        "SET @@session.autocommit = 0",
        "SET LOCAL autocommit = 0",
        "SET SESSION innodb_lock_wait_timeout = 600",
        "SET @@lock_wait_timeout = 31536000",
        "set completion_type = 2",
        "SET a = 1, @@SESSION.wait_timeout = 5",
        "/*!40101 SET @@session.autocommit = 0 */",
    ] {
        let e = classify(sql).unwrap_err();
        assert!(e.contains("remove it"), "{sql}: {e}");
    }
    let e = classify("USE other_schema").unwrap_err();
    assert!(e.contains("qualify the table names"), "{e}");
    assert_eq!(classify("SET @x = 1").unwrap().0, Kind::Dml);
    assert_eq!(classify("SET foreign_key_checks = 0").unwrap().0, Kind::Dml);
    // Account statements commit implicitly: DDL, never inside a DML revision's transaction.
    assert_eq!(classify("SET PASSWORD FOR 'app'@'%' = PASSWORD('x')").unwrap().0, Kind::Ddl);
    assert_eq!(classify("SET DEFAULT ROLE r FOR 'app'@'%'").unwrap().0, Kind::Ddl);
}

#[test]
fn attack_compound_stored_programs_are_refused_before_anything_runs() {
    let text = "ALTER TABLE t ADD c INT;\nCREATE TRIGGER trg BEFORE INSERT ON t FOR EACH ROW BEGIN\n  SET NEW.a = 1;\n  SET NEW.b = 2;\nEND;";
    let e = parse_revision("V1__x.sql", 1, "x".into(), text.as_bytes()).unwrap_err().to_string();
    assert!(e.contains("statement 2") && e.contains("BEGIN … END"), "{e}");
    let e = parse_revision("V1__x.sql", 1, "x".into(), b"DELIMITER //\nCREATE PROCEDURE p() BEGIN SELECT 1; END//")
        .unwrap_err()
        .to_string();
    assert!(e.contains("DELIMITER"), "{e}");
    // A one-statement body needs no BEGIN and is accepted; so is a column named `begin`.
    assert!(classify("CREATE TRIGGER trg BEFORE INSERT ON t FOR EACH ROW SET NEW.a = 1").is_ok());
    assert!(classify("CREATE TABLE t (`begin` INT)").is_ok());
}

#[test]
fn attack_split_holds_on_quotes_comments_and_escapes() {
    let text = "INSERT INTO t VALUES ('a;b', 'it''s;', 'back\\\\;', \"d;q\");\n\
                # hash; comment\n-- dash; comment\n/* block ; */ UPDATE t SET a = '/* ; */';\n\
                UPDATE t SET a = 1 -- no semicolon at the end";
    let got = split(text);
    assert_eq!(got.len(), 3, "{got:#?}");
    assert!(got[0].ends_with("\"d;q\")"), "{}", got[0]);
    assert!(got[1].ends_with("'/* ; */'"), "{}", got[1]);
}

#[test]
fn attack_bom_empty_and_non_utf8_files() {
    let r = parse_revision("V1__x.sql", 1, "x".into(), "\u{feff}ALTER TABLE t ADD c INT;".as_bytes()).unwrap();
    assert!(r.statements[0].sql.starts_with("ALTER"), "the BOM is not sent: {:?}", r.statements[0].sql);
    let e = parse_revision("V1__x.sql", 1, "x".into(), b"").unwrap_err().to_string();
    assert!(e.contains("no statement"), "{e}");
    let e = parse_revision("V1__x.sql", 1, "x".into(), b"UPDATE t SET a = '\xff';").unwrap_err().to_string();
    assert!(e.contains("not UTF-8"), "{e}");
}

#[test]
fn attack_crlf_and_bom_checkouts_are_the_same_revision_but_an_edit_is_not() {
    let lf = parse_revision("V1__x.sql", 1, "x".into(), b"UPDATE t SET a = 1;\nUPDATE t SET b = 2;\n").unwrap();
    let crlf = parse_revision("V1__x.sql", 1, "x".into(), b"UPDATE t SET a = 1;\r\nUPDATE t SET b = 2;\r\n").unwrap();
    let bom =
        parse_revision("V1__x.sql", 1, "x".into(), "\u{feff}UPDATE t SET a = 1;\nUPDATE t SET b = 2;\n".as_bytes())
            .unwrap();
    assert_eq!(lf.checksum, crlf.checksum);
    assert_eq!(lf.checksum, bom.checksum);
    assert_eq!(lf.checksum, lf.raw_checksum, "an LF file's checksum is the SHA-256 of its bytes, as before");
    let edited = parse_revision("V1__x.sql", 1, "x".into(), b"UPDATE t SET a = 1;\nUPDATE t SET b = 3;\n").unwrap();
    assert_ne!(lf.checksum, edited.checksum);
}
